"""The fast simulator against the reference (the definition), on small cases.

Random streams differ between the two engines, so the comparison is statistical: for each case,
the reference runs a few dozen seeded trials, the fast engine a few hundred, and a two-sample
Mann-Whitney test on the sample complexity (and on the message count when it varies) must not
reject at p = 0.001. Seeds are fixed, so the outcome is deterministic. Exact invariants (Theorem 1's
message bound, central's (N - 1) messages per activation, ...) are checked on every trial of both.

Cases are small (K = 4 arms with clear gaps, eps = 0.5, eta = 0.5, delta = 0.05, so M = 5, and
N = 4..12 agents) because the reference runs about 40k activations per second. The tie cases have
two equal best arms and N < 2M - 1, so that some trials end tied (`common.votes.is_tied`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import Environment
from common.simulation import SimulationConfig, fast, reference, run_trials
from common.simulation.config import TrialResult
from common.subroutines import SUBROUTINES
from common.votes import is_tied

MEANS = (0.95, 0.3, 0.2, 0.1)
TIE_ENV = Environment((0.8, 0.8, 0.2, 0.1))
BASE = {"epsilon": 0.5, "delta": 0.05, "eta": 0.5}
P_MIN = 0.001

# One xdist worker for the whole module: most tests read the same cached runs (`_results`), which
# two workers would each compute.
pytestmark = pytest.mark.xdist_group("fast-vs-reference")


@dataclass(frozen=True)
class Case:
    config: SimulationConfig
    n_ref: int = 60
    n_fast: int = 300


def _case(
    algorithm: AlgorithmConfig,
    n_agents: int = 8,
    env: Environment | None = None,
    n_ref: int = 60,
    **kwargs: object,
) -> Case:
    config = SimulationConfig(env or Environment(MEANS), algorithm, n_agents=n_agents, **kwargs)
    return Case(config, n_ref=n_ref)


CASES: dict[str, Case] = {
    "de-se": _case(AlgorithmConfig("de", "se", **BASE)),
    "de-ser3-global": _case(AlgorithmConfig("de", "ser3", **BASE), stop="global"),
    "de-lucb": _case(AlgorithmConfig("de", "lucb", **BASE)),
    # The SE family with sharper bounds (B_KL, B_STITCHED): SER3's rounds, other checks.
    "de-kl-se": _case(AlgorithmConfig("de", "kl-se", **BASE)),
    "de-stitched-se": _case(AlgorithmConfig("de", "stitched-se", **BASE)),
    "de-stitched-se-gaussian": _case(
        AlgorithmConfig("de", "stitched-se", every_arm=True, **BASE),
        env=Environment((1.0, 0.2, 0.0, -0.2), rewards="gaussian", sigma=0.5),
    ),
    # The explore-then-commit family: UGapEc's rule, LUCB1's rule on KL and stitched bounds.
    "de-ugapec": _case(AlgorithmConfig("de", "ugapec", **BASE)),
    "de-ugapec-every-arm": _case(AlgorithmConfig("de", "ugapec", every_arm=True, **BASE)),
    "de-kl-lucb": _case(AlgorithmConfig("de", "kl-lucb", **BASE)),
    "de-stitched-lucb": _case(AlgorithmConfig("de", "stitched-lucb", **BASE)),
    "de-me-every-arm": _case(
        AlgorithmConfig("de", "me", every_arm=True, **{**BASE, "epsilon": 1.0})
    ),
    "ce-ser3": _case(AlgorithmConfig("ce", "ser3", xi=0.1, every_arm=True, **BASE), n_agents=12),
    "dp-mase": _case(
        AlgorithmConfig(
            "dp-mase", "se", epsilon=0.5, delta=0.2, beta=0.5, dp_epsilon=5.0, every_arm=True
        ),
        n_agents=4,
        stop="global",
    ),
    "independent-ser3": _case(AlgorithmConfig("independent", "ser3", **BASE), n_agents=4),
    "independent-ser4-global": _case(
        AlgorithmConfig("independent", "ser4", phi=0.001, every_arm=True, **BASE),
        n_agents=4,
        stop="global",
    ),
    "central-ser3": _case(AlgorithmConfig("central", "ser3", **BASE)),
    "dser4": _case(AlgorithmConfig("de", "ser4", phi=0.001, every_arm=True, **BASE)),
    "drift": _case(
        AlgorithmConfig("de", "ser3", every_arm=True, **BASE),
        env=Environment((0.7, 0.6, 0.3, 0.2), drift=(0.0, -2e-4, -1e-4, 0.0)),
    ),
    "gaussian": _case(
        AlgorithmConfig("de", "ser3", every_arm=True, **BASE),
        env=Environment((1.0, 0.2, 0.0, -0.2), rewards="gaussian", sigma=0.5),
    ),
    "power-law-global": _case(
        AlgorithmConfig("de", "lucb", every_arm=True, **BASE),
        n_agents=10,
        activation=Activation("power", (0.0, 1.5)),
        stop="global",
    ),
    "budget": _case(AlgorithmConfig("de", "ser3", **BASE), budget=1300),
    # Byzantine agents 0 .. A-1 vote against arm 0 only: A = M = 5 without tolerance remove it
    # (every trial fails), A = 4 with tolerance 4 (threshold M + f = 9) cannot.
    "attackers": _case(AlgorithmConfig("de", "ser3", **BASE), n_agents=12, attackers=5, n_ref=40),
    "attackers-tolerance": _case(
        AlgorithmConfig("de", "ser3", tolerance=4, **BASE), n_agents=16, attackers=4, n_ref=40
    ),
    "attackers-tolerance-power-global": _case(
        AlgorithmConfig("de", "lucb", every_arm=True, tolerance=3, **BASE),
        n_agents=12,
        attackers=3,
        activation=Activation("power", (0.0, 1.5)),
        stop="global",
        n_ref=40,
    ),
    # Ties: two equal best arms and N < 2M - 1 (M = 5, N = 8): the agents can split so that
    # neither arm gets M votes. Under both stop rules, with CE's settled messages (M = 3, N = 4),
    # with a Byzantine agent tolerated (threshold 6, N = 10) and per DSER4 epoch.
    "tie-global": _case(
        AlgorithmConfig("de", "ser3", **BASE), env=TIE_ENV, stop="global", n_ref=40
    ),
    "tie-all-agents": _case(AlgorithmConfig("de", "ser3", **BASE), env=TIE_ENV, n_ref=40),
    "tie-ce": _case(
        AlgorithmConfig("ce", "ser3", xi=0.1, every_arm=True, **BASE), n_agents=4, env=TIE_ENV
    ),
    "tie-ce-global": _case(
        AlgorithmConfig("ce", "ser3", xi=0.1, every_arm=True, **BASE),
        n_agents=4,
        env=TIE_ENV,
        stop="global",
    ),
    "tie-attackers": _case(
        AlgorithmConfig("de", "ser3", tolerance=1, **BASE),
        n_agents=10,
        attackers=1,
        env=TIE_ENV,
        n_ref=40,
    ),
    "tie-dser4": _case(
        AlgorithmConfig("de", "ser4", phi=0.001, every_arm=True, **BASE), env=TIE_ENV, n_ref=40
    ),
    # CDE (common.simulation.cde_fast, its own engine): M = 4 of N = 8 reports; the global rule
    # with skewed agents (retired after reporting), Gaussian rewards, the stress mode (one and two
    # eps-optimal arms), liars tolerated (fixed and adaptive), a budget cut, and close arms whose
    # reports often run out (exhausted).
    "cde": _case(AlgorithmConfig("cde", **BASE)),
    "cde-every-arm-power-global": _case(
        AlgorithmConfig("cde", every_arm=True, **BASE),
        n_agents=10,
        activation=Activation("power", (0.0, 1.5)),
        stop="global",
    ),
    "cde-power": _case(
        AlgorithmConfig("cde", **BASE), n_agents=10, activation=Activation("power", (0.0, 1.5))
    ),
    "cde-gaussian": _case(
        AlgorithmConfig("cde", **BASE),
        env=Environment((1.0, 0.6, 0.5, 0.4), rewards="gaussian", sigma=0.5),
    ),
    "cde-stress": _case(AlgorithmConfig("cde", **BASE), exact_local_error=True),
    "cde-attackers-tolerance": _case(
        AlgorithmConfig("cde", tolerance=2, **BASE), n_agents=12, attackers=2
    ),
    "cde-adaptive-liars": _case(
        AlgorithmConfig("cde", tolerance=2, **BASE),
        n_agents=12,
        attackers=2,
        attack="adaptive",
        exact_local_error=True,
        activation=Activation("power", (0.0, 1.5)),
    ),
    "cde-stress-two-optimal": _case(
        AlgorithmConfig("cde", **BASE),
        env=Environment((0.95, 0.9, 0.2, 0.1)),
        exact_local_error=True,
        stop="global",
    ),
    # the cut sits where some trials end before it: tuned for the sub-Gaussian T (8 pulls per
    # arm); the exact Bernoulli T (2) would end every trial long before it
    "cde-budget": _case(AlgorithmConfig("cde", **BASE), budget=260, declare_bernoulli=False),
    "cde-exhausted": _case(  # M = 3 guards against 2 liars who never come: 6 reports, 4 arms
        AlgorithmConfig("cde", privacy=0.5, tolerance=2, **BASE),
        n_agents=6,
        env=Environment((0.6, 0.5, 0.45, 0.4)),
    ),
}
CDE_CASES = [name for name in CASES if name.startswith("cde")]
TIE_CASES = [name for name in CASES if name.startswith("tie-")]


@functools.cache
def _results(name: str, engine: str) -> tuple[TrialResult, ...]:
    case = CASES[name]
    if engine == "reference":
        return tuple(reference.run_trial(case.config, seed) for seed in range(case.n_ref))
    seeds = np.random.SeedSequence(20_240_601).spawn(case.n_fast)
    return tuple(fast.run_trial(case.config, seed) for seed in seeds)


def _check_invariants(config: SimulationConfig, result: TrialResult) -> None:
    algo = config.algorithm
    n_arms, n_agents = config.environment.n_arms, config.n_agents
    assert 1 <= result.sample_complexity <= config.budget
    if result.stopped_by == "budget":
        assert result.sample_complexity == config.budget
    if algo.reports:
        _check_reports(config, result)
        return
    if algo.algorithm == "central":
        assert result.stopped_by in ("global", "budget")
        assert result.messages == (n_agents - 1) * result.sample_complexity
        assert result.agent_arms is not None and result.agent_arms.shape == (1,)
        return
    assert result.agent_votes is not None and result.agent_votes.shape == (n_agents, n_arms)
    assert result.agent_arms is not None and result.agent_arms.shape == (n_agents,)
    if not algo.votes:
        assert result.messages == 0 and not result.eliminations and not result.agent_votes.any()
    else:
        assert result.stopped_by != "exhausted"  # a voting run that exhausts is a tie
    if algo.vote_drop == 0.0:
        assert result.settled_messages == 0
    _check_tie(config, result)
    attackers = config.attackers
    assert (result.agent_arms[:attackers] == -1).all()  # the Byzantine agents hold nothing
    if result.stopped_by == "all-agents":
        assert (result.agent_arms[attackers:] >= 0).all()
    if algo.votes and result.resets == 0:
        threshold = config.threshold
        assert threshold is not None
        # Theorem 1, agents acting one at a time: at most M K - 1 votes, one per (agent, arm).
        # (A Byzantine vote against the attacked arm once it is the last one can add one more.)
        # CE adds its settled messages: one when an agent's local set reaches one arm, and one
        # more after each elimination of an arm it did not visibly vote against.
        votes = result.messages - result.settled_messages
        assert votes <= threshold * n_arms - 1 + (attackers > 0)
        assert int(result.agent_votes.sum()) == votes
        assert result.settled_messages <= n_agents * (1 + len(result.eliminations))
        assert len(result.eliminations) <= n_arms - 1
        assert [e.order for e in result.eliminations] == list(
            range(1, len(result.eliminations) + 1)
        )
        assert all(e.votes == threshold for e in result.eliminations)
        times = [e.time for e in result.eliminations]
        assert times == sorted(times) and all(t <= result.sample_complexity for t in times)
        if result.stopped_by == "global":
            assert len(result.eliminations) == n_arms - 1
            assert result.best_arm not in {e.arm for e in result.eliminations}
    if not algo.global_reset:
        assert result.resets == 0
    # Each epoch's eliminations are numbered 1, 2, ... in time order; epochs never go back.
    epochs = [e.epoch for e in result.eliminations]
    assert epochs == sorted(epochs) and all(0 <= e <= result.resets for e in epochs)
    for epoch in set(epochs):
        orders = [e.order for e in result.eliminations if e.epoch == epoch]
        assert orders == list(range(1, len(orders) + 1))
        assert len(orders) <= n_arms - 1


def _check_reports(config: SimulationConfig, result: TrialResult) -> None:
    """CDE: one report per agent at most, sent at or after its run's last activation (the
    Byzantine agents': the liars' arm, at their first; adaptive liars: all the same bad arm, at
    the time of the honest report that let them accept it); an answer is the first arm with M of
    them, at the last report; no answer means no arm could still get M."""
    n_arms, n_agents, threshold = config.environment.n_arms, config.n_agents, config.threshold
    reports, times = result.agent_reports, result.agent_report_times
    assert reports is not None and times is not None and threshold is not None
    assert reports.shape == times.shape == (n_agents,)
    sent = reports >= 0
    assert result.messages == sent.sum() and ((times > 0) == sent).all()
    assert times.max(initial=0) <= result.sample_complexity
    assert (times[config.attackers :][sent[config.attackers :]] >= config.local_budget).all()
    a = config.attackers
    if config.attack == "adaptive" and sent[:a].any():
        assert sent[:a].all() and result.stopped_by == "global"
        assert (reports[:a] == result.best_arm).all() and result.best_arm in config.bad_arms
        assert (times[:a] == result.sample_complexity).all()
        assert np.count_nonzero(reports[a:] == result.best_arm) == threshold - a
    else:
        assert (reports[:a][sent[:a]] == config.lie_arm).all()
    assert result.agent_arms is not None
    assert (result.agent_arms[:a] == -1).all()  # the local answers of the honest reporters
    assert ((result.agent_arms[a:] >= 0) == sent[a:]).all()
    counts = np.bincount(reports[sent], minlength=n_arms)
    assert result.settled_messages == 0 and result.resets == 0 and result.agent_votes is None
    if result.stopped_by == "global":
        assert (
            counts[result.best_arm] == threshold
            and (np.delete(counts, result.best_arm) < threshold).all()
        )
        assert times.max() == result.sample_complexity
        assert result.candidates == [result.best_arm]
        assert [e.arm for e in result.eliminations] == [
            a for a in range(n_arms) if a != result.best_arm
        ]
        assert all(e.time == result.sample_complexity for e in result.eliminations)
        assert [e.order for e in result.eliminations] == list(range(1, n_arms))
        env, eps = config.environment, config.algorithm.epsilon
        assert result.correct == env.eps_optimal(result.best_arm, eps)
        return
    assert result.stopped_by in ("exhausted", "budget")
    assert not result.correct and not result.eliminations
    assert result.candidates == list(range(n_arms))
    assert (counts < threshold).all() and result.best_arm == int(np.argmax(counts))
    if result.stopped_by == "exhausted":
        assert (counts + n_agents - result.messages < threshold).all()
        assert times.max() == result.sample_complexity


def _check_tie(config: SimulationConfig, result: TrialResult) -> None:
    """A tie leaves its remaining arms as candidates, none with M votes, and none could get them:
    `is_tied` holds on the trial's votes, counting as settled what the simulator knows (agents
    holding an arm: CE's flags are a subset of them; retired agents under the global rule)."""
    n_arms = config.environment.n_arms
    if result.stopped_by != "tie":
        assert result.candidates == [result.best_arm]
        return
    assert config.algorithm.votes and config.threshold is not None
    out = {e.arm for e in result.eliminations if e.epoch == result.resets}
    assert result.candidates == sorted(set(range(n_arms)) - out)
    assert len(result.candidates) >= 2
    assert result.agent_votes is not None and result.agent_arms is not None
    votes = result.agent_votes.sum(axis=0)  # sent in this epoch == counted for remaining arms
    assert all(votes[a] < config.threshold for a in result.candidates)
    assert result.best_arm == min(result.candidates, key=lambda a: (votes[a], a))
    env, eps = config.environment, config.algorithm.epsilon
    optimal = [env.eps_optimal(a, eps, result.sample_complexity) for a in result.candidates]
    assert result.correct == all(optimal)
    voters = {a: {str(n) for n in np.flatnonzero(result.agent_votes[:, a])} for a in range(n_arms)}
    holding = {str(n) for n in np.flatnonzero(result.agent_arms >= 0)}
    settled = holding if config.algorithm.vote_drop or config.stop == "global" else set()
    settled |= {str(n) for n in range(config.attackers)}  # a superset of those that acted
    assert is_tied(result.candidates, voters, settled, config.n_agents, config.threshold)


def _two_sample(ref: list[float], fst: list[float]) -> float:
    if np.ptp(np.r_[ref, fst]) == 0:
        return 1.0
    return float(stats.mannwhitneyu(ref, fst).pvalue)


def _proportions(ref: list[bool], fst: list[bool]) -> float:
    table = [[sum(ref), len(ref) - sum(ref)], [sum(fst), len(fst) - sum(fst)]]
    return float(stats.fisher_exact(table).pvalue)


@pytest.mark.parametrize("name", list(CASES))
def test_fast_matches_reference(name: str) -> None:
    case = CASES[name]
    ref = _results(name, "reference")
    fst = _results(name, "fast")
    for result in (*ref, *fst):
        _check_invariants(case.config, result)

    p = _two_sample([r.sample_complexity for r in ref], [r.sample_complexity for r in fst])
    assert p > P_MIN, (
        f"{name}: sample complexity differs (p={p:.2g}): reference mean "
        f"{np.mean([r.sample_complexity for r in ref]):.1f}, "
        f"fast {np.mean([r.sample_complexity for r in fst]):.1f}"
    )
    p = _two_sample([r.messages for r in ref], [r.messages for r in fst])
    assert p > P_MIN, f"{name}: messages differ (p={p:.2g})"
    p = _two_sample([len(r.eliminations) for r in ref], [len(r.eliminations) for r in fst])
    assert p > P_MIN, f"{name}: number of eliminations differs (p={p:.2g})"
    # Stop reasons and eps-correctness: the same proportions.
    for reason in {r.stopped_by for r in (*ref, *fst)}:
        p = _proportions(
            [r.stopped_by == reason for r in ref], [r.stopped_by == reason for r in fst]
        )
        assert p > P_MIN, f"{name}: stopped by {reason} in different proportions (p={p:.2g})"
    p = _proportions([r.correct for r in ref], [r.correct for r in fst])
    assert p > P_MIN, f"{name}: correctness rates differ (p={p:.2g})"


def test_dser4_resets_happen_in_both_engines() -> None:
    ref = _results("dser4", "reference")
    fst = _results("dser4", "fast")
    assert any(r.resets > 0 for r in ref) and any(r.resets > 0 for r in fst)
    p = _two_sample([r.resets for r in ref], [r.resets for r in fst])
    assert p > P_MIN


def test_budget_case_stops_by_budget_about_as_often() -> None:
    ref = [r.stopped_by == "budget" for r in _results("budget", "reference")]
    fst = [r.stopped_by == "budget" for r in _results("budget", "fast")]
    assert 0 < sum(ref) < len(ref) and 0 < sum(fst) < len(fst)
    assert _proportions(ref, fst) > P_MIN


def test_exhausted_when_every_agent_retires() -> None:
    # Independent agents under the "global" rule never shrink the global set: they all retire.
    assert {r.stopped_by for r in _results("independent-ser4-global", "fast")} == {"exhausted"}
    assert {r.stopped_by for r in _results("independent-ser4-global", "reference")} == {"exhausted"}


def test_fast_is_deterministic_per_seed_and_takes_seed_sequences() -> None:
    config = CASES["dser4"].config
    seed = np.random.SeedSequence(7)
    a, b = fast.run_trial(config, seed), fast.run_trial(config, seed)
    assert a.to_json() == b.to_json()
    assert a.agent_votes is not None and b.agent_votes is not None
    assert np.array_equal(a.agent_votes, b.agent_votes)
    assert a.agent_arms is not None and b.agent_arms is not None
    assert np.array_equal(a.agent_arms, b.agent_arms)
    assert fast.run_trial(config, 3).to_json() == fast.run_trial(config, 3).to_json()
    runs = run_trials(config, trials=3, seed=11, engine="fast")
    again = run_trials(config, trials=3, seed=11, engine="fast")
    assert [r.to_json() for r in runs] == [r.to_json() for r in again]


def test_every_subroutine_has_a_fast_code_with_its_order_and_bound() -> None:
    """A name the registry gains must reach the compiled kernel with the right flags: its code,
    SER3's reshuffled order (the `shuffle` class flag) and, for the sharper bounds, their own.
    CDE's fixed-budget run is the one exception: its trials have their own engine (cde_fast)."""
    assert set(fast._SUB_CODES) == set(SUBROUTINES) - {"fixed-budget"}
    for name, cls in SUBROUTINES.items():
        if fast._SUB_CODES.get(name) == fast.SUB_SE:
            assert (name in fast._SHUFFLED) == cls.shuffle  # type: ignore[attr-defined]
    assert fast._BOUNDS_AND_RULES["kl-se"][0] == fast.B_KL
    assert fast._BOUNDS_AND_RULES["stitched-se"][0] == fast.B_STITCHED
    assert fast._BOUNDS_AND_RULES["ugapec"] == (fast.B_HOEFFDING, fast.R_UGAPEC)
    assert fast._BOUNDS_AND_RULES["kl-lucb"] == (fast.B_KL, fast.R_LUCB)
    assert fast._BOUNDS_AND_RULES["stitched-lucb"] == (fast.B_STITCHED, fast.R_LUCB)


def test_central_counts_n_minus_1_messages_per_activation() -> None:
    for r in _results("central-ser3", "fast"):
        assert r.messages == 7 * r.sample_complexity
        assert r.stopped_by == "global" and r.correct


# ----------------------------------------------------------------------------- Byzantine agents


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_attackers_vote_against_the_best_arm_only(engine: str) -> None:
    """Both engines: the attackers send one vote, against arm 0, and nothing else; without
    tolerance (A = M) arm 0 always leaves, with tolerance f = A it never does and every attacker
    is a suspect (it voted against the returned arm)."""
    for name, fails in (("attackers", True), ("attackers-tolerance", False)):
        config = CASES[name].config
        a = config.attackers
        assert config.attacked_arm == 0
        for r in _results(name, engine):
            assert r.agent_votes is not None
            assert r.agent_votes[:a, 0].all() and not r.agent_votes[:a, 1:].any()
            assert r.suspects == sorted(r.suspects)
            assert r.suspects == [int(n) for n in np.flatnonzero(r.agent_votes[:, r.best_arm])]
            assert r.to_json()["suspects"] == len(r.suspects)
            assert (0 in {e.arm for e in r.eliminations}) is fails
            assert r.correct is not fails
            if not fails:
                assert set(range(a)) <= set(r.suspects)


# ----------------------------------------------------------------------------- ties


@pytest.mark.parametrize("name", TIE_CASES)
def test_engines_agree_on_ties(name: str) -> None:
    """Both engines tie in some trials and not in others, in the same proportion; a tie's
    candidates (how many arms it keeps) and its correctness agree too."""
    ref = _results(name, "reference")
    fst = _results(name, "fast")
    for results in (ref, fst):
        ties = [r.stopped_by == "tie" for r in results]
        assert 0 < sum(ties) < len(ties), f"{name}: {sum(ties)}/{len(ties)} ties"
    p = _proportions([r.stopped_by == "tie" for r in ref], [r.stopped_by == "tie" for r in fst])
    assert p > P_MIN, f"{name}: tie rates differ (p={p:.2g})"
    tied_ref = [r for r in ref if r.stopped_by == "tie"]
    tied_fst = [r for r in fst if r.stopped_by == "tie"]
    p = _two_sample([len(r.candidates) for r in tied_ref], [len(r.candidates) for r in tied_fst])
    assert p > P_MIN, f"{name}: tied candidate counts differ (p={p:.2g})"
    p = _proportions([r.correct for r in tied_ref], [r.correct for r in tied_fst])
    assert p > P_MIN, f"{name}: correctness of ties differs (p={p:.2g})"
    p = _two_sample([r.settled_messages for r in ref], [r.settled_messages for r in fst])
    assert p > P_MIN, f"{name}: settled messages differ (p={p:.2g})"


# ----------------------------------------------------------------------------- CDE


@pytest.mark.parametrize("name", CDE_CASES)
def test_engines_agree_on_what_each_agent_sends(name: str) -> None:
    """CDE: what the coordinator sees of one agent, its report and its time (the privacy audit's
    records), has one distribution in both engines: who reports (agent 0, the most active one
    under the skewed cases), the first report's time, agent 0's report time when it reports, how
    many reports name the best arm, and whether agent 0's report names it."""
    ref = _results(name, "reference")
    fst = _results(name, "fast")
    best = CASES[name].config.attacked_arm
    features = {
        "agent 0 reports": lambda r: float(r.agent_reports[0] >= 0),
        "first report's time": lambda r: float(r.agent_report_times[r.agent_reports >= 0].min()),
        "agent 0's time": lambda r: float(r.agent_report_times[0]),
        "reports of the best arm": lambda r: float((r.agent_reports == best).sum()),
        "agent 0 reports the best arm": lambda r: float(r.agent_reports[0] == best),
    }
    for feature, value in features.items():
        p = _two_sample([value(r) for r in ref], [value(r) for r in fst])
        assert p > P_MIN, f"{name}: {feature} differs (p={p:.2g})"


def test_cde_cases_reach_each_stop() -> None:
    """The CDE cases cover what they are for: answers right and wrong, no answer (exhausted), the
    budget cut, and liars whose arm is accepted sometimes."""
    stops = {name: {r.stopped_by for r in _results(name, "fast")} for name in CDE_CASES}
    assert stops["cde-exhausted"] >= {"global", "exhausted"}
    assert stops["cde-budget"] >= {"global", "budget"}
    stress = _results("cde-stress", "fast")
    assert any(r.stopped_by == "global" and not r.correct for r in stress)
    liars = CASES["cde-attackers-tolerance"].config
    assert any(r.best_arm == liars.lie_arm for r in _results("cde-attackers-tolerance", "fast"))
    adaptive = _results("cde-adaptive-liars", "fast")
    assert any(r.agent_reports[0] >= 0 for r in adaptive)  # the liars struck in some trials
    two = _results("cde-stress-two-optimal", "fast")  # both eps-optimal arms are accepted
    assert {r.best_arm for r in two if r.correct} == {0, 1}
