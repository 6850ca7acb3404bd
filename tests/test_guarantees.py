"""The papers' guarantees, checked on whole simulated experiments with fixed seeds.

Cheap checks run on the reference simulator. The statistical ones need hundreds of trials and run
on the fast engine: they are marked `slow` and skipped until common/simulation/fast.py exists.
Defaults: eps = 0.25, delta = 0.05, eta = 0.9, Problem 1 (feraud-1: 0.7, 0.5, 0.3, 0.1 x 7), so
the eps-optimal arms are 0 and 1.
"""

from __future__ import annotations

import numpy as np
import pytest

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import problem
from common.simulation import SimulationConfig, TrialResult, run_trials, summarize

FERAUD_1 = problem("feraud-1").environment
K = FERAUD_1.n_arms
DELTA = 0.05
TRIALS = 200

heavy = [pytest.mark.slow]
ENGINES = ["reference", "fast"]


def check_vote_bookkeeping(config: SimulationConfig, result: TrialResult) -> None:
    """What every voting trial with one agent active at a time must satisfy."""
    m = config.threshold
    assert m is not None
    votes = result.messages - result.settled_messages  # CE also sends settled messages
    assert votes <= m * K - 1  # Theorem 1
    assert result.agent_votes is not None
    assert result.agent_votes.shape == (config.n_agents, K)
    if result.resets == 0:
        # no late or duplicate votes when agents act one at a time: every vote message is a
        # distinct (agent, arm) vote
        assert int(result.agent_votes.sum()) == votes
        out = [e.arm for e in result.eliminations]
        assert len(out) == len(set(out)) <= K - 1
        for e in result.eliminations:
            assert e.votes == m
            assert int(result.agent_votes[:, e.arm].sum()) == m
        assert [e.order for e in result.eliminations] == list(range(1, len(out) + 1))


def check_all_agents_stop(config: SimulationConfig, result: TrialResult) -> None:
    assert result.stopped_by == "all-agents"
    assert result.agent_arms is not None
    assert (result.agent_arms >= 0).all()
    out = {e.arm for e in result.eliminations}
    assert not out & set(result.agent_arms.tolist())  # every agent holds an arm still in K
    optimal = set(FERAUD_1.eps_optimal_arms(config.algorithm.epsilon).tolist())
    assert result.correct == (set(result.agent_arms.tolist()) <= optimal)


# -- cheap: reference simulator ----------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_de_messages_at_most_m_k_minus_1(engine: str) -> None:
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(), n_agents=32)
    assert config.threshold == 29
    for result in run_trials(config, 2, seed=11, engine=engine):
        check_vote_bookkeeping(config, result)
        check_all_agents_stop(config, result)


@pytest.mark.parametrize("engine", ENGINES)
def test_independent_baseline_sends_no_message(engine: str) -> None:
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(algorithm="independent"), n_agents=4)
    for result in run_trials(config, 3, seed=12, engine=engine):
        assert result.messages == 0
        assert result.eliminations == []
        assert result.agent_votes is not None
        assert not result.agent_votes.any()
        check_all_agents_stop(config, result)
        assert result.correct


@pytest.mark.parametrize("engine", ENGINES)
def test_central_baseline_broadcasts_n_minus_1_per_activation(engine: str) -> None:
    n = 32
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(algorithm="central"), n_agents=n)
    for result in run_trials(config, 5, seed=13, engine=engine):
        assert result.stopped_by == "global"
        assert result.messages == (n - 1) * result.sample_complexity
        assert result.correct


def dser4(budget: int) -> SimulationConfig:
    algo = AlgorithmConfig(subroutine="ser4", phi=1e-4)
    return SimulationConfig(FERAUD_1, algo, n_agents=32, budget=budget)


def test_dser4_resets_and_messages_per_epoch_reference() -> None:
    config = dser4(budget=60_000)
    assert config.algorithm.global_reset
    m = config.threshold
    assert m is not None
    for result in run_trials(config, 2, seed=14, engine="reference"):
        assert result.resets > 0
        assert result.messages <= (result.resets + 1) * (m * K - 1)  # Theorem 4, per epoch


# -- statistical: fast engine ------------------------------------------------------------------
@pytest.mark.parametrize(
    "subroutine", ["ser3", "ugapec", "kl-se", "stitched-se", "kl-lucb", "stitched-lucb"]
)
@pytest.mark.slow
def test_de_returns_an_eps_optimal_arm_with_probability_1_minus_delta(subroutine: str) -> None:
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(subroutine=subroutine), n_agents=32)
    results = run_trials(config, TRIALS, seed=2019, engine="fast")
    for result in results:
        check_vote_bookkeeping(config, result)
        check_all_agents_stop(config, result)
    assert summarize(results)["failure_rate"] <= DELTA


@pytest.mark.parametrize(("xi", "m"), [(0.1, 11), (0.05, 18)])
@pytest.mark.slow
def test_ce_failure_rate_at_most_delta(xi: float, m: int) -> None:
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(algorithm="ce", xi=xi), n_agents=32)
    assert config.threshold == m
    results = run_trials(config, TRIALS, seed=2023, engine="fast")
    for result in results:
        # dropped votes are never sent: each arm still gets at most M votes delivered
        check_vote_bookkeeping(config, result)
        check_all_agents_stop(config, result)
    assert summarize(results)["failure_rate"] <= DELTA


@pytest.mark.slow
def test_dp_mase_failure_rate_at_most_delta() -> None:
    algo = AlgorithmConfig(algorithm="dp-mase", every_arm=True, dp_epsilon=1.0)
    config = SimulationConfig(FERAUD_1, algo, n_agents=32, stop="global")
    assert config.threshold == 5
    results = run_trials(config, TRIALS, seed=2020, engine="fast")
    for result in results:
        assert result.stopped_by == "global"
        check_vote_bookkeeping(config, result)
        assert len(result.eliminations) == K - 1
        assert result.best_arm not in {e.arm for e in result.eliminations}
    assert summarize(results)["failure_rate"] <= DELTA


@pytest.mark.slow
def test_dser4_resets_and_messages_per_epoch_fast() -> None:
    config = dser4(budget=60_000)
    m = config.threshold
    assert m is not None
    results = run_trials(config, 40, seed=15, engine="fast")
    for result in results:
        assert result.messages <= (result.resets + 1) * (m * K - 1)
    assert all(r.resets > 0 for r in results)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["de", "ce"])
def test_skewed_activation_is_faster_in_rios_model(algorithm: str) -> None:
    """Rio et al.: every arm per activation, global stop with retirement; skewed P_N is faster."""
    algo = AlgorithmConfig(
        algorithm=algorithm, xi=0.1 if algorithm == "ce" else 0.0, every_arm=True
    )

    def mean_sample_complexity(activation: str) -> float:
        config = SimulationConfig(
            FERAUD_1, algo, n_agents=64, activation=Activation.parse(activation), stop="global"
        )
        results = run_trials(config, 20, seed=2021, engine="fast")
        assert all(r.stopped_by == "global" for r in results)
        return float(np.mean([r.sample_complexity for r in results]))

    uniform = mean_sample_complexity("uniform")
    assert mean_sample_complexity("groups:0.5:0.8") < uniform
    assert mean_sample_complexity("power:0:0.8") < uniform


@pytest.mark.slow
def test_de_two_regimes_on_problem_2() -> None:
    """Feraud et al., Problem 2: with 32 agents DE is slower than with 64 (M = 29 voters are
    needed, and only 16 agents make 80% of the activations), and at 64 agents the skewed
    problem is faster than the uniform one."""
    skewed = problem("feraud-2").activation

    def mean_sample_complexity(n_agents: int, activation: Activation) -> float:
        config = SimulationConfig(FERAUD_1, n_agents=n_agents, activation=activation)
        results = run_trials(config, 20, seed=2022, engine="fast")
        return float(np.mean([r.sample_complexity for r in results]))

    at_64 = mean_sample_complexity(64, skewed)
    assert mean_sample_complexity(32, skewed) > at_64
    assert at_64 < mean_sample_complexity(64, Activation())
