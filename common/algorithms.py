"""Which algorithm runs: DE, CE, DP-MASE, CDE and the two baselines, with their derived parameters.

One frozen object holds what an experiment needs (the coordinator stores it, the agents and the
simulators read it): the vote threshold M, each agent's local subroutine and confidence, the vote
drop probability, and whether a SER4 reset resets the whole experiment (DSER4).

Byzantine tolerance (`tolerance` = f >= 0, voting algorithms only). The papers' threshold is
M = ceil(log delta / log eta) (CE: eta_xi, DP-MASE: beta), and Theorem 1's argument is that the
best arm leaves only if M distinct agents vote against it, each honest one doing so with
probability at most eta, so the failure probability is <= eta^M <= delta. eta^M bounds the chance
that M given agents all err; with N > M agents the union over them gives C(N, M) eta^M, vacuous at
the papers' settings (docs/SUBROUTINES.md, section 3): the measured failure rates, not this bound,
are what docs/RESULTS.md reports. The argument also assumes every voter is honest: f agents that
vote against the best arm (and nothing else) supply f of the M votes for free, and with f >= M they
remove it every time. With a tolerance f the threshold in force is M + f: with at most f Byzantine
agents an arm leaves only with at least M honest votes, so the liars add nothing to what the honest
agents' errors can do, whatever they send. The price: N >= M + f agents are needed (checked by `validate_for`),
and up to (M + f) K - 1 messages instead of M K - 1. f = 0 is the papers' algorithm, unchanged.

CDE (common.cde, docs/CDE.md) does not vote: each agent sends one randomized report, and its
threshold is chosen from N, the number of agents, so `threshold` needs N for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.cde import DEFAULT_PRIVACY, check_privacy, threshold_for
from common.errors import ParameterError
from common.ldp import (
    DEFAULT_DP_EPSILON,
    DEFAULT_REPORTS_PER_AGENT,
    check_dp_epsilon,
    check_reports_per_agent,
)
from common.params import (
    check_agents_for_dropped_votes,
    check_agents_for_threshold,
    check_epsilon,
    check_epsilon_for_rewards,
    check_open_unit,
    check_reward_family,
    check_tolerance,
    corrupted_local_confidence,
    corrupted_threshold,
    tie_warning,
    vote_threshold,
)
from common.subroutines import SUBROUTINES, USER_SUBROUTINES, LocalParams
from common.subroutines.base import BOUNDED, SUB_GAUSSIAN
from common.subroutines.fixed_budget import samples_per_arm

ALGORITHMS = ("de", "ce", "dp-mase", "cde", "ldp", "independent", "central")
VOTING = ("de", "ce", "dp-mase")
REPORTING = ("cde",)  # one randomized report per agent (common.cde)
CROWD = ("ldp",)  # no agent learns: B private reports each, the coordinator decides (common.ldp)
TOLERANT = VOTING + REPORTING + CROWD
# Hillel et al.'s synchronous players (common/hillel.py): not DE, no AlgorithmConfig; named here so
# that choosing one needs no compiler loaded.
HILLEL_ALGORITHMS = ("hillel-one-round", "hillel-multi-round")


DEFAULTS_SUBROUTINE = "ser3"
DP_MASE_EPSILON = 0.1  # DP-MASE's eps_dp per reward when none is given


def default_dp_epsilon(algorithm: str) -> float:
    """dp_epsilon when none is given: LDP's per report (1.0), else DP-MASE's per reward (0.1)."""
    return DEFAULT_DP_EPSILON if algorithm == "ldp" else DP_MASE_EPSILON


@dataclass(frozen=True)
class AlgorithmConfig:
    """tolerance = f: the vote threshold is M + f (see the module docstring). Guarantee: with at
    most f Byzantine agents an arm leaves only with at least M honest votes, so the liars add
    nothing to what honest errors can do (see the module docstring for what that certifies);
    N >= M + f agents are required. f = 0 (the default) is the papers' algorithm and threshold,
    unchanged."""

    algorithm: str = "de"
    subroutine: str = DEFAULTS_SUBROUTINE
    epsilon: float = 0.25
    delta: float = 0.05
    eta: float = 0.9
    xi: float = 0.0
    dp_epsilon: float = DP_MASE_EPSILON  # ldp: pass default_dp_epsilon("ldp") (the CLI, the API)
    beta: float = 0.5
    phi: float = 0.0
    every_arm: bool = False
    tolerance: int = 0  # f: Byzantine agents tolerated; the vote threshold is M + f
    # CDE: P, the hit-rate bound under a uniform prior over which arm is best;
    # e0 = log(P (K-1)/(1-P))
    privacy: float = DEFAULT_PRIVACY
    # LDP: B, the reports one agent may send (its privacy is B * dp_epsilon over its history)
    reports_per_agent: int = DEFAULT_REPORTS_PER_AGENT

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ParameterError(
                "algorithm", self.algorithm, f"must be one of {', '.join(ALGORITHMS)}"
            )
        if self.subroutine not in USER_SUBROUTINES:
            raise ParameterError(
                "subroutine", self.subroutine, f"must be one of {', '.join(USER_SUBROUTINES)}"
            )
        check_epsilon(self.epsilon)
        check_open_unit("delta", self.delta)
        check_open_unit("eta", self.eta)
        if self.algorithm == "de" and self.delta >= self.eta:
            raise ParameterError("delta", self.delta, f"must be < eta={self.eta}")
        if self.algorithm != "ce" and self.xi != 0.0:
            raise ParameterError("xi", self.xi, "vote dropping is for --algorithm ce only")
        if self.algorithm == "ce" and not 0.0 < self.xi < 1.0:
            raise ParameterError("xi", self.xi, "CE needs xi in (0, 1)")
        if self.algorithm == "dp-mase":
            check_open_unit("beta", self.beta)
            if not self.dp_epsilon > 0:
                raise ParameterError("dp_epsilon", self.dp_epsilon, "must be > 0")
            if self.subroutine not in ("se", "ser3"):
                raise ParameterError(
                    "subroutine", self.subroutine, "DP-MASE runs its own DP successive elimination"
                )
            if self.delta >= self.beta:
                raise ParameterError("delta", self.delta, f"must be < beta={self.beta}")
        if self.subroutine == "ser4":
            if not 0.0 < self.phi < 1.0:
                raise ParameterError("phi", self.phi, "SER4 needs a reset probability in (0, 1)")
        elif self.phi != 0.0:
            raise ParameterError(
                "phi", self.phi, "a reset probability is for --subroutine ser4 only"
            )
        if self.algorithm == "ldp":
            check_dp_epsilon(self.dp_epsilon)
            check_reports_per_agent(self.reports_per_agent)
            if self.subroutine != DEFAULTS_SUBROUTINE:
                raise ParameterError(
                    "subroutine", self.subroutine, "LDP has no local run: the coordinator decides"
                )
        elif self.reports_per_agent != DEFAULT_REPORTS_PER_AGENT:
            raise ParameterError(
                "reports_per_agent", self.reports_per_agent, "reports per agent are for ldp only"
            )
        check_tolerance(self.tolerance)
        if self.tolerance > 0 and self.algorithm not in TOLERANT:
            raise ParameterError(
                "tolerance",
                self.tolerance,
                f"a Byzantine tolerance is for {', '.join(TOLERANT)} only",
            )
        if self.algorithm == "cde":
            if self.subroutine != "ser3":
                raise ParameterError(
                    "subroutine", self.subroutine, "CDE runs its own fixed-budget local run"
                )
            check_open_unit("privacy", self.privacy)
        elif self.privacy != DEFAULT_PRIVACY:
            raise ParameterError(
                "privacy", self.privacy, "a privacy bound is for --algorithm cde only"
            )

    @property
    def local_subroutine(self) -> str:
        if self.algorithm == "cde":
            return "fixed-budget"
        return "dp-se" if self.algorithm == "dp-mase" else self.subroutine

    @property
    def votes(self) -> bool:
        return self.algorithm in VOTING

    @property
    def reports(self) -> bool:
        """CDE: one randomized report per agent instead of votes."""
        return self.algorithm in REPORTING

    @property
    def crowd(self) -> bool:
        """LDP: agents send private reports of single rewards; the coordinator learns."""
        return self.algorithm in CROWD

    @property
    def user_privacy(self) -> float | None:
        """LDP: B * dp_epsilon, the local privacy of everything one agent sends."""
        return self.reports_per_agent * self.dp_epsilon if self.crowd else None

    @property
    def report_privacy(self) -> float | None:
        """CDE's P (its hit-rate bound under a uniform prior, which sets e0), for the agents'
        randomized report; None for the others."""
        return self.privacy if self.reports else None

    @property
    def vote_drop(self) -> float:
        return self.xi if self.algorithm == "ce" else 0.0

    @property
    def global_reset(self) -> bool:
        """DSER4: an agent's SER4 reset resets the experiment (votes cleared, every arm back)."""
        return self.votes and self.subroutine == "ser4"

    def threshold(self, n_arms: int, n_agents: int | None = None) -> int | None:
        """The vote threshold in force, M + f (f = `tolerance`, 0 by default: the papers' M), or
        None for the baselines, which do not vote. CDE: the reports that accept an arm, chosen
        from N = `n_agents` (required): the smallest that certifies delta, liars included."""
        if self.reports:
            if n_agents is None:
                raise ParameterError("agents", None, "CDE's threshold is chosen from N agents")
            check_privacy(self.privacy, n_arms)
            return threshold_for(
                n_agents, self.delta, self.eta, self.privacy, n_arms, self.tolerance
            )
        base = self.base_threshold(n_arms)
        return None if base is None else base + self.tolerance

    def base_threshold(self, n_arms: int) -> int | None:
        """The papers' M = ceil(log delta / log eta) (CE: eta_xi, DP-MASE: beta), without the
        Byzantine tolerance; None for the baselines."""
        if self.algorithm == "de":
            return vote_threshold(self.delta, self.eta)
        if self.algorithm == "ce":
            return corrupted_threshold(self.delta, self.eta, self.xi, n_arms)
        if self.algorithm == "dp-mase":
            return vote_threshold(self.delta, self.beta)
        return None

    def local_confidence(self, n_arms: int, n_agents: int) -> float:
        if self.algorithm in ("de", "cde"):
            return self.eta
        if self.crowd:
            return self.delta
        if self.algorithm == "ce":
            return corrupted_local_confidence(self.eta, self.xi, n_arms)
        if self.algorithm == "dp-mase":
            return self.beta
        if self.algorithm == "independent":
            return self.delta / n_agents
        return self.delta

    def local_params(
        self,
        n_arms: int,
        n_agents: int,
        sigma: float | None,
        bernoulli: bool = False,
        pulls: int | None = None,
    ) -> LocalParams:
        """The local run's parameters. CDE: its T is `pulls` (what the experiment published),
        else `pulls_per_arm`."""
        self.check_rewards(sigma, bernoulli)
        return LocalParams(
            epsilon=self.epsilon,
            confidence=self.local_confidence(n_arms, n_agents),
            sigma=sigma,
            every_arm=self.every_arm,
            phi=self.phi,
            dp_epsilon=self.dp_epsilon,
            pulls=(pulls or self.pulls_per_arm(n_arms, sigma, bernoulli)) if self.reports else None,
        )

    def pulls_per_arm(
        self, n_arms: int, sigma: float | None, bernoulli: bool = False
    ) -> int | None:
        """CDE: T, each agent's pulls per arm, from eps, eta, K and the rewards (sub-Gaussian T
        for sigma-sub-Gaussian or [0, 1] rewards, the exact binomial T for rewards declared
        Bernoulli); None for the other algorithms."""
        if not self.reports:
            return None
        return samples_per_arm(self.epsilon, self.eta, n_arms, sigma, bernoulli)

    def check_rewards(self, sigma: float | None, bernoulli: bool = False) -> None:
        """Refuse rewards (sigma None: [0, 1], or 0/1 with `bernoulli`; else sigma-sub-Gaussian)
        that the local subroutine's confidence bounds do not hold for, or an eps that leaves
        nothing to find."""
        if bernoulli:
            check_reward_family("bernoulli", sigma)
        check_epsilon_for_rewards(self.epsilon, sigma)
        if self.algorithm == "dp-mase" and sigma is not None:
            raise ParameterError(
                "rewards", "gaussian", "DP-MASE needs rewards in [0, 1] (Bernoulli)"
            )
        supported = SUBROUTINES[self.local_subroutine].rewards
        model = BOUNDED if sigma is None else SUB_GAUSSIAN
        if model not in supported:
            raise ParameterError(
                "subroutine",
                self.local_subroutine,
                f"its confidence bounds hold for {' and '.join(supported)} rewards, not {model}",
            )

    def validate_for(self, n_arms: int, n_agents: int) -> int | None:
        """Check the whole configuration for K arms and N agents (N >= M + f); return M + f."""
        if n_arms < 2:
            raise ParameterError("arms", n_arms, "need at least 2 arms")
        if n_agents < 1:
            raise ParameterError("agents", n_agents, "must be >= 1")
        if self.reports:
            check_agents_for_threshold(n_agents, self.tolerance + 1, self.tolerance)
            return self.threshold(n_arms, n_agents)
        threshold = self.threshold(n_arms)
        if threshold is not None:
            check_agents_for_threshold(n_agents, threshold, self.tolerance)
            if self.algorithm == "ce":
                check_agents_for_dropped_votes(n_agents, threshold, self.xi)
        assert self.local_subroutine in SUBROUTINES
        return threshold

    def warnings(self, n_arms: int, n_agents: int) -> list[str]:
        """What this configuration risks with N agents without being invalid: ties."""
        if self.reports:
            return []
        threshold = self.threshold(n_arms)
        if threshold is None:
            return []
        return [w for w in (tie_warning(n_agents, threshold),) if w]


# The defaults of every configuration field, written once (the dataclass above): the coordinator's
# settings (DEXP_ALGORITHM, DEXP_EPSILON, ...) and the API's ExperimentCreate read them from here.
DEFAULTS = AlgorithmConfig()
