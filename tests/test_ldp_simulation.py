"""The LDP mode's engine (common/simulation/ldp.py) against what common.ldp promises.

Fixed seeds throughout. A rate "within delta" means its exact (Clopper-Pearson) 97.5 % upper
bound is at most delta = 0.05, not merely that the count looks small; "above delta" means its
97.5 % lower bound is above it. Each property is paired with a run that breaks it where one exists
(Byzantine reports with corrupt = 0), so that the tests could fail.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import Environment, problem
from common.ldp import Mechanism, decide
from common.simulation import SimulationConfig, TrialResult, run_trials
from common.simulation.ldp import occurrence_ranks, privatize, run_trial
from common.stats import clopper_pearson

DELTA = 0.05
SEED = 20261127


def ldp(dp_epsilon: float = 1.0, **fields: object) -> AlgorithmConfig:
    return AlgorithmConfig("ldp", dp_epsilon=dp_epsilon, delta=DELTA, **fields)  # type: ignore[arg-type]


def failures(results: list[TrialResult]) -> int:
    return sum(not r.correct for r in results)


def rate_within_delta(count: int, trials: int) -> bool:
    return clopper_pearson(count, trials)[1] <= DELTA


def rate_above_delta(count: int, trials: int) -> bool:
    return clopper_pearson(count, trials)[0] > DELTA


# Problem 1 (0.7, 0.5, 0.3, 0.1 x 7; arms 0 and 1 eps-optimal) with 20,000 uniform agents: about
# 1,050 reports identify it, so no trial runs out of reports.
PROBLEM_1 = SimulationConfig(problem("feraud-1").environment, ldp(), n_agents=20_000)


@functools.cache
def problem_1_trials() -> list[TrialResult]:
    return run_trials(PROBLEM_1, 200, seed=SEED)


# The tests that read problem_1_trials() run on one xdist worker, so that its cache computes the
# 200 trials once (on two workers each computed them, the file's largest cost).
PROBLEM_1_TRIALS = pytest.mark.xdist_group("ldp-problem-1")


# --------------------------------------------------------------------------- the mechanism


def test_vectorized_privatize_is_the_mechanisms_rule() -> None:
    rng = np.random.default_rng(SEED)
    for dp_epsilon in (0.5, 1.0, 3.0):
        mechanism = Mechanism(dp_epsilon)
        rewards, u_round, u_flip = rng.random((3, 2000))
        rewards[:500] = np.round(rewards[:500])  # Bernoulli rewards among them
        bits = privatize(rewards, u_round, u_flip, mechanism)
        expected = [mechanism.privatize(*x) for x in zip(rewards, u_round, u_flip, strict=True)]
        assert bits.tolist() == expected


def test_occurrence_ranks_count_the_earlier_draws_of_the_same_agent() -> None:
    agents = np.array([5, 3, 5, 5, 0, 3, 9, 5])
    assert occurrence_ranks(agents).tolist() == [0, 0, 1, 2, 0, 1, 0, 3]


# --------------------------------------------------------------------------- (a) correctness


@PROBLEM_1_TRIALS
def test_problem_1_fails_within_delta_at_dp_epsilon_1() -> None:
    results = problem_1_trials()
    assert all(r.stopped_by == "global" for r in results)  # answers, not exhausted runs
    assert rate_within_delta(failures(results), len(results))


def test_several_eps_optimal_arms_fail_within_delta() -> None:
    """Arms 0, 1, 2 are eps-optimal, arms 3 and 4 miss by 0.01: the answer may be any of the
    three (the run shows it is), never 3 or 4 beyond delta."""
    env = Environment((0.7, 0.68, 0.66, 0.44, 0.44))
    config = SimulationConfig(env, ldp(dp_epsilon=2.0), n_agents=20_000)
    results = run_trials(config, 150, seed=SEED)
    assert {r.best_arm for r in results if r.correct} == {0, 1, 2}
    assert all(r.stopped_by == "global" for r in results)
    assert rate_within_delta(failures(results), len(results))


# --------------------------------------------------------------------------- (b) Byzantine devices

# 100 Byzantine devices among 10,000 make half of the activations (groups: 1 % of the agents make
# 50 %), one report each: bit 0 on arm 0, bit 1 on arm 1, alternately. Arm 1 is not eps-optimal.
ATTACK = SimulationConfig(
    Environment((0.7, 0.3)),
    ldp(tolerance=100),
    n_agents=10_000,
    attackers=100,
    activation=Activation("groups", (0.01, 0.5)),
)


def test_f_attackers_fail_within_delta_with_corrupt_f_times_b() -> None:
    results = run_trials(ATTACK, 100, seed=SEED)
    assert all(r.stopped_by == "global" for r in results)
    assert rate_within_delta(failures(results), len(results))
    assert all(r.messages <= ATTACK.n_agents for r in results)


def test_the_same_attack_without_widening_fails_more_often_than_delta() -> None:
    """corrupt = 0: the intervals ignore the 100 liars' reports, which then decide the answer."""
    config = dataclasses.replace(ATTACK, algorithm=ldp(tolerance=0))
    results = run_trials(config, 60, seed=SEED)
    assert rate_above_delta(failures(results), len(results))
    missed = sum(not covers(r, config.environment.means) for r in results)
    assert rate_above_delta(missed, len(results))  # and the intervals miss the means


# --------------------------------------------------------------------------- (c) cost and N


def test_activations_do_not_grow_with_the_fleet() -> None:
    """At N = 10^6 the mean activations are within 15 % of N = 10^5's: each report is one new
    device either way (B = 1), the fleet only has to be large enough."""
    base = dataclasses.replace(PROBLEM_1, n_agents=100_000)
    means = [
        np.mean([r.sample_complexity for r in run_trials(config, 60, seed=SEED)])
        for config in (base, dataclasses.replace(base, n_agents=1_000_000))
    ]
    assert abs(means[1] / means[0] - 1.0) <= 0.15


# --------------------------------------------------------------------------- (d) the B limit


@pytest.mark.parametrize("reports_per_agent", [1, 3])
def test_no_agent_sends_more_than_b_reports_and_a_small_fleet_runs_out(
    reports_per_agent: int,
) -> None:
    """30 agents under a skewed P_N (the first ones are drawn again and again within a batch),
    2 of them Byzantine: far too few reports for Problem 1, so every run spends them all."""
    config = SimulationConfig(
        problem("feraud-1").environment,
        ldp(reports_per_agent=reports_per_agent, tolerance=2),
        n_agents=30,
        attackers=2,
        activation=Activation("zipf", (1.2,)),
    )
    for seed in range(5):
        result = run_trial(config, seed, record=True)
        log = result.report_log
        assert log is not None
        sent = np.bincount(log[:, 0], minlength=30)
        assert sent.max() <= reports_per_agent
        assert result.stopped_by == "exhausted"
        assert (sent == reports_per_agent).all() and result.messages == 30 * reports_per_agent
        assert result.sample_complexity > result.messages  # spent agents still act
        counts = np.bincount(log[:, 1], minlength=10)
        assert result.estimates is not None
        assert [e.reports for e in result.estimates] == counts.tolist()
        liars = log[log[:, 0] < 2]
        assert {(int(a), int(b)) for _, a, b in liars} <= {(0, 0), (config.lie_arm, 1)}


# --------------------------------------------------------------------------- (e) the estimates


def covers(result: TrialResult, means: tuple[float, ...]) -> bool:
    assert result.estimates is not None
    return all(e.low <= mu <= e.high for e, mu in zip(result.estimates, means, strict=True))


@PROBLEM_1_TRIALS
def test_the_intervals_cover_every_mean_together_in_1_minus_delta_of_trials() -> None:
    results = problem_1_trials()
    means = PROBLEM_1.environment.means
    missed = sum(not covers(r, means) for r in results)
    assert rate_within_delta(missed, len(results))
    for r in results:  # not vacuous: the leader is known to be above 0.4 at the answer
        assert r.estimates is not None and r.lift is not None
        assert r.estimates[r.best_arm].low > 0.3
        assert r.stopped_by == "global"  # identified, on the decision's narrower intervals
        assert all(d.high > -PROBLEM_1.algorithm.epsilon for d in r.lift)


def test_gaussian_estimates_are_on_the_rewards_scale() -> None:
    """Rewards clipped to [1 - 1.5, 2 + 1.5] and mapped to [0, 1]; the estimates come back on the
    rewards' scale and cover the (clipped, here practically equal) means."""
    env = Environment((2.0, 1.0), rewards="gaussian", sigma=0.5)
    results = run_trials(SimulationConfig(env, ldp(), n_agents=20_000), 60, seed=SEED)
    assert failures(results) == 0
    assert sum(not covers(r, env.means) for r in results) <= 1
    for r in results:
        assert r.estimates is not None
        assert all(-0.5 <= e.low <= e.high <= 3.5 for e in r.estimates)


# --------------------------------------------------------------------------- wiring


def test_both_engine_names_run_the_ldp_engine() -> None:
    config = dataclasses.replace(PROBLEM_1, n_agents=5_000)
    fast = run_trials(config, 3, seed=SEED, engine="fast")
    reference = run_trials(config, 3, seed=SEED, engine="reference")
    assert [r.to_json() for r in fast] == [r.to_json() for r in reference]


def test_the_coordinator_keeps_the_leader_when_its_reports_fall_below_q() -> None:
    """An arm whose report mean is far below q = 1 - p (Byzantine zeros beyond `corrupt`): its
    interval is [0, 0], not an empty one that would remove every remaining arm."""
    decision = decide([100, 100], [0, 30], [0], epsilon=0.25, delta=DELTA, dp_epsilon=1.0)
    assert decision.leader == 0 and decision.eliminate == ()
    assert (decision.estimates[0].low, decision.estimates[0].high) == (0.0, 0.0)
