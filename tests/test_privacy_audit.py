"""The privacy audit: certified bound vs the measured hit rate of a vote-reading adversary.

The table is printed (see it with `pytest -s` or `pytest -rA`). Only real properties are asserted:
rates are probabilities, DE's measured rate is well above its certified 1 - eta (the documented
gap between what can be certified and how often a guess hits), CE's is below DE's on the same seeds.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from common.algorithms import AlgorithmConfig
from common.environments import Environment, problem
from common.errors import ParameterError
from common.privacy import (
    AuditRow,
    audit,
    certified_bound,
    format_audit,
    hit_probabilities,
    method_label,
)
from common.simulation import SimulationConfig, TrialResult, run_trials

FERAUD_1 = problem("feraud-1").environment
OPTIMAL = np.array([True, True] + [False] * 8)  # feraud-1, eps = 0.25: arms 0 (0.7) and 1 (0.5)


# -- the pure parts ----------------------------------------------------------------------------
def test_hit_probability_of_the_guess_among_arms_never_voted_against() -> None:
    votes = np.zeros((5, 10), dtype=bool)
    votes[1, 2:] = True  # left {0, 1}: both eps-optimal
    votes[2, [0, *range(2, 10)]] = True  # left {1}
    votes[3, :2] = True  # voted against both eps-optimal arms
    votes[4, :] = True  # voted against every arm: the guess is uniform over all
    assert hit_probabilities(votes, OPTIMAL) == pytest.approx([0.2, 1.0, 1.0, 0.0, 0.2])


def test_hit_probability_checks_shapes() -> None:
    with pytest.raises(ParameterError) as info:
        hit_probabilities(np.zeros((3, 4), dtype=bool), OPTIMAL)
    assert info.value.name == "agent_votes"


def test_certified_bounds() -> None:
    assert certified_bound(AlgorithmConfig(), 10) == pytest.approx(0.1)
    for xi in (0.05, 0.1, 0.2):
        # CE keeps the apparent privacy: (1 - eta_xi)(1 - xi)^(K-1) = 1 - eta
        assert certified_bound(AlgorithmConfig("ce", xi=xi), 10) == pytest.approx(0.1)
    assert certified_bound(AlgorithmConfig("dp-mase", beta=0.5), 10) == pytest.approx(0.5)
    assert certified_bound(AlgorithmConfig("dp-mase", beta=0.3), 10) == pytest.approx(0.7)
    assert certified_bound(AlgorithmConfig("independent"), 10) == 0.0
    with pytest.raises(ParameterError) as info:
        certified_bound(AlgorithmConfig("central"), 10)
    assert info.value.name == "algorithm"


def test_method_labels() -> None:
    assert method_label(AlgorithmConfig()) == "DE (ser3)"
    assert method_label(AlgorithmConfig("ce", xi=0.1)) == "CE xi=0.1 (ser3)"
    assert "eps_dp=0.25" in method_label(AlgorithmConfig("dp-mase", dp_epsilon=0.25))


def synthetic(votes: np.ndarray, t: int = 100) -> TrialResult:
    return TrialResult(
        sample_complexity=t,
        messages=int(votes.sum()),
        best_arm=0,
        correct=True,
        stopped_by="all-agents",
        agent_votes=votes,
        agent_arms=np.zeros(votes.shape[0], dtype=np.int64),
    )


def test_audit_averages_the_exact_hit_probability_over_agents_and_trials() -> None:
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(), n_agents=29)
    first = np.zeros((29, 10), dtype=bool)
    first[0, 1:] = True  # agent 0 left only arm 0: hit 1
    second = np.zeros((29, 10), dtype=bool)
    second[:, 1] = True  # everyone voted against arm 1: left 0, 2..9 -> 1/9
    row = audit(config, [synthetic(first), synthetic(second)])
    expected = (1.0 + 28 * 0.2 + 29 / 9) / 58
    assert isinstance(row, AuditRow)
    assert row.measured_hit_rate == pytest.approx(expected)
    assert row.n_agents_observed == 58
    assert row.voters == 30
    assert row.hit_rate_voters == pytest.approx((1.0 + 29 / 9) / 30)
    assert row.uniform_guess == pytest.approx(0.2)
    assert row.certified_bound == pytest.approx(0.1)
    assert row.trials == 2
    assert row.dp_epsilon is None
    assert row.method == "DE (ser3)"


def test_audit_uses_the_means_at_the_stop() -> None:
    env = Environment((0.7, 0.5, 0.3), drift=(0.0, -1e-3, 0.0))  # arm 1 at 0.2 after t = 300
    config = SimulationConfig(env, AlgorithmConfig(delta=0.5, eta=0.9), n_agents=7)
    votes = np.zeros((7, 3), dtype=bool)
    votes[:, 2] = True  # left {0, 1}
    assert audit(config, [synthetic(votes, t=0)]).measured_hit_rate == pytest.approx(1.0)
    assert audit(config, [synthetic(votes, t=300)]).measured_hit_rate == pytest.approx(0.5)


def test_audit_rejects_what_it_cannot_audit() -> None:
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(), n_agents=29)
    with pytest.raises(ParameterError):
        audit(config, [])
    no_votes = synthetic(np.zeros((29, 10), dtype=bool))
    no_votes.agent_votes = None
    with pytest.raises(ParameterError):
        audit(config, [no_votes])
    with pytest.raises(ParameterError):
        audit(config, [synthetic(np.zeros((30, 10), dtype=bool))])


def test_format_audit_has_one_line_per_row() -> None:
    row = AuditRow("DE (ser3)", 0.1, 0.4142, 1280, 0.2, None, 0.5, 1000, 20)
    dp = AuditRow("DP-MASE eps_dp=0.25 beta=0.5", 0.5, 0.26, 1280, 0.2, 0.25, None, 0, 20)
    text = format_audit([row, dp])
    lines = text.splitlines()
    assert len(lines) == 4
    assert "certified" in lines[0]
    assert "measured hit" in lines[0]
    assert "0.414" in lines[2]
    assert "0.25" in lines[3]


# -- the audit of the four private methods on Problem 1 ----------------------------------------
ENGINE = "fast"
TRIALS = 20
N_AGENTS = 64
SEED = 7

METHODS = {
    "de": (AlgorithmConfig(), "all-agents"),
    "ce-0.05": (AlgorithmConfig("ce", xi=0.05), "all-agents"),
    "ce-0.1": (AlgorithmConfig("ce", xi=0.1), "all-agents"),
    # Rio et al.'s model for DP-MASE: every arm per activation, global stop with retirement
    "dp-mase": (AlgorithmConfig("dp-mase", every_arm=True, dp_epsilon=0.25), "global"),
}


@functools.lru_cache(maxsize=1)
def audit_rows() -> dict[str, AuditRow]:
    rows = {}
    for key, (algo, stop) in METHODS.items():
        config = SimulationConfig(FERAUD_1, algo, n_agents=N_AGENTS, stop=stop)
        rows[key] = audit(config, run_trials(config, TRIALS, seed=SEED, engine=ENGINE))
    return rows


def test_audit_table() -> None:
    rows = audit_rows()
    print(
        f"\nPrivacy audit, feraud-1, N={N_AGENTS}, {TRIALS} trials per method, engine={ENGINE}, "
        f"seed={SEED}\n"
        "adversary: sees one agent's sent votes, guesses uniformly among arms it never voted "
        "against\n" + format_audit(list(rows.values()))
    )
    assert set(rows) == set(METHODS)


def test_audit_rates_are_probabilities() -> None:
    for row in audit_rows().values():
        assert 0.0 <= row.measured_hit_rate <= 1.0
        assert row.hit_rate_voters is None or 0.0 <= row.hit_rate_voters <= 1.0
        assert 0.0 <= row.certified_bound <= 1.0
        assert row.uniform_guess == pytest.approx(0.2)
        assert row.n_agents_observed == N_AGENTS * TRIALS


def test_de_measured_hit_rate_is_above_its_certified_bound() -> None:
    """The documented gap: DE certifies 1 - eta = 0.1, a guessing adversary hits far more often."""
    row = audit_rows()["de"]
    assert row.certified_bound == pytest.approx(0.1)
    assert row.measured_hit_rate > row.certified_bound
    assert row.measured_hit_rate > row.uniform_guess  # DE's votes do leak information


def test_ce_hides_more_than_de_on_the_same_seeds() -> None:
    rows = audit_rows()
    for key in ("ce-0.05", "ce-0.1"):
        assert rows[key].certified_bound == pytest.approx(rows["de"].certified_bound)
        assert rows[key].measured_hit_rate < rows["de"].measured_hit_rate


def test_dp_mase_states_its_differential_privacy() -> None:
    row = audit_rows()["dp-mase"]
    assert row.dp_epsilon == 0.25
    assert row.certified_bound == pytest.approx(0.5)
