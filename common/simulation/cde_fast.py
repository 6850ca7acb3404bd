"""CDE's fast engine: one trial in a few vectorized steps, with the reference's output distribution.

CDE needs no per-activation state: an agent's report depends on its rewards only, and its time
on the activations only (its fixed-budget run ends at its L-th activation, L = T K, or T with
every_arm; a Byzantine agent reports at its first, L = 1). So a trial is drawn in three parts.

- Times. The activation process is Poissonized: agent n is activated at the events of its own
  Poisson process of rate P_N(n), independent across agents. The superposition has rate 1 and
  its events are i.i.d. draws from P_N, which is the discrete process of the reference; an agent
  that retires (the global stop rule) just stops its process, which is the reference's
  renormalization over the present agents. Agent n reports at its L_n-th event, at the
  continuous time tau_n ~ Gamma(L_n, 1 / P_N(n)), so the order of the reports is the order of the
  tau. The activation count t_k at the k-th report (ranks k = 1, 2, ... by tau) counts every
  event up to tau_k: the agents that reported before it contribute their L_i events, plus (when
  they do not retire) a Poisson number P_(k-1) (tau_k - tau_(k-1)) more between consecutive
  reports, P_(k-1) the activation mass of the k - 1 first; the k-th its L_k; every agent of rank
  >= k its events before its own tau that fall before tau_k. Given its tau_m, an agent's L_m - 1
  earlier events are uniform on [0, tau_m], so Q_k, the number of them (over ranks >= k) before
  tau_k, goes back one rank at a time: Q_(k-1) = Bin(Q_k, tau_(k-1) / tau_k) + L_(k-1) - 1, from
  Q_J = L_J - 1 + sum over ranks > J of Bin(L_m - 1, tau_J / tau_m). Exact, O(N + J).
- Reports. Per agent and arm the sum of its T rewards (Binomial(T, mu) or Normal(T mu,
  sqrt(T) sigma)), the empirical best (ties broken uniformly, as common.subroutines.FixedBudget),
  or the stress mode's draw (`SimulationConfig.stress_answers`); then K-ary randomized response.
- Replay. In time order until an arm has M reports (accepted) or none can get them any more
  (exhausted, `common.votes.reports_exhausted`), cut at the budget.
"""

from __future__ import annotations

import numpy as np

from common.cde import report_probabilities
from common.simulation.config import SimulationConfig, TrialResult, report_outcome
from common.votes import Elimination


def local_answers(config: SimulationConfig, rng: np.random.Generator) -> np.ndarray:
    """(N,) each agent's local answer: the empirical best of T rewards per arm, or the stress
    mode's draw."""
    env, n, k = config.environment, config.n_agents, config.environment.n_arms
    if config.exact_local_error:
        return rng.choice(k, size=n, p=config.stress_answers())
    pulls = config.local_params().pulls
    assert pulls is not None, "CDE's local params carry T"
    mu = np.asarray(env.means, dtype=float)
    if env.bounded:  # integer sums: a uniform key in [0, 1) breaks ties uniformly
        sums = rng.binomial(pulls, mu, size=(n, k)) + rng.random((n, k))
    else:
        sums = rng.normal(pulls * mu, np.sqrt(pulls) * env.sigma, size=(n, k))
    return np.argmax(sums, axis=1).astype(np.int64)


def randomized(
    answers: np.ndarray, n_arms: int, privacy: float, rng: np.random.Generator
) -> np.ndarray:
    """common.cde.randomize on every answer: kept with probability p, else a uniform other arm."""
    p, _ = report_probabilities(privacy, n_arms)
    keep = rng.random(answers.size) < p
    other = rng.integers(n_arms - 1, size=answers.size)
    return np.where(keep, answers, other + (other >= answers)).astype(np.int64)


def stop_rank(reports: np.ndarray, n_arms: int, threshold: int) -> tuple[int, int | None]:
    """(J, accepted): the reports in time order (`reports`, all N) are replayed until the J-th,
    which brings an arm to `threshold` (accepted), or else leaves no arm able to reach it with the
    N - J reports to come (accepted None; at J = N at the latest). Exhaustion cannot come before
    an acceptance (the arm accepted at J had M - 1 reports and N - J + 1 to come before it), and
    it lasts once it holds (the largest count grows by at most one a report): a bisection."""
    n = reports.size
    positions = [np.flatnonzero(reports == a) for a in range(n_arms)]
    reach = [
        (int(pos[threshold - 1]) + 1, a) for a, pos in enumerate(positions) if pos.size >= threshold
    ]
    if reach:
        return min(reach)

    def exhausted(j: int) -> bool:
        most = max(int(np.searchsorted(pos, j)) for pos in positions)
        return most + n - j < threshold

    low, high = max(1, n - threshold + 1), n  # exhausted(j) needs N - j < M
    while low < high:
        middle = (low + high) // 2
        if exhausted(middle):
            high = middle
        else:
            low = middle + 1
    return low, None


def adaptive_lie(ranked: np.ndarray, bad: np.ndarray, needed: int) -> tuple[int, int] | None:
    """(J, arm): the adaptive liars' trigger, the rank J of the honest report that brings a
    non-eps-optimal arm to `needed` (M - A) honest reports, the earliest over the bad arms; None
    if none gets there."""
    hits = [
        (int(pos[needed - 1]) + 1, int(a))
        for a in bad
        if (pos := np.flatnonzero(ranked == a)).size >= needed
    ]
    return min(hits) if hits else None


def report_times(
    tau: np.ndarray,
    budgets: np.ndarray,
    mass: np.ndarray,
    reporting: int,
    retire: bool,
    rng: np.random.Generator,
) -> np.ndarray:
    """The activation counts t_1 < ... < t_J at the J = `reporting` first reports (see the module
    docstring): `tau`, `budgets` (L) and `mass` (P_N) of every agent, in report order."""
    j = reporting
    later = budgets[j:] - 1
    q = budgets[j - 1] - 1 + int(rng.binomial(later, tau[j - 1] / tau[j:]).sum())
    before = np.empty(j, dtype=np.int64)  # Q_k, k = 1 .. J
    before[j - 1] = q
    for k in range(j - 1, 0, -1):
        q = int(rng.binomial(q, tau[k - 1] / tau[k])) + int(budgets[k - 1]) - 1
        before[k - 1] = q
    reported = np.concatenate(([0], np.cumsum(budgets[: j - 1] - 1)))  # sum_(i<k) (L_i - 1)
    times = before + reported + np.arange(1, j + 1)
    if not retire:  # the agents that reported keep being activated
        rate = np.cumsum(mass[: j - 1])
        extra = rng.poisson(rate * np.diff(tau[:j]))
        times += np.concatenate(([0], np.cumsum(extra)))
    return times


def run_trial(config: SimulationConfig, seed: np.random.SeedSequence | int) -> TrialResult:
    """One CDE trial, same semantics (and output distribution) as `reference.run_trial`."""
    env, algo = config.environment, config.algorithm
    n, k, attackers = config.n_agents, env.n_arms, config.attackers
    threshold = config.threshold
    assert threshold is not None
    adaptive = config.attack == "adaptive" and attackers < threshold
    rng = np.random.default_rng(seed)
    mass = config.probabilities()
    budgets = np.full(n, config.local_budget, dtype=np.int64)
    # Fixed liars report at their first activation; adaptive ones never report on their own (a
    # run longer than the trial's budget), only when one of the honest reports triggers them.
    budgets[:attackers] = config.budget + 1 if adaptive else 1
    tau = rng.gamma(budgets, 1.0 / mass)
    order = np.argsort(tau, kind="stable")
    answers = local_answers(config, rng)
    answers[:attackers] = -1
    reports = randomized(np.maximum(answers, 0), k, algo.privacy, rng)
    reports[:attackers] = -1 if adaptive else config.lie_arm

    ranked = reports[order]
    j, accepted = stop_rank(ranked, k, threshold)
    lied = None
    if adaptive:
        lied = adaptive_lie(ranked, config.bad_arms, threshold - attackers)
        if lied is not None and (lied[0] < j or (accepted is None and lied[0] == j)):
            j, accepted = lied
        else:
            lied = None
    times = report_times(tau[order], budgets[order], mass[order], j, config.stop == "global", rng)
    stopped_by = "global" if accepted is not None else "exhausted"
    if times[-1] > config.budget:
        j = int(np.searchsorted(times, config.budget, side="right"))
        accepted, stopped_by = None, "budget"
    t = int(times[j - 1]) if stopped_by != "budget" else config.budget

    sent = order[:j]
    agent_reports = np.full(n, -1, dtype=np.int64)
    agent_reports[sent] = ranked[:j]
    agent_times = np.zeros(n, dtype=np.int64)
    agent_times[sent] = times[:j]
    agent_arms = np.full(n, -1, dtype=np.int64)
    agent_arms[sent] = answers[sent]
    counts = np.bincount(ranked[:j], minlength=k)
    messages = j
    if lied is not None and stopped_by == "global":  # the liars, all at the trigger's time
        agent_reports[:attackers], agent_times[:attackers] = lied[1], t
        counts[lied[1]] += attackers
        messages += attackers
    best, correct, candidates = report_outcome(config, counts, accepted, t)
    eliminations = []
    if accepted is not None:
        others = [a for a in range(k) if a != accepted]
        eliminations = [
            Elimination(a, int(counts[a]), t, order_, 0) for order_, a in enumerate(others, 1)
        ]
    return TrialResult(
        sample_complexity=t,
        messages=messages,
        best_arm=best,
        correct=correct,
        stopped_by=stopped_by,
        eliminations=eliminations,
        agent_arms=agent_arms,
        candidates=candidates,
        agent_reports=agent_reports,
        agent_report_times=agent_times,
    )
