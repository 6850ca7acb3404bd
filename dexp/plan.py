"""`dexp plan`: the configurations that certify delta with N agents, what each costs, and the
information-theoretic lower bound they are measured against.

Candidates (each checked by common.certificate.certify with the requested tolerance f):
- CDE at a few local error bounds eta (--eta): at the requested hit-rate bound under a uniform
  prior (--privacy), else at the strongest P that certifies (common.cde.strongest_privacy);
- DE (SER3, stitched-LUCB), CE (xi = 0.1) and DP-MASE (eps_dp = 0.1): their threshold is
  ceil(log delta / log b) (b = eta, eta_xi, beta) and each agent errs with probability at most
  c b, so for each threshold M there is an interval of b, and the smallest M for which some b of
  its interval certifies is taken, with the largest such b (fewest votes to wait for, then the
  fastest local runs).

Certified privacy: CDE's is `certified_epsilon`, e0, for every prior (its report multiplies any
adversary's odds by at most e^e0), beside its corollary under a uniform prior over which arm is
best, `hit_rate_uniform_prior` (common.cde.hit_rate_uniform_prior, with the instance's number of
eps-optimal arms). DE, CE and DP-MASE certify the papers' (eps, eta) privacy level
(common.privacy.papers_privacy), which bounds no hit rate (docs/PRIVACY.md): it is shown as
`papers_privacy`, and --privacy, a bound asked on the hit rate, keeps only CDE.

- LDP at a few privacy levels per report (--dp-epsilon) with B reports per device: it certifies
  delta with any N, and is listed when N B reports suffice (else excluded, with the devices it
  needs: the most reports any of ten runs with a fleet too large to run out took).

Activations: a short run of the fast simulator per configuration (few trials, a time budget),
with a 95% interval; the lower bound is common.lower_bound's (docs/LOWER_BOUND.md).
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from common import cde
from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.certificate import (
    LOCAL_ERROR_FACTORS,
    Certificate,
    certify,
    largest_local_error,
)
from common.environments import Environment, build_problem
from common.errors import ParameterError
from common.ldp import check_dp_epsilon, check_reports_per_agent
from common.params import ceil_log_ratio
from common.privacy import certifies, papers_privacy
from common.rounding import upper
from common.simulation import SimulationConfig, TrialResult, trial_seeds
from common.stats import Described, describe
from dexp.engines import trial_function
from dexp.options import DEFAULT_PROBLEM
from dexp.plan_cmd import CDE_ETAS, LDP_EPSILONS

if TYPE_CHECKING:  # common.lower_bound loads scipy: imported by make_plan, when a plan is made
    from common.lower_bound import LowerBound


CE_XI = 0.1  # Rio et al.'s faster setting
LDP_SIZING_AGENTS = 10**6  # a fleet large enough that the reports never run out: what one needs
DP_EPSILON = 0.1  # Rio et al.'s middle setting
# (label, algorithm, subroutine): the voting configurations searched
VOTING_CANDIDATES = (
    ("DE-SER3", "de", "ser3"),
    ("DE-stitched-LUCB", "de", "stitched-lucb"),
    ("CE-SER3", "ce", "ser3"),
    ("DP-MASE", "dp-mase", "se"),
)
HIT_RATE, PAPERS = "hit rate", "papers"


@dataclass
class Measured:
    """A short run of the fast simulator: activations (mean and 95% interval), messages, wrong
    outcomes, and the trials it had time for."""

    activations: Described
    messages: float
    failures: int
    trials: int

    def to_json(self) -> dict[str, Any]:
        a = self.activations
        finite = math.isfinite(a.ci95_low)
        return {
            "mean": a.mean,
            "ci95": [a.ci95_low, a.ci95_high] if finite else None,
            "trials": self.trials,
            "messages": self.messages,
            "failures": self.failures,
        }


@dataclass
class Candidate:
    """One configuration that certifies delta with N agents."""

    label: str
    algo: AlgorithmConfig
    certificate: Certificate
    hit_rate_bound: float | None  # CDE: common.cde.hit_rate_uniform_prior; None for the others
    papers_privacy: float | None  # DE, CE, DP-MASE: common.privacy.papers_privacy
    measured: Measured | None = None

    @property
    def threshold(self) -> int | None:
        return self.certificate.threshold

    @property
    def certified_epsilon(self) -> float | None:
        """CDE's e0 (common.cde.report_epsilon); LDP's B x dp_epsilon, the local privacy of all a
        device sends; None for the voting ones."""
        if self.algo.crowd:
            return self.algo.user_privacy
        if not self.algo.reports:
            return None
        return cde.report_epsilon(self.algo.privacy, self.certificate.arms)

    @property
    def title(self) -> str:
        """The label and the parameters that tell two rows of one algorithm apart."""
        return f"{self.label} ({', '.join(f'{k}={v:g}' for k, v in self.parameters().items())})"

    def parameters(self) -> dict[str, float]:
        a = self.algo
        if a.algorithm == "cde":
            return {"eta": a.eta, "privacy": a.privacy}
        if a.algorithm == "dp-mase":
            return {"beta": a.beta, "dp_epsilon": a.dp_epsilon}
        if a.crowd:
            return {"dp_epsilon": a.dp_epsilon, "reports_per_agent": a.reports_per_agent}
        if a.algorithm == "ce":
            return {"eta": a.eta, "xi": a.xi}
        return {"eta": a.eta}

    def to_json(self, bound: LowerBound) -> dict[str, Any]:
        measured = self.measured.to_json() if self.measured else None
        ratio = bound.ratio(self.measured.activations.mean) if self.measured else None
        return {
            "label": self.label,
            "algorithm": self.algo.algorithm,
            "subroutine": self.algo.local_subroutine,
            **self.parameters(),
            "tolerance": self.algo.tolerance,
            "threshold": self.threshold,
            "certified_failure": self.certificate.failure,
            "certificate": self.certificate.statement(),
            "certified_epsilon": self.certified_epsilon,
            "hit_rate_uniform_prior": self.hit_rate_bound,
            "papers_privacy": self.papers_privacy,
            "privacy_meaning": certifies(self.algo),
            "activations": measured,
            "ratio_to_lower_bound": ratio if ratio is None or math.isfinite(ratio) else None,
        }


@dataclass(frozen=True)
class Excluded:
    """A candidate left out: why, and the fewest agents with which it would certify (None when
    more agents would not help)."""

    label: str
    reason: str
    agents: int | None = None

    def __str__(self) -> str:
        return f"{self.label}: {self.reason}"


@dataclass
class Plan:
    agents: int
    delta: float
    environment: Environment
    bound: LowerBound
    candidates: list[Candidate] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)


# ----------------------------------------------------------------------------- the searches


def round_down(x: float, keeps: Callable[[float], bool]) -> float:
    """The shortest decimal at most x (2 to 8 decimals) that still `keeps` the property x has:
    a parameter printed as it is used."""
    for decimals in range(2, 9):
        scale = 10.0**decimals
        y = math.floor(x * scale) / scale
        if y > 0.0 and keeps(y):
            return y
    return x


def level_factor(algorithm: str, subroutine: str) -> float:
    """c' with each agent's error bound p = c' b, b the confidence its threshold comes from."""
    factor = LOCAL_ERROR_FACTORS["dp-se" if algorithm == "dp-mase" else subroutine]
    return factor * ((1.0 - CE_XI) if algorithm == "ce" else 1.0)


def voting_config(
    algorithm: str, subroutine: str, level: float, base: AlgorithmConfig, n_arms: int
) -> AlgorithmConfig:
    """The configuration whose threshold comes from the confidence b = `level`: DE's eta, CE's
    eta_xi (eta = 1 - (1 - eta_xi)(1 - xi)^(K - 1), Rio et al.'s Proposition 5.1 inverted),
    DP-MASE's beta."""
    if algorithm == "dp-mase":
        return replace(base, algorithm=algorithm, subroutine=subroutine, beta=level,
                       dp_epsilon=DP_EPSILON)  # fmt: skip
    if algorithm == "ce":
        eta = 1.0 - (1.0 - level) * (1.0 - CE_XI) ** (n_arms - 1)
        return replace(base, algorithm=algorithm, subroutine=subroutine, eta=eta, xi=CE_XI)
    return replace(base, algorithm=algorithm, subroutine=subroutine, eta=level)


def largest_level(
    threshold: int, agents: int, delta: float, factor: float, tolerance: int
) -> float | None:
    """The largest confidence b whose threshold ceil(log delta / log b) is `threshold` (b in
    (delta^(1/(M-1)), delta^(1/M)]) and whose error bound c' b certifies delta; None if none."""
    if threshold < 2 or threshold + tolerance > agents:
        return None
    low, high = delta ** (1.0 / (threshold - 1)), delta ** (1.0 / threshold)
    p = largest_local_error(agents, threshold + tolerance, delta, tolerance)
    level = min(high, p / factor)
    return level if level > low else None


def smallest(ok: Callable[[int], bool], low: int, limit: int) -> int | None:
    """The smallest n in [low, limit] with ok(n), None if not even `limit`
    (common.cde.first_certifying: doubling, then bisection, which assumes ok stays true once it
    is; what is found is checked exactly by common.certificate.certify, the search only looks for
    a good one)."""
    return None if limit < low else cde.first_certifying(low, limit, ok)


def smallest_certifying_threshold(
    agents: int, delta: float, factor: float, tolerance: int
) -> int | None:
    """The smallest M >= 2 for which some confidence certifies (a larger M certifies more easily
    in practice, as its tail falls faster than its interval rises)."""
    return smallest(
        lambda m: largest_level(m, agents, delta, factor, tolerance) is not None,
        2,
        agents - tolerance,
    )


def fewest_voting_agents(
    delta: float, factor: float, tolerance: int, limit: int = 10**6
) -> int | None:
    """The fewest agents with which some threshold certifies."""
    return smallest(
        lambda n: smallest_certifying_threshold(n, delta, factor, tolerance) is not None,
        tolerance + 2,
        limit,
    )


def voting_candidate(
    label: str,
    algorithm: str,
    subroutine: str,
    base: AlgorithmConfig,
    n_arms: int,
    agents: int,
) -> Candidate | Excluded:
    """The voting configuration with the smallest certifying threshold, or why there is none."""
    f, delta = base.tolerance, base.delta
    factor = level_factor(algorithm, subroutine)
    threshold = smallest_certifying_threshold(agents, delta, factor, f)
    level = None if threshold is None else largest_level(threshold, agents, delta, factor, f)
    if threshold is None or level is None:
        needed = fewest_voting_agents(delta, factor, f)
        return Excluded(label, f"no threshold certifies with {agents:,} agents", needed)

    def certifying(b: float) -> Certificate | None:
        try:
            algo = voting_config(algorithm, subroutine, b, base, n_arms)
            algo.validate_for(n_arms, agents)
        except ParameterError:
            return None
        cert = certify(algo, n_arms, agents)
        return cert if cert.certifies else None

    def keeps(b: float) -> bool:
        return ceil_log_ratio(delta, b) == threshold and certifying(b) is not None

    level = round_down(level, keeps)
    cert = certifying(level)
    if cert is None:
        return Excluded(label, f"the threshold {threshold + f} does not certify once rounded")
    algo = voting_config(algorithm, subroutine, level, base, n_arms)
    return Candidate(label, algo, cert, None, papers_privacy(algo, n_arms))


def privacy_for_hit_rate(bound: float, n_arms: int, optimal_arms: int) -> float | None:
    """CDE's report parameter P whose hit rate under a uniform prior with s = `optimal_arms`
    eps-optimal arms is at most `bound` (s e^e0 / (s e^e0 + K - s) <= bound), rounded down to 4
    decimals; None when bound <= s / K (a uniform guess among the eps-optimal arms already hits
    that often)."""
    s = optimal_arms
    if s >= n_arms or bound <= s / n_arms or bound >= 1.0:
        return None
    odds = bound * (n_arms - s) / (s * (1.0 - bound))
    privacy = math.floor(odds / (odds + n_arms - 1) * 1e4) / 1e4
    return privacy if privacy > 1.0 / n_arms else None


def cde_candidate(
    eta: float,
    base: AlgorithmConfig,
    n_arms: int,
    optimal_arms: int,
    agents: int,
    hit_rate: float | None,
) -> Candidate | Excluded:
    """CDE at local error bound eta: at the report parameter that gives the requested hit-rate
    bound under a uniform prior, else at the strongest that certifies delta; or why there is
    none."""
    label = f"CDE at eta={eta:g}"
    f, delta = base.tolerance, base.delta
    if agents <= f:
        return Excluded(
            label,
            f"{agents:,} agent{'' if agents == 1 else 's'} "
            f"{'is' if agents == 1 else 'are'} no more than the {f} "
            f"liar{'' if f == 1 else 's'} tolerated",
        )
    if hit_rate is not None:
        privacy = privacy_for_hit_rate(hit_rate, n_arms, optimal_arms)
        if privacy is None:
            return Excluded(
                label,
                f"a hit-rate bound of {hit_rate:g} under a uniform prior is not above "
                f"{optimal_arms}/{n_arms}, what a uniform guess among the eps-optimal arms hits",
            )
    else:
        privacy = cde.strongest_privacy(agents, delta, eta, n_arms, f)
        if privacy is None:
            needed = cde.smallest_agents(delta, eta, 0.999, n_arms, f, limit=10**6)
            return Excluded(
                label, f"no privacy up to 0.999 certifies with {agents:,} agents", needed
            )
    algo = replace(base, algorithm="cde", subroutine="ser3", eta=eta, privacy=privacy)
    cert = certify(algo, n_arms, agents)
    if not cert.certifies:
        needed = cde.smallest_agents(delta, eta, privacy, n_arms, f, limit=10**6)
        return Excluded(
            label, f"at privacy {privacy:g} it does not certify with {agents:,} agents", needed
        )
    hit = cde.hit_rate_uniform_prior(privacy, n_arms, optimal_arms)
    return Candidate("CDE", algo, cert, hit, None)


LDP_SIZING_RUNS = 10


@functools.lru_cache(maxsize=64)
def _ldp_reports(config: SimulationConfig, seed: int) -> tuple[int, ...]:
    """The reports of LDP_SIZING_RUNS runs with a fleet too large to run out of them (kept: a
    plan asks the same question for every N)."""
    run = trial_function("fast")
    return tuple(run(config, s).messages for s in trial_seeds(seed, LDP_SIZING_RUNS))


def ldp_candidate(
    dp_epsilon: float,
    reports_per_agent: int,
    base: AlgorithmConfig,
    n_arms: int,
    agents: int,
    environment: Environment,
    activation: Activation,
    seed: int,
) -> Candidate | Excluded:
    """LDP at one report's privacy dp_epsilon: it certifies delta with any N (common.ldp), but
    N B reports must suffice. Ten runs with a fleet too large to run out (the reports do not
    depend on N, docs/LDP.md) say how many reports it needs: N B must reach the most any of
    them took, else it is excluded with the devices that would."""
    algo = replace(
        base, algorithm="ldp", dp_epsilon=dp_epsilon, reports_per_agent=reports_per_agent
    )
    label = f"LDP at dp_epsilon={dp_epsilon:g}, B={reports_per_agent}"
    config = SimulationConfig(
        environment=environment, algorithm=algo, n_agents=LDP_SIZING_AGENTS, activation=activation
    )
    reports = _ldp_reports(config, seed)
    most = max(reports)
    if agents * reports_per_agent < most:
        return Excluded(
            label,
            f"{agents:,} devices send at most {agents * reports_per_agent:,} reports; it took "
            f"{float(np.mean(reports)):,.0f} on average and up to {most:,} in "
            f"{len(reports)} runs",
            math.ceil(most / reports_per_agent),
        )
    return Candidate("LDP", algo, certify(algo, n_arms, agents), None, None)


# ----------------------------------------------------------------------------- measuring


def measure(config: SimulationConfig, trials: int, seconds: float, seed: int) -> Measured | None:
    """Up to `trials` trials of the fast simulator (at least 2 when asked for 2 or more, then no
    more once `seconds` have passed): trial i is `dexp simulate`'s trial i with the same seed."""
    if trials < 1:
        return None
    run = trial_function("fast")
    started = time.monotonic()
    results: list[TrialResult] = []
    for trial_seed in trial_seeds(seed, trials):
        if len(results) >= 2 and time.monotonic() - started > seconds:
            break
        results.append(run(config, trial_seed))
    return Measured(
        activations=describe([r.sample_complexity for r in results]),
        messages=float(np.mean([r.messages for r in results])),
        failures=sum(not r.correct for r in results),
        trials=len(results),
    )


def make_plan(
    environment: Environment,
    activation: Activation,
    agents: int,
    delta: float,
    *,
    epsilon: float = 0.25,
    tolerance: int = 0,
    hit_rate: float | None = None,
    cde_etas: Sequence[float] = CDE_ETAS,
    ldp_epsilons: Sequence[float] = LDP_EPSILONS,
    reports_per_agent: int = 1,
    trials: int = 5,
    seconds: float = 20.0,
    seed: int = 0,
    on_measure: Callable[[str], None] | None = None,
) -> Plan:
    """Every candidate that certifies delta with `agents` agents (and, with `hit_rate`, whose
    hit-rate bound under a uniform prior is at most it), each measured by a short run."""
    if agents < 1:
        raise ParameterError("agents", agents, "must be >= 1")
    if environment.drift and any(environment.drift):
        raise ParameterError(
            "drift",
            environment.drift,
            "nothing certifies delta when the rewards drift (the local confidence bounds hold "
            "for fixed means)",
        )
    if hit_rate is not None and not 0.0 < hit_rate < 1.0:
        raise ParameterError("privacy", hit_rate, "a hit-rate bound must be in (0, 1)")
    for eta in cde_etas:
        if not 0.0 < eta < 1.0:
            raise ParameterError("eta", eta, "CDE's local error bound must be in (0, 1)")
    for e in ldp_epsilons:
        check_dp_epsilon(e)
    check_reports_per_agent(reports_per_agent)
    from common.lower_bound import lower_bound

    bound = lower_bound(environment, epsilon, delta)
    k = environment.n_arms
    base = AlgorithmConfig(epsilon=epsilon, delta=delta, tolerance=tolerance)
    sigma = None if environment.bounded else environment.sigma
    base.check_rewards(sigma)
    plan = Plan(agents, delta, environment, bound)
    found: list[Candidate | Excluded] = [
        cde_candidate(eta, base, k, len(bound.optimal_arms), agents, hit_rate) for eta in cde_etas
    ]
    if hit_rate is None:
        found += [
            voting_candidate(label, algorithm, sub, base, k, agents)
            for label, algorithm, sub in VOTING_CANDIDATES
            if not (algorithm == "dp-mase" and sigma is not None)  # DP-MASE: [0, 1] rewards only
        ]
    else:
        plan.excluded.append(
            Excluded(
                "DE, CE, DP-MASE",
                "they certify no e0 and no bound on the hit rate (docs/PRIVACY.md), so none can "
                f"promise {hit_rate:g}",
            )
        )
    if hit_rate is None:
        found += [
            ldp_candidate(e, reports_per_agent, base, k, agents, environment, activation, seed)
            for e in ldp_epsilons
        ]
    else:
        plan.excluded.append(
            Excluded(
                "LDP",
                "its privacy is about a device's rewards (B x dp_epsilon, local), not a hit "
                "rate on an answer it does not have: it is listed without --privacy",
            )
        )
    for item in found:
        if isinstance(item, Excluded):
            plan.excluded.append(item)
            continue
        config = SimulationConfig(
            environment=environment, algorithm=item.algo, n_agents=agents, activation=activation
        )
        if on_measure is not None and trials > 0:
            on_measure(item.title)
        item.measured = measure(config, trials, seconds, seed)
        plan.candidates.append(item)
    if all(c.measured for c in plan.candidates):
        plan.candidates.sort(key=lambda c: c.measured.activations.mean if c.measured else 0.0)
    return plan


# ----------------------------------------------------------------------------- output


def nothing_certifies(plan: Plan, hit_rate: float | None) -> str:
    """The one line of exit 2: the request, and what each candidate would need."""
    asked = (
        f" and a hit-rate bound <= {hit_rate:g} under a uniform prior"
        if hit_rate is not None
        else ""
    )
    said = []
    for family in ("LDP", "CDE", "DE"):  # per family, the one that needs the fewest agents
        mine = [e for e in plan.excluded if e.label.startswith(family)]
        helped = [e for e in mine if e.agents is not None]
        if helped:
            best = min(helped, key=lambda e: e.agents or 0)
            said.append(f"{best.label} would certify it with {best.agents:,} agents")
        elif mine:
            said.append(str(mine[0]))
    n = plan.agents
    return (
        f"nothing certifies delta = {plan.delta:g} with {n:,} agent{'s' if n > 1 else ''}{asked}: "
        + "; ".join(said)
    )


def _number(x: float) -> str:
    """The shortest text that reads back as x: the coordinator recomputes the same threshold."""
    return repr(float(x)) if x != int(x) else str(int(x))


def create_command(c: Candidate, plan: Plan, row: int) -> str:
    """The `dexp experiments create` command that makes row `row`'s configuration on a
    coordinator, with the plan's arms, eps, delta, rewards and (CDE) its expected agents."""
    a, env = c.algo, plan.environment
    arms = ",".join(f"arm-{k}" for k in range(len(env.means)))
    words = [f"dexp experiments create plan-{row} --arms {arms}", f"--algorithm {a.algorithm}"]
    if not a.reports:
        words.append(f"--subroutine {a.subroutine}")
    words += [f"--epsilon {_number(a.epsilon)}", f"--delta {_number(a.delta)}"]
    options: dict[str, float] = {}
    if a.algorithm == "cde":
        options = {"eta": a.eta, "privacy": a.privacy, "agents": plan.agents}
    elif a.algorithm == "dp-mase":
        options = {"beta": a.beta, "dp-epsilon": a.dp_epsilon}
    elif a.crowd:
        options = {"dp-epsilon": a.dp_epsilon, "reports-per-agent": a.reports_per_agent}
    elif a.algorithm == "ce":
        options = {"eta": a.eta, "xi": a.xi}
    else:
        options = {"eta": a.eta}
    words += [f"--{name} {_number(value)}" for name, value in options.items()]
    if a.tolerance:
        words.append(f"--tolerance {a.tolerance}")
    if not env.bounded:
        words.append(f"--sigma {_number(env.sigma)}")
    elif env.rewards == "bernoulli":
        words.append("--rewards bernoulli")
    return " ".join(words)


def plan_json(plan: Plan, problem: str | None, activation: Activation) -> dict[str, Any]:
    env = plan.environment
    return {
        "agents": plan.agents,
        "delta": plan.delta,
        "problem": problem,
        "means": list(env.means),
        "rewards": env.rewards,
        "sigma": None if env.bounded else env.sigma,
        "activation": activation.spec,
        "lower_bound": plan.bound.to_json(),
        "configurations": [
            {**c.to_json(plan.bound), "create": create_command(c, plan, row)}
            for row, c in enumerate(plan.candidates, 1)
        ],
        "excluded": [
            {"label": e.label, "reason": e.reason, "agents_needed": e.agents} for e in plan.excluded
        ],
    }


def _count(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:,.0f}"


def print_plan(plan: Plan, title: str) -> None:
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=180)
    table = Table(title=title, title_justify="left")
    columns = ("#", "configuration", "M", "certified failure", "certified e0", "activations",
               "± 95% CI", "trials", "messages", "x lower bound")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for row, c in enumerate(plan.candidates, 1):
        e0 = c.certified_epsilon
        if c.algo.crowd and e0 is not None:
            privacy = [f"{e0:g} (local)"]
        elif e0 is not None:
            privacy = [upper(e0)]
        else:
            privacy = ["none"]
        cells = ["-"] * 5
        if c.measured is not None:
            a = c.measured.activations
            cells = [
                _count(a.mean),
                _count(a.half_width),
                str(c.measured.trials),
                _count(c.measured.messages),
                _count(plan.bound.ratio(a.mean)),
            ]
        threshold = "-" if c.threshold is None else str(c.threshold)
        failure = upper(c.certificate.failure)
        table.add_row(str(row), c.title, threshold, failure, *privacy, *cells)
    out.print(table)
    for row, c in enumerate(plan.candidates, 1):
        out.print(f"{row}: {create_command(c, plan, row)}", soft_wrap=True)
    b = plan.bound
    out.print(
        f"lower bound: {b.activations:,.1f} activations (all agents together) for any algorithm "
        f"that is wrong with probability at most delta on every instance: "
        f"T* >= {b.characteristic_time:.3g} times kl(delta, 1 - delta) = {b.information:.3g} "
        "(docs/LOWER_BOUND.md)."
    )
    out.print(
        "certified e0 (CDE): whatever its prior, any adversary's odds about one agent's answer, "
        "hence its rewards, are multiplied by at most e^e0 by its report (--json adds its "
        "corollary, the hit rate under a uniform prior over which arm is best). DE, CE and "
        "DP-MASE certify none about the answer: their papers' figure (--json: papers_privacy) says "
        "how sure an adversary may be, and the audit beats it (dexp audit votes). LDP: everything "
        "one device sends is B x dp_epsilon "
        "locally private with respect to its rewards (docs/LDP.md); no device has an answer to hit."
    )
    for reason in plan.excluded:
        out.print(f"not listed: {reason}")


def run(
    agents: int,
    delta: float,
    privacy: float | None,
    problem: str | None,
    means: str | None,
    rewards: str | None,
    activation: str | None,
    epsilon: float,
    tolerance: int,
    eta: str,
    dp_epsilon: str,
    reports_per_agent: int,
    trials: int,
    seconds: float,
    seed: int,
    as_json: bool,
) -> None:
    """`dexp plan` once its options are read (dexp/plan_cmd.py): make the plan, print it."""
    from dexp.audit_votes import parse_list

    name = problem if problem is not None or means is not None else DEFAULT_PROBLEM
    built = build_problem(name, means, rewards, None, activation)
    for option, value, low in (("trials", trials, 0), ("seed", seed, 0), ("tolerance", tolerance, 0)):  # fmt: skip
        if value < low:
            raise ParameterError(option, value, f"must be >= {low}")
    if not seconds >= 0:
        raise ParameterError("seconds", seconds, "must be >= 0")
    err = Console(stderr=True, highlight=False)
    result = make_plan(
        built.environment,
        built.activation,
        agents,
        delta,
        epsilon=epsilon,
        tolerance=tolerance,
        hit_rate=privacy,
        cde_etas=parse_list("eta", eta, float),
        ldp_epsilons=parse_list("dp_epsilon", dp_epsilon, float),
        reports_per_agent=reports_per_agent,
        trials=trials,
        seconds=seconds,
        seed=seed,
        on_measure=None if as_json else lambda label: err.print(f"measuring {label}"),
    )
    if not result.candidates:
        sys.stderr.write(f"error: {nothing_certifies(result, privacy)}\n")
        raise typer.Exit(2)
    if as_json:
        sys.stdout.write(json.dumps(plan_json(result, name, built.activation), indent=2) + "\n")
        return
    print_plan(
        result,
        f"dexp plan: N = {agents:,}, delta = {delta:g}, eps = {epsilon:g}, {name} "
        f"({built.activation.spec} agents), f = {tolerance}; {trials} fast trials each, seed {seed}",
    )
