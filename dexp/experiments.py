"""The papers' experiments as data: which problem, which agent counts, which series, which figures.

`EXPERIMENTS` maps an experiment name (`dexp reproduce NAME`) to its definition; the results
document refers to these names and series labels. Sources: Feraud et al. ICML 2019 (seed 000),
section 5; Rio et al. ICML 2023 (seed 002), section 6 and appendix C. ALGORITHMS.md, "Experiments to
reproduce", lists the claims each one checks.

Each point (series, N) runs `trials` trials with trial seeds `trial_seeds(seed, trials)`: the same
seeds for every point (common random numbers), and trial i of a row is reproduced by
`dexp simulate` with the same parameters, `--seed SEED --trials >= i + 1`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from common import cde
from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import PROBLEMS, Problem
from common.errors import ParameterError
from dexp.plan import Excluded, voting_candidate

FERAUD_AGENTS = (32, 64, 128, 256, 512, 1024)
RIO_AGENTS = (64, 128, 256, 512, 1024)
METRICS = ("sample_complexity", "messages")


@dataclass(frozen=True)
class Series:
    """One curve: an algorithm with its parameters, optionally under another activation."""

    label: str
    algorithm: str = "de"
    subroutine: str = "ser3"
    xi: float = 0.0
    dp_epsilon: float = 0.1
    beta: float = 0.5
    activation: str | None = None  # an Activation spec; None: the problem's
    eta: float | None = None  # None: the experiment's
    # CDE: its P (the hit-rate bound under a uniform prior, which sets e0); None: the strongest
    # that certifies delta with each N
    privacy: float | None = None
    # DE, CE, DP-MASE: the threshold and confidence that certify delta with each N (dexp plan's)
    certified: bool = False

    def algorithm_config(self, experiment: Experiment, n_agents: int) -> AlgorithmConfig:
        base = AlgorithmConfig(
            algorithm=self.algorithm,
            subroutine=self.subroutine,
            epsilon=experiment.epsilon,
            delta=experiment.delta,
            eta=experiment.eta if self.eta is None else self.eta,
            xi=self.xi,
            dp_epsilon=self.dp_epsilon,
            beta=self.beta,
            every_arm=experiment.every_arm,
        )
        n_arms = experiment.problem_def.environment.n_arms
        if self.algorithm == "cde":
            privacy = self.privacy
            if privacy is None:
                privacy = cde.strongest_privacy(n_agents, base.delta, base.eta, n_arms)
            if privacy is None:
                raise ParameterError(
                    "agents", n_agents, f"no CDE privacy bound certifies delta (eta={base.eta:g})"
                )
            return replace(base, privacy=privacy)
        if self.certified:
            found = voting_candidate(
                self.label, self.algorithm, self.subroutine, base, n_arms, n_agents
            )
            if isinstance(found, Excluded):
                raise ParameterError("agents", n_agents, str(found))
            return replace(found.algo, every_arm=experiment.every_arm)
        return base

    def activation_for(self, experiment: Experiment) -> Activation:
        if self.activation is None:
            return experiment.problem_def.activation
        return Activation.parse(self.activation)


@dataclass(frozen=True)
class Panel:
    """One axes of a figure: a title and the labels of the series drawn on it."""

    title: str
    series: tuple[str, ...]


@dataclass(frozen=True)
class Figure:
    """One PNG file, DIR/{experiment}_{suffix}.png: one metric against N, one or more panels."""

    suffix: str
    metric: str  # "sample_complexity" | "messages"
    title: str
    panels: tuple[Panel, ...]
    paper: str = ""  # the figure of the paper it reproduces, if any


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    source: str
    problem: str  # a key of common.environments.PROBLEMS
    series: tuple[Series, ...]
    figures: tuple[Figure, ...]
    agents: tuple[int, ...]
    trials: int
    stop: str = "all-agents"
    every_arm: bool = False
    epsilon: float = 0.25
    delta: float = 0.05
    eta: float = 0.9
    claims: tuple[str, ...] = field(default=())

    @property
    def problem_def(self) -> Problem:
        return PROBLEMS[self.problem]

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.series)

    def select(self, labels: list[str] | None) -> tuple[Series, ...]:
        """The series named by `labels` (all of them when None), in the experiment's order."""
        if not labels:
            return self.series
        unknown = [label for label in labels if label not in self.labels]
        if unknown:
            raise ParameterError("series", unknown[0], f"must be one of {', '.join(self.labels)}")
        return tuple(s for s in self.series if s.label in labels)


def _feraud_series() -> tuple[Series, ...]:
    # UGapEc in the paper; the explore-then-commit subroutine here is LUCB (ALGORITHMS.md).
    return (
        Series("DE-SER3", "de", "ser3"),
        Series("DE-LUCB", "de", "lucb"),
        Series("independent-SER3", "independent", "ser3"),
        Series("independent-LUCB", "independent", "lucb"),
        Series("central-SER3", "central", "ser3"),
        Series("central-LUCB", "central", "lucb"),
    )


def _feraud_figures(name: str, paper_sample: str, paper_messages: str) -> tuple[Figure, ...]:
    labels = tuple(s.label for s in _feraud_series())
    return (
        Figure(
            "sample_complexity",
            "sample_complexity",
            f"{name}: sample complexity",
            (Panel("", labels),),
            paper_sample,
        ),
        Figure(
            "messages",
            "messages",
            f"{name}: messages (independent sends none)",
            (Panel("", labels),),
            paper_messages,
        ),
    )


_FERAUD_COMMON = (
    "DE sample complexity grows about linearly in N",
    "DE-SER3 beats DE-LUCB (UGapEc in the paper)",
    "independent agents are far worse and get worse as N grows",
    "DE needs 3-4 orders of magnitude fewer messages than central (0-privacy)",
)

_RIO_FIG1_SERIES = (
    Series("DP-MASE eps=0.05", "dp-mase", "se", dp_epsilon=0.05, beta=0.5),
    Series("DP-MASE eps=0.1", "dp-mase", "se", dp_epsilon=0.1, beta=0.5),
    Series("DP-MASE eps=0.25", "dp-mase", "se", dp_epsilon=0.25, beta=0.5),
    Series("CE xi=0.05", "ce", "se", xi=0.05),
    Series("CE xi=0.1", "ce", "se", xi=0.1),
    Series("DE xi=0", "de", "se"),
    Series("central-SE", "central", "se"),
    Series("independent-SE", "independent", "se"),
)

_RIO_POWERLAW_SERIES = (
    Series("DP-MASE eps=0.1 uniform", "dp-mase", "se", dp_epsilon=0.1, activation="uniform"),
    Series("DP-MASE eps=0.1 power", "dp-mase", "se", dp_epsilon=0.1, activation="power:0:0.8"),
    Series("CE xi=0.05 uniform", "ce", "se", xi=0.05, activation="uniform"),
    Series("CE xi=0.05 power", "ce", "se", xi=0.05, activation="power:0:0.8"),
)

# Issue "fewer activations at the same guarantees": every subroutine, DE at the papers' (eps,
# delta, eta). ME is left out (14x SER3 on Problem 1, docs/RESULTS.md), SER4 needs a drift rate.
SUBROUTINE_SERIES = (
    ("DE-SER3", "ser3"),
    ("DE-SE", "se"),
    ("DE-LUCB", "lucb"),
    ("DE-UGapEc", "ugapec"),
    ("DE-KL-SE", "kl-se"),
    ("DE-stitched-SE", "stitched-se"),
    ("DE-KL-LUCB", "kl-lucb"),
    ("DE-stitched-LUCB", "stitched-lucb"),
)
SUBROUTINE_AGENTS = (32, 256, 1024)


def _subroutine_experiment(name: str, problem: str, description: str) -> Experiment:
    gaussian = not PROBLEMS[problem].environment.bounded
    series = tuple(
        Series(label, "de", sub)
        for label, sub in SUBROUTINE_SERIES
        if not (gaussian and sub.startswith("kl-"))  # KL bounds hold for [0, 1] rewards only
    )
    labels = tuple(s.label for s in series)
    return Experiment(
        name=name,
        description=description,
        source="this project (docs/SUBROUTINES.md)",
        problem=problem,
        series=series,
        figures=(
            Figure(
                "sample_complexity",
                "sample_complexity",
                f"{name}: activations until every agent holds one arm",
                (Panel("", labels),),
            ),
        ),
        agents=SUBROUTINE_AGENTS,
        trials=100,
        claims=(
            "a sharper subroutine needs at least 2x fewer activations than SER3, failure <= delta",
        ),
    )


# Issue 24, point 3: CDE against DE at the papers' eta and at the thresholds that certify delta.
CDE_AGENTS = (64, 1024, 10_000)
CDE_ETA = 0.1
CDE_SERIES = (
    Series("CDE", "cde", eta=CDE_ETA),
    Series("DE-SER3", "de", "ser3"),
    Series("DE-stitched-LUCB", "de", "stitched-lucb"),
    Series("DE-SER3 certified", "de", "ser3", certified=True),
    Series("DE-stitched-LUCB certified", "de", "stitched-lucb", certified=True),
)


def _cde_experiment(name: str, problem: str, description: str) -> Experiment:
    labels = tuple(s.label for s in CDE_SERIES)
    return Experiment(
        name=name,
        description=description,
        source="this project (issue 24; docs/CDE.md)",
        problem=problem,
        series=CDE_SERIES,
        figures=tuple(
            Figure(metric, metric, f"{name}: {title}", (Panel("", labels),))
            for metric, title in (
                ("sample_complexity", "activations until the answer"),
                ("messages", "messages (CDE: one report per agent at most)"),
            )
        ),
        agents=CDE_AGENTS,
        trials=20,
        claims=(
            "CDE's failure rate stays within its certified failure, itself <= delta, at every N",
            "CDE's threshold and privacy bound are chosen from N: more agents, stronger privacy",
            "DE certifies delta only at the thresholds dexp plan finds, not at the papers' eta",
        ),
    )


_CENTRAL_SERIES = tuple(
    Series(label.replace("DE-", "central-"), "central", sub) for label, sub in SUBROUTINE_SERIES
)

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            name="feraud-fig1",
            description="Problem 1 (uniform agents): sample complexity and messages vs N",
            source="Feraud et al. 2019, Figures 1a and 1b",
            problem="feraud-1",
            series=_feraud_series(),
            figures=_feraud_figures("feraud-fig1", "Figure 1a", "Figure 1b"),
            agents=FERAUD_AGENTS,
            trials=20,
            claims=_FERAUD_COMMON,
        ),
        Experiment(
            name="feraud-fig2a",
            description="Problem 2 (half the agents make 80% of activations) vs N",
            source="Feraud et al. 2019, Figure 2a",
            problem="feraud-2",
            series=_feraud_series(),
            figures=_feraud_figures("feraud-fig2a", "Figure 2a", ""),
            agents=FERAUD_AGENTS,
            trials=20,
            claims=(
                "DE has two regimes: 32 agents are slower than 64, then linear growth",
                "independent agents get worse when P_N is skewed",
            ),
        ),
        Experiment(
            name="feraud-fig2b",
            description="Problem 3 (suboptimal arms decay by 1e-5 per activation) vs N",
            source="Feraud et al. 2019, Figure 2b",
            problem="feraud-3",
            series=_feraud_series(),
            figures=_feraud_figures("feraud-fig2b", "Figure 2b", ""),
            agents=FERAUD_AGENTS,
            trials=20,
            claims=("SER3 copes with the drift; DE stays far cheaper than independent",),
        ),
        Experiment(
            name="rio-fig1",
            description="Problem 1, every arm pulled per activation, global stop: DP-MASE and CE vs N",
            source="Rio et al. 2023, Figure 1 (and Figure 4 without baselines)",
            problem="feraud-1",
            series=_RIO_FIG1_SERIES,
            figures=(
                Figure(
                    "sample_complexity",
                    "sample_complexity",
                    "rio-fig1: sample complexity",
                    (
                        Panel(
                            "DP-MASE (beta = 0.5)",
                            (
                                "DP-MASE eps=0.05",
                                "DP-MASE eps=0.1",
                                "DP-MASE eps=0.25",
                                "central-SE",
                                "independent-SE",
                            ),
                        ),
                        Panel(
                            "Corrupted Elimination (eta = 0.9)",
                            ("CE xi=0.05", "CE xi=0.1", "DE xi=0", "central-SE", "independent-SE"),
                        ),
                    ),
                    "Figure 1",
                ),
                Figure(
                    "messages",
                    "messages",
                    "rio-fig1: messages (independent sends none)",
                    (Panel("", tuple(s.label for s in _RIO_FIG1_SERIES)),),
                ),
            ),
            agents=RIO_AGENTS,
            trials=10,
            stop="global",
            every_arm=True,
            claims=(
                "DP-MASE gets slower as eps_dp gets smaller (sharply below 0.1)",
                "CE with xi = 0.1 beats xi = 0.05 beats DE (xi = 0)",
                "both scale better than independent; central is far faster",
            ),
        ),
        Experiment(
            name="rio-powerlaw",
            description="Problem 1 arms, uniform vs power-law agents P(n) ~ n^-0.8, global stop",
            source="Rio et al. 2023, appendix C.4, Figure 6",
            problem="feraud-1",
            series=_RIO_POWERLAW_SERIES,
            figures=(
                Figure(
                    "sample_complexity",
                    "sample_complexity",
                    "rio-powerlaw: sample complexity, uniform vs power-law agents",
                    (
                        Panel(
                            "DP-MASE (eps = 0.1, beta = 0.5)",
                            ("DP-MASE eps=0.1 uniform", "DP-MASE eps=0.1 power"),
                        ),
                        Panel(
                            "Corrupted Elimination (xi = 0.05)",
                            ("CE xi=0.05 uniform", "CE xi=0.05 power"),
                        ),
                    ),
                    "Figure 6",
                ),
            ),
            agents=RIO_AGENTS,
            trials=10,
            stop="global",
            every_arm=True,
            claims=("skewed P_N makes DP-MASE and CE faster",),
        ),
        _subroutine_experiment(
            "subroutines-p1", "feraud-1", "every subroutine under DE on Problem 1 (uniform agents)"
        ),
        _subroutine_experiment(
            "subroutines-p2", "feraud-2", "every subroutine under DE on Problem 2 (skewed agents)"
        ),
        _subroutine_experiment(
            "subroutines-p3", "feraud-3", "every subroutine under DE on Problem 3 (drifting arms)"
        ),
        _subroutine_experiment(
            "subroutines-spread", "spread-20", "every subroutine under DE on 20 spread arms"
        ),
        _subroutine_experiment(
            "subroutines-gauss",
            "gauss-8",
            "every subroutine valid for Gaussian rewards under DE on 8 Gaussian arms",
        ),
        _cde_experiment(
            "cde-p1", "feraud-1", "CDE against DE on Problem 1 (uniform agents), N up to 10,000"
        ),
        _cde_experiment(
            "cde-p2", "feraud-2", "CDE against DE on Problem 2 (skewed agents), N up to 10,000"
        ),
        _cde_experiment(
            "cde-gauss",
            "gauss-8",
            "CDE against DE on 8 Gaussian arms nobody tuned for (skewed agents), N up to 10,000",
        ),
        Experiment(
            name="subroutines-central",
            description="the central baseline (every reward to one subroutine) on Problem 1",
            source="Feraud et al. 2019 report 800 samples for it (Figure 1a)",
            problem="feraud-1",
            series=_CENTRAL_SERIES,
            figures=(),
            agents=(32,),
            trials=200,
            claims=("the best bound brings the central baseline near the paper's 800",),
        ),
    )
}


def experiment(name: str) -> Experiment:
    try:
        return EXPERIMENTS[name]
    except KeyError:
        raise ParameterError(
            "experiment", name, f"must be one of {', '.join(EXPERIMENTS)}"
        ) from None
