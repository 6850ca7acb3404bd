"""What an experiment certifies, for its actual number of agents (docs/SUBROUTINES.md, section 3).

The papers' Theorem 1 bounds by eta^M the chance that M *given* agents all err. With N agents an
arm needs M votes from *any* of them, so what matters is how many of the N err. Section 3 proves:

- One agent votes against the best arm at most once per epoch, and only during its first local
  run of the epoch: until it has decided against the best arm, that arm stays in its local set (and,
  until M honest agents voted it out, in the global set), so it never restarts. N counts agents,
  not runs.
- That run votes against the best arm only outside a *one-sided* good event (the best arm's mean
  not underestimated, no other arm's mean overestimated), when no other arm is within eps of the
  best. Its probability is `local_error`: the subroutine's confidence times a constant of its proof
  (LOCAL_ERROR_FACTORS), times 1 - xi under CE, where a decided vote is sent with that probability.
- Agents' rewards are independent, so at most Bin(N - f, p) honest agents err: with a threshold
  M + f and at most f liars, the best arm is voted out by error with probability at most
  P(Bin(N - f, p) >= M), the `certified_failure`.

Everything here is pure arithmetic: the coordinator, the simulators and the CLI call it with their
configuration and their N. `certified_failure`, `smallest_threshold`, `largest_local_error` and
`largest_agents` take the numbers alone (N, the threshold, f, p), so that a design that picks its
threshold from N can reuse them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from common import cde
from common.algorithms import AlgorithmConfig
from common.binomial import RELATIVE_MARGIN, binomial_tail
from common.errors import ParameterError
from common.rounding import lower, upper

if TYPE_CHECKING:  # a type only: the coordinator, which certifies, never loads the simulators
    from common.simulation.config import SimulationConfig

ZETA3 = 1.2020569031595942  # Apery's constant, zeta(3)
ZETA2 = math.pi**2 / 6
# The probability that one local run votes against the best arm by error, per unit of its
# confidence (eta, eta_xi, beta): the union, over one side per arm, of the events its rule needs
# (docs/SUBROUTINES.md, section 3, derives each).
SE_ROUNDS = math.pi**2 / 24  # sum over arms and rounds r >= 1 of conf / (4 K r^2), one side
LOCAL_ERROR_FACTORS: dict[str, float] = {
    "se": SE_ROUNDS,
    "ser3": SE_ROUNDS,
    "ser4": SE_ROUNDS,
    "kl-se": SE_ROUNDS,
    "stitched-se": 0.5,  # alpha = conf / (2 K) per side and arm, anytime
    "stitched-lucb": 0.5,
    "lucb": 0.8 * (ZETA3 - 1.0),  # sum over t >= 2 of t * 4 conf / (5 K t^4), K arms
    "ugapec": (1.0 + ZETA3) / 4.0,  # sum over pull counts n of conf / (4 K max(n - 1, 1)^3)
    "kl-lucb": 1.0,  # Kaufmann and Kalyanakrishnan's theorem, as stated
    "me": 1.0,  # Even-Dar et al.'s rounds, sum of delta_l < conf
    "dp-se": SE_ROUNDS,
    "fixed-budget": 1.0,  # eta bounds the chance its answer is not eps-optimal (common.cde)  # Hoeffding and Laplace, one side each, conf / (8 K e^2) per epoch e
}
NO_LIMIT = 10**9  # largest_agents searches no further


def certified_failure(agents: int, threshold: int, local_error: float, liars: int = 0) -> float:
    """The probability bound that the best arm is voted out by error: `threshold` distinct votes
    remove an arm, at most `liars` of the `agents` lie (vote as they like), and each honest agent
    errs against the best arm with probability at most `local_error`, independently. The liars
    supply at most `liars` votes, so threshold - liars honest agents must err."""
    return binomial_tail(max(agents - liars, 0), threshold - liars, local_error)


def smallest_threshold(agents: int, local_error: float, delta: float, liars: int = 0) -> int:
    """The smallest threshold (liars included) whose certified failure is <= delta with these
    agents; agents + 1 when only a threshold no set of agents can reach would."""
    low, high = liars + 1, agents + 1  # at agents + 1 the tail is 0: it certifies
    while low < high:
        middle = (low + high) // 2
        if certified_failure(agents, middle, local_error, liars) <= delta:
            high = middle
        else:
            low = middle + 1
    return low


def largest_local_error(agents: int, threshold: int, delta: float, liars: int = 0) -> float:
    """The largest local error bound p (each agent's) whose certified failure is <= delta; the
    value returned certifies (bisection from below)."""
    if certified_failure(agents, threshold, 1.0, liars) <= delta:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(100):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if certified_failure(agents, threshold, middle, liars) <= delta:
            low = middle
        else:
            high = middle
    return low


def largest_agents(
    threshold: int, local_error: float, delta: float, liars: int = 0, limit: int = NO_LIMIT
) -> int | None:
    """The largest number of agents (at least `threshold`, the fewest that can remove an arm)
    whose certified failure is <= delta; None if even `threshold` agents are too many; `limit` if
    every number up to it certifies. The tail grows with N, so a search finds it."""

    def certifies(n: int) -> bool:
        return certified_failure(n, threshold, local_error, liars) <= delta

    low = max(threshold, liars + 1)
    if not certifies(low):
        return None
    high = low
    while high < limit and certifies(high):
        low, high = high, min(limit, 2 * high)
    if certifies(high):
        return high
    while high - low > 1:  # certifies(low), not certifies(high)
        middle = (low + high) // 2
        if certifies(middle):
            low = middle
        else:
            high = middle
    return low


def local_error(algo: AlgorithmConfig, n_arms: int, n_agents: int) -> float:
    """Each agent's bound on voting against the best arm by error (or, for the baselines, on its
    run keeping an arm that is not eps-optimal): the subroutine's constant times its confidence,
    times 1 - xi under CE."""
    confidence = algo.local_confidence(n_arms, n_agents)
    return LOCAL_ERROR_FACTORS[algo.local_subroutine] * confidence * (1.0 - algo.vote_drop)


@dataclass(frozen=True)
class Remedy:
    """What would certify delta, one change at a time: the smallest threshold (liars included;
    agents + 1 means none the agents can reach), the largest local error bound, the most agents
    (None: not even the fewest that can remove an arm)."""

    threshold: int
    local_error: float
    agents: int | None


@lru_cache(maxsize=4096)
def remedy(agents: int, threshold: int, local_error: float, delta: float, liars: int) -> Remedy:
    return Remedy(
        threshold=smallest_threshold(agents, local_error, delta, liars),
        local_error=largest_local_error(agents, threshold, delta, liars),
        agents=largest_agents(threshold, local_error, delta, liars),
    )


VOTES, REPORTS, INDEPENDENT, CENTRAL, DRIFT = "votes", "reports", "independent", "central", "drift"
CROWD = "crowd"  # LDP (common.ldp): the coordinator's intervals hold together with prob. 1 - delta


@dataclass(frozen=True)
class Certificate:
    """One configuration's certified failure with `agents` agents, and what it means.

    kind: "votes" (DE, CE, DP-MASE: the best arm voted out by error; per epoch under DSER4),
    "reports" (CDE: a wrong arm accepted, or none with the agents enrolled, common.cde),
    "independent" (some agent's own answer not eps-optimal), "central" (the one run's answer not
    eps-optimal), "drift" (rewards drift: nothing below 1 is certified)."""

    kind: str
    failure: float
    agents: int
    delta: float
    algorithm: str
    local_error: float = 0.0
    threshold: int | None = None
    liars: int = 0
    per_epoch: bool = False  # DSER4: every reset starts a new epoch, with the same bound
    wrong_arm: float = 0.0  # CDE: a wrong arm accepted (any N: the part more agents cannot fix)
    no_answer: float = 0.0  # CDE: no arm accepted with the N - f honest agents' reports
    optimal_arms: int = 0  # CDE: the number of eps-optimal arms at which a wrong arm is likeliest
    privacy: float = 0.0  # CDE: its P, the hit-rate bound under a uniform prior (for the remedy)
    arms: int = 0  # CDE: K (for the remedy)
    fixed: bool = False  # CDE: the threshold was chosen for another N (a service's fleet)
    tolerance: int = 0  # LDP: f, the liars its intervals are widened for

    @property
    def certifies(self) -> bool:
        return self.failure <= self.delta

    @property
    def honest_votes(self) -> int:
        """M: the honest votes that remove the best arm (the threshold less the liars)."""
        return (self.threshold or 0) - self.liars

    def statement(self) -> str:
        """The sentence beside the number: what is bounded, from what, and when it is the
        probability of a wrong answer."""
        n, p, f = self.agents, upper(self.local_error), upper(self.failure)
        if self.kind == DRIFT:
            return (
                "Nothing below 1 is certified: the rewards drift, and the local confidence bounds "
                "hold for fixed means only."
            )
        if self.kind == INDEPENDENT:
            return (
                f"Each of the {n:,} agents identifies alone; the chance that any of them keeps an "
                f"arm that is not epsilon-optimal is at most {f} (each at most {p})."
            )
        if self.kind == REPORTS:
            return self._reports_statement()
        if self.kind == CROWD:
            return self._crowd_statement()
        if self.kind == CENTRAL:
            return f"One run on every reward keeps an arm that is not epsilon-optimal with probability at most {f}."
        honest = n - self.liars
        who = (
            f"the {honest:,} honest agents ({self.liars} may lie)"
            if self.liars
            else f"the {n:,} agents"
        )
        epoch = "In each epoch, the" if self.per_epoch else "The"
        if self.honest_votes <= 0:
            return (
                f"{epoch} best arm can be voted out by the {self.liars} lying agents alone: the "
                f"threshold is {self.threshold}. Nothing below 1 is certified."
            )
        if self.honest_votes > honest:
            there = (
                f"at most {honest:,} of the {n:,} agents are honest"
                if self.liars
                else f"there {'is' if n == 1 else 'are'} only {n:,} agent{'' if n == 1 else 's'}"
            )
            return (
                f"{epoch} best arm cannot be voted out by error: it takes {self.honest_votes} "
                f"honest votes and {there}."
            )
        answer = (
            "That is the probability of a wrong answer."
            if self.algorithm == "dp-mase"
            else "When no other arm is within epsilon of the best, that is the probability of a "
            "wrong answer."
        )
        err = "err and send that vote (xi drops it)" if self.algorithm == "ce" else "err"
        return (
            f"{epoch} best arm is voted out by error with probability at most {f}: it takes "
            f"{self.honest_votes} of {who} to {err}, each with probability at most {p}. {answer}"
        )

    def _crowd_statement(self) -> str:
        """LDP: the intervals' event (common.ldp) and what the answer inherits from it."""
        liars = f" ({self.liars} may lie, f = {self.tolerance})" if self.liars else ""
        if not self.certifies:
            return (
                f"Nothing below 1 is certified: {self.liars} agents may lie and the intervals are "
                f"widened for f = {self.tolerance}."
            )
        return (
            f"Every arm's interval holds at all times, together, with probability at least "
            f"1 - {self.delta:g}, whatever N and the order of activations{liars}: an identified "
            f"answer is not epsilon-optimal with probability at most {upper(self.failure)}. A run "
            "that spends every agent's reports ends with no answer."
        )

    def _reports_statement(self) -> str:
        f, m, lie = upper(self.failure), self.threshold or 0, self.liars
        honest = self.agents - lie
        if honest < m:  # no arm can get its M honest reports: no answer is certain
            there = (
                f"at most {max(honest, 0):,} of the {self.agents:,} agents are honest"
                if lie
                else f"there {'is' if self.agents == 1 else 'are'} only {self.agents:,} "
                f"agent{'' if self.agents == 1 else 's'}"
            )
            return (
                f"Nothing below 1 is certified: an arm is accepted at {m} reports and {there}, "
                "so no arm can get them; the answer waits for more agents."
            )
        liars = f", even if {lie} of the agents lie" if lie else ""
        optimal = self.optimal_arms
        worst = (
            "one arm alone is epsilon-optimal"
            if optimal == 1
            else f"{optimal} arms are epsilon-optimal and share the right answers evenly"
        )
        rest = (
            "and the honest agents' reports always suffice for an answer"
            if self.no_answer == 0
            else f"and the {honest:,} honest agents' reports leave no arm accepted with "
            f"probability at most {upper(self.no_answer)}"
        )
        return (
            f"The answer is not epsilon-optimal with probability at most {f}, whatever the "
            f"means: an arm that is not epsilon-optimal is accepted with probability at most "
            f"{upper(self.wrong_arm)} for any number of agents{liars} (worst when {worst}), "
            f"{rest}."
        )

    def warning(self) -> str | None:
        """None when it certifies delta; else one sentence naming what would, one change at a
        time."""
        if self.certifies:
            return None
        agents = f"{self.agents:,} agent{'' if self.agents == 1 else 's'}"
        head = (
            f"certified failure {upper(self.failure)} is above delta = {self.delta:g} with {agents}"
        )
        if self.kind == REPORTS:
            return f"{head}: {cde_remedy(self)}"
        if self.kind == CROWD:
            return f"{head}: a tolerance f >= {self.liars} (the liars) would certify it"
        if self.kind != VOTES or self.threshold is None:
            return f"{head}: nothing certifies it (the rewards drift)"
        fix = remedy(self.agents, self.threshold, self.local_error, self.delta, self.liars)
        options = []
        if fix.threshold <= self.agents:
            options.append(f"a threshold of {fix.threshold:,} votes")
        options.append(
            f"agents that err with probability at most {lower(fix.local_error)} each (now "
            f"{upper(self.local_error)})"
        )
        if fix.agents is not None:
            options.append(f"at most {fix.agents:,} agents")
        said = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
        return f"{head}: {said} would certify it"


def cde_remedy(cert: Certificate) -> str:
    """What would certify a CDE configuration, one change at a time: more agents, or a larger P
    (a more faithful report, a larger e0). A running experiment's threshold is fixed (chosen
    from the fleet it expects): then only more agents enrolled would, at that threshold."""
    if cert.fixed and cert.threshold is not None:
        needed = cde.agents_for(
            cert.threshold, cert.delta, cert.local_error, cert.privacy, cert.arms, cert.liars
        )
        if needed is None:
            return (
                f"no number of agents certifies it at its threshold of {cert.threshold} reports; "
                "create it again expecting more agents, or with a larger privacy P (a larger e0)"
            )
        return f"at least {needed:,} agents (at its threshold of {cert.threshold}) would certify it"
    options = []
    agents = cde.smallest_agents(
        cert.delta, cert.local_error, cert.privacy, cert.arms, cert.liars, limit=10**6
    )
    if agents is not None:
        options.append(f"at least {agents:,} agents")
    privacy = cde.strongest_privacy(
        max(cert.agents, cert.liars + 1), cert.delta, cert.local_error, cert.arms, cert.liars
    )
    if privacy is not None:
        options.append(
            f"privacy P = {privacy:g}, e0 = {upper(cde.report_epsilon(privacy, cert.arms))} "
            f"(now {cert.privacy:g}, e0 = {upper(cde.report_epsilon(cert.privacy, cert.arms))})"
        )
    if not options:
        return "nothing up to a million agents certifies it; lower eta"
    return " or ".join(options) + " would certify it"


def certify(
    algo: AlgorithmConfig,
    n_arms: int,
    n_agents: int,
    liars: int | None = None,
    drifting: bool = False,
    threshold: int | None = None,
) -> Certificate:
    """The certificate of `algo` with K = `n_arms` arms and N = `n_agents` agents. `liars`: the
    agents that may lie (default: the tolerance f, the worst the threshold is built for; a
    simulation passes its attackers). `drifting`: rewards whose means move (nothing certified).
    `threshold`: CDE's threshold when it was chosen for another N (a service chooses it from the
    fleet it expects, and certifies with the agents enrolled); None: chosen from `n_agents`."""
    name = algo.algorithm
    least = 0 if algo.votes or algo.reports else 1  # none enrolled yet: nothing can leave
    if n_agents < least:
        raise ParameterError("agents", n_agents, f"must be >= {least}")
    if drifting:
        return Certificate(DRIFT, 1.0, n_agents, algo.delta, name)
    if algo.crowd:  # the intervals' event: delta, with at most f liars whatever N (common.ldp)
        lying = algo.tolerance if liars is None else liars
        failure = algo.delta if lying <= algo.tolerance else 1.0
        return Certificate(
            CROWD, failure, n_agents, algo.delta, name, liars=lying, tolerance=algo.tolerance
        )
    p = local_error(algo, n_arms, max(n_agents, 1))
    if algo.reports:
        lying = algo.tolerance if liars is None else liars
        fixed = threshold is not None
        if threshold is None:
            threshold = algo.threshold(n_arms, max(n_agents, lying + 1))
        assert threshold is not None
        bound = cde.failure(n_agents, threshold, algo.eta, algo.privacy, n_arms, lying)
        return Certificate(
            REPORTS,
            bound.total,
            n_agents,
            algo.delta,
            name,
            p,
            threshold,
            lying,
            wrong_arm=bound.wrong_arm,
            no_answer=bound.no_answer,
            optimal_arms=bound.optimal_arms,
            privacy=algo.privacy,
            arms=n_arms,
            fixed=fixed,
        )
    if name == "independent":
        # 1 - (1 - p)^N, rounded up; at most N p (the union bound, at most delta: p is a
        # constant <= 1 times delta / N), which one agent reaches exactly: one agent alone is the
        # central run, with its bound.
        exact = -math.expm1(n_agents * math.log1p(-p)) * (1.0 + RELATIVE_MARGIN)
        failure = min(n_agents * p, exact)
        return Certificate(INDEPENDENT, failure, n_agents, algo.delta, name, p)
    if name == "central":
        return Certificate(CENTRAL, p, n_agents, algo.delta, name, p)
    threshold = algo.threshold(n_arms)
    assert threshold is not None
    lying = algo.tolerance if liars is None else liars
    return Certificate(
        VOTES,
        certified_failure(n_agents, threshold, p, lying),
        n_agents,
        algo.delta,
        name,
        p,
        threshold,
        lying,
        per_epoch=algo.global_reset,
    )


def certify_simulation(config: SimulationConfig) -> Certificate:
    """The certificate of a simulated configuration: its N, its Byzantine agents as the liars
    (they are known there), and nothing certified when its rewards drift."""
    return certify(
        config.algorithm,
        config.environment.n_arms,
        config.n_agents,
        liars=config.attackers,
        drifting=bool(config.environment.drift),
    )
