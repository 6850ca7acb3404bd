"""Byzantine agents that vote against the best arm, and the tolerance f (threshold M + f).

The attack (SimulationConfig.attackers = A): agents 0 .. A-1 vote against the best arm at their first
activation and against nothing else. Without tolerance, A >= M attackers remove it on their own; with
tolerance f >= A the threshold is M + f, so an arm leaves only with >= M honest votes: the liars add
nothing to what honest errors can do (whose rate is measured; eta^M bounds only M given agents,
docs/SUBROUTINES.md section 3).

Failure = the returned arm is not eps-optimal. On feraud-1 (0.7, 0.5, 0.3, 0.1 x 7) the default
eps = 0.25 makes arm 1 eps-optimal too, so removing arm 0 is NOT a failure there (measured below);
the contrast needs eps = 0.1, where arm 0 is the only eps-optimal arm.

With fewer than M attackers the missing votes must come from honest agents voting against the
(only eps-optimal) best arm, and the local subroutines are far more reliable than their eta bound:
in every configuration measured no honest agent ever did, so f < M attackers fail measurably
without tolerance too. What they do break is the certificate (eta^(M - f) instead of eta^M); that
is reported, not hidden.

Fast engine, 100 trials per row, fixed seeds; `pytest -s tests/test_byzantine.py` (or -rA) prints the
table of measured failure rates. "Within delta" is the one-sided binomial rule of tests/stats.py at
level delta: at most ACCEPTED = 13 failures of 100, which a configuration failing at rate delta
passes with probability >= 1 - 1e-3; "broken" is its rejection. The attacks fail every trial, so the
rule's power against them is 1 (0.997 against a rate of 0.25).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

import numpy as np
import pytest

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import Environment, problem
from common.errors import ParameterError
from common.simulation import SimulationConfig, TrialResult, run_trials
from tests.stats import ALPHA, max_failures

DELTA = 0.05
TRIALS = 100
SEED = 2024
ACCEPTED = max_failures(TRIALS, DELTA, ALPHA)
FERAUD_1 = problem("feraud-1").environment
HARD = Environment((0.6, 0.45, 0.3, 0.2))  # eps = 0.1: only arm 0 is eps-optimal

# name -> (configuration, description)
CASES: dict[str, tuple[SimulationConfig, str]] = {}


def _case(
    name: str, description: str, env: Environment, algo: AlgorithmConfig, **kw: object
) -> None:
    CASES[name] = (SimulationConfig(env, algo, **kw), description)  # type: ignore[arg-type]


# N - A honest agents must reach the threshold M + f, or no other arm can ever leave and every
# trial ends tied (tests/test_ties.py): N = 96 = 29 attackers + 67 honest >= 58.
for _tol in (0, 29):
    _case(
        f"de-m-attackers-f{_tol}",
        "DE feraud-1 eps=0.1 N=96",
        FERAUD_1,
        AlgorithmConfig(epsilon=0.1, tolerance=_tol),
        n_agents=96,
        attackers=29,
    )
_case(
    "de-m-attackers-eps0.25",
    "DE feraud-1 eps=0.25 N=64",
    FERAUD_1,
    AlgorithmConfig(),
    n_agents=64,
    attackers=29,
)
for _tol in (0, 29):
    _case(
        f"de-skewed-f{_tol}",
        "DE feraud-2 (groups 0.5:0.8) eps=0.1 N=96",
        FERAUD_1,
        AlgorithmConfig(epsilon=0.1, tolerance=_tol),
        n_agents=96,
        attackers=29,
        activation=problem("feraud-2").activation,
    )
for _tol in (0, 11):
    _case(
        f"ce-f{_tol}",
        "CE xi=0.1 feraud-1 eps=0.1 N=48",
        FERAUD_1,
        AlgorithmConfig(algorithm="ce", xi=0.1, epsilon=0.1, tolerance=_tol),
        n_agents=48,
        attackers=11,
    )
for _tol in (0, 5):
    _case(
        f"dp-mase-f{_tol}",
        "DP-MASE eps_dp=1 feraud-1 eps=0.1 N=32 global",
        FERAUD_1,
        AlgorithmConfig(
            algorithm="dp-mase", epsilon=0.1, dp_epsilon=1.0, every_arm=True, tolerance=_tol
        ),
        n_agents=32,
        attackers=5,
        stop="global",
    )
for _att, _tol in ((0, 0), (2, 0), (2, 2), (4, 0), (4, 4)):
    _case(
        f"hard-a{_att}-f{_tol}",
        "DE 0.6,0.45,0.3,0.2 eps=0.1 eta=0.5 N=16",
        HARD,
        AlgorithmConfig(epsilon=0.1, eta=0.5, tolerance=_tol),
        n_agents=16,
        attackers=_att,
    )


@functools.cache
def results(name: str) -> tuple[TrialResult, ...]:
    config, _ = CASES[name]
    return tuple(run_trials(config, TRIALS, seed=SEED, engine="fast"))


def failure_rate(name: str) -> float:
    return float(np.mean([not r.correct for r in results(name)]))


def within_delta(name: str) -> bool:
    """The rule: failures <= ACCEPTED (recorded in the table as well)."""
    record(name)
    return sum(not r.correct for r in results(name)) <= ACCEPTED


def attackers_caught(name: str) -> float:
    """Fraction of trials in which every attacker is a suspect."""
    attackers = set(range(CASES[name][0].attackers))
    return float(np.mean([attackers <= set(r.suspects) for r in results(name)]))


ROWS: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def failure_table() -> Iterator[None]:
    yield
    if not ROWS:
        return
    header = (
        f"{'case':<46} {'M':>3} {'f':>3} {'M+f':>4} {'A':>3} {'failure':>8} "
        f"{'best arm out':>12} {'suspects':>8} {'A caught':>8}"
    )
    print(f"\nByzantine attack, {TRIALS} trials per row (fast engine, seed {SEED}), delta={DELTA}")
    print(header)
    print("-" * len(header))
    for row in ROWS:
        print(row)


def record(name: str) -> float:
    config, description = CASES[name]
    algo = config.algorithm
    base = algo.base_threshold(config.environment.n_arms)
    rs = results(name)
    attacked = config.attacked_arm
    out = np.mean([attacked in {e.arm for e in r.eliminations} for r in rs])
    suspects = np.mean([len(r.suspects) for r in rs])
    rate = failure_rate(name)
    ROWS.append(
        f"{description:<46} {base:>3} {algo.tolerance:>3} {config.threshold:>4} "
        f"{config.attackers:>3} {rate:>8.3f} {out:>12.3f} {suspects:>8.2f} "
        f"{attackers_caught(name) if config.attackers else float('nan'):>8.3f}"
    )
    return rate


# -- thresholds and validation -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("algo", "m"),
    [
        (AlgorithmConfig(), 29),
        (AlgorithmConfig(algorithm="ce", xi=0.1), 11),
        (AlgorithmConfig(algorithm="ce", xi=0.05), 18),
        (AlgorithmConfig(algorithm="dp-mase"), 5),
    ],
)
@pytest.mark.parametrize("f", [0, 1, 3, 29])
def test_threshold_is_m_plus_f(algo: AlgorithmConfig, m: int, f: int) -> None:
    tolerant = AlgorithmConfig(**{**algo.__dict__, "tolerance": f})
    assert tolerant.base_threshold(10) == m
    assert tolerant.threshold(10) == m + f
    # CE also needs N (1 - xi) >= M + f: its dropped votes must leave M + f of them on average
    enough = math.ceil((m + f) / (1 - tolerant.vote_drop) - 1e-9)
    assert tolerant.validate_for(10, enough) == m + f
    if enough > m + f:
        with pytest.raises(ParameterError, match="CE needs agents x"):
            tolerant.validate_for(10, enough - 1)
    with pytest.raises(ParameterError) as info:
        tolerant.validate_for(10, m + f - 1)
    assert info.value.name == "agents"
    assert f"M + f = {m} + {f} = {m + f}" in str(info.value) if f else f"M={m}" in str(info.value)


def test_default_tolerance_keeps_the_papers_threshold() -> None:
    assert AlgorithmConfig().tolerance == 0
    assert AlgorithmConfig().threshold(10) == 29
    assert SimulationConfig(FERAUD_1).attackers == 0
    assert AlgorithmConfig(algorithm="independent").threshold(10) is None


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: AlgorithmConfig(tolerance=-1), "tolerance"),
        (lambda: AlgorithmConfig(tolerance=1.5), "tolerance"),  # type: ignore[arg-type]
        (lambda: AlgorithmConfig(tolerance=True), "tolerance"),
        (lambda: AlgorithmConfig(algorithm="independent", tolerance=1), "tolerance"),
        (lambda: AlgorithmConfig(algorithm="central", tolerance=2), "tolerance"),
        (lambda: SimulationConfig(FERAUD_1, AlgorithmConfig(tolerance=4), n_agents=32), "agents"),
        (lambda: SimulationConfig(FERAUD_1, n_agents=32, attackers=-1), "attackers"),
        (lambda: SimulationConfig(FERAUD_1, n_agents=32, attackers=32), "attackers"),
        (lambda: SimulationConfig(FERAUD_1, n_agents=32, attackers=2.0), "attackers"),  # type: ignore[arg-type]
        (
            lambda: SimulationConfig(
                FERAUD_1, AlgorithmConfig(algorithm="independent"), n_agents=4, attackers=1
            ),
            "attackers",
        ),
    ],
)
def test_invalid_tolerance_and_attackers_are_rejected(call: object, name: str) -> None:
    with pytest.raises(ParameterError) as info:
        call()  # type: ignore[operator]
    assert info.value.name == name
    assert str(info.value).startswith(f"{name}=")


def test_attackers_are_the_most_active_agents_and_target_the_best_arm() -> None:
    for spec in ("groups:0.5:0.8", "power:0:0.8", "zipf:1.1"):
        p = SimulationConfig(
            FERAUD_1, n_agents=64, activation=Activation.parse(spec)
        ).probabilities()
        assert p[0] == p.max()
    assert SimulationConfig(FERAUD_1).attacked_arm == 0
    assert SimulationConfig(Environment((0.2, 0.9, 0.9))).attacked_arm == 1  # lowest index on ties


# -- the attack, measured ----------------------------------------------------------------------
@pytest.mark.slow
def test_m_attackers_break_de_and_tolerance_m_restores_delta() -> None:
    """feraud-1, eps = 0.1: without tolerance 29 attackers remove the only eps-optimal arm in
    every trial; with tolerance 29 (threshold 58) the failure rate is back within delta."""
    assert not within_delta("de-m-attackers-f0")
    assert within_delta("de-m-attackers-f29")
    for r in results("de-m-attackers-f0"):
        assert r.best_arm != 0 and 0 in {e.arm for e in r.eliminations}
        # the attackers won: their votes do not contradict the outcome, they are not suspects
        assert not set(range(29)) & set(r.suspects)
    for r in results("de-m-attackers-f29"):
        assert r.best_arm == 0
        assert set(range(29)) <= set(r.suspects)  # every attacker is reported
        assert r.agent_arms is not None and (r.agent_arms[:29] == -1).all()


@pytest.mark.slow
def test_at_the_default_eps_removing_the_best_arm_is_not_a_failure() -> None:
    """eps = 0.25: arm 1 (0.5) is eps-optimal, so the same attack removes arm 0 and yet every
    trial is eps-correct: the eps = 0.1 rows are the ones that show the attack."""
    assert within_delta("de-m-attackers-eps0.25")
    assert all(0 in {e.arm for e in r.eliminations} for r in results("de-m-attackers-eps0.25"))


@pytest.mark.slow
def test_skewed_activation_attack_by_the_most_active_agents() -> None:
    assert not within_delta("de-skewed-f0")
    assert within_delta("de-skewed-f29")
    assert attackers_caught("de-skewed-f29") == 1.0


@pytest.mark.slow
@pytest.mark.parametrize(("algorithm", "f"), [("ce", 11), ("dp-mase", 5)])
def test_ce_and_dp_mase_with_m_attackers(algorithm: str, f: int) -> None:
    """CE (M = 11, eta_xi) and DP-MASE (M = 5, beta): the same contrast with A = M attackers."""
    assert not within_delta(f"{algorithm}-f0")
    assert within_delta(f"{algorithm}-f{f}")
    assert attackers_caught(f"{algorithm}-f{f}") == 1.0


@pytest.mark.slow
def test_fewer_than_m_attackers_on_a_harder_problem() -> None:
    """M = 5 (eta = 0.5), A = M // 2 = 2 and A = M - 1 = 4. Without tolerance the certificate is
    eta^(M - A) (0.125 and 0.5, both > delta). With tolerance f = A: within delta, and every
    attacker is a suspect. Without it, a SEED REGRESSION, not a guarantee: on these seeds no
    honest agent ever votes against the best arm, so the attackers never get the votes they are
    missing and no trial fails (0 of 100 at A = 2 and 4, and at A = 0); the theory promises only
    the certificates above. A change here means the random stream or the subroutine changed."""
    config = CASES["hard-a0-f0"][0]
    m = config.threshold
    assert m == 5
    eta = config.algorithm.eta
    assert within_delta("hard-a0-f0")
    for a in (2, 4):
        assert eta ** (m - a) > DELTA  # the certificate without tolerance is gone
        assert within_delta(f"hard-a{a}-f{a}")
        assert attackers_caught(f"hard-a{a}-f{a}") == 1.0
        record(f"hard-a{a}-f0")
        # the seed regression: the best arm's only voters are attackers, and nothing fails
        for r in results(f"hard-a{a}-f0"):
            assert r.agent_votes is not None
            assert not r.agent_votes[a:, 0].any()
        assert failure_rate(f"hard-a{a}-f0") == 0.0
    assert failure_rate("hard-a0-f0") == 0.0
