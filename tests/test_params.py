"""Thresholds, local confidences and parameter validation (ALGORITHMS.md, DE / CE / DP-MASE)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import numpy as np
import pytest

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import Environment, problem
from common.errors import ParameterError
from common.params import (
    check_agents_for_dropped_votes,
    check_agents_for_threshold,
    check_arms,
    check_epsilon,
    check_epsilon_for_rewards,
    check_open_unit,
    check_tolerance,
    corrupted_local_confidence,
    corrupted_threshold,
    max_vote_drop,
    tie_warning,
    vote_threshold,
)
from common.simulation import SimulationConfig
from common.subroutines import LocalParams, subroutine_class

FERAUD = problem("feraud-1").environment


# -- DE threshold ------------------------------------------------------------------------------
def test_de_threshold_is_the_ceiling_29_not_the_papers_28() -> None:
    assert vote_threshold(0.05, 0.9) == 29
    assert 0.9**28 > 0.05  # 28 votes would not reach the failure probability delta
    assert 0.9**29 <= 0.05
    assert AlgorithmConfig().threshold(10) == 29


@pytest.mark.parametrize(
    ("delta", "eta"), [(0.05, 0.9), (0.01, 0.5), (0.1, 0.8), (0.25, 0.5), (0.001, 0.99)]
)
def test_de_threshold_is_the_smallest_m_with_eta_power_m_below_delta(
    delta: float, eta: float
) -> None:
    m = vote_threshold(delta, eta)
    assert eta**m <= delta * (1 + 1e-12)
    assert eta ** (m - 1) > delta


def test_an_exact_power_is_not_rounded_up() -> None:
    # log(0.25)/log(0.5) = 2 exactly in theory, a hair above in floating point
    assert vote_threshold(0.25, 0.5) == 2
    assert vote_threshold(0.5**5, 0.5) == 5


# -- CE ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("xi", "eta_xi", "m"), [(0.05, 0.841, 18), (0.1, 0.742, 11)])
def test_ce_local_confidence_and_threshold(xi: float, eta_xi: float, m: int) -> None:
    got = corrupted_local_confidence(0.9, xi, 10)
    assert got == pytest.approx(eta_xi, abs=5e-4)
    assert got == pytest.approx(1 - 0.1 / (1 - xi) ** 9)
    assert corrupted_threshold(0.05, 0.9, xi, 10) == m
    assert AlgorithmConfig(algorithm="ce", xi=xi).threshold(10) == m
    # the apparent privacy stays eta: (1 - eta_xi)(1 - xi)^(K-1) = 1 - eta
    assert (1 - got) * (1 - xi) ** 9 == pytest.approx(0.1)


def test_ce_without_drops_is_de() -> None:
    assert corrupted_local_confidence(0.9, 0.0, 10) == 0.9


def test_ce_largest_vote_drop() -> None:
    assert max_vote_drop(0.9, 10) == pytest.approx(0.2257, abs=1e-4)
    assert max_vote_drop(0.9, 10) == pytest.approx(1 - 0.1 ** (1 / 9))


@pytest.mark.parametrize("xi", [0.2258, 0.25, 0.5, 0.99])
def test_ce_vote_drop_that_zeroes_eta_xi_is_rejected(xi: float) -> None:
    with pytest.raises(ParameterError) as info:
        corrupted_local_confidence(0.9, xi, 10)
    assert info.value.name == "xi"
    assert "0.2257" in str(info.value)  # the valid range is stated
    with pytest.raises(ParameterError) as info:
        SimulationConfig(FERAUD, AlgorithmConfig(algorithm="ce", xi=xi), n_agents=64)
    assert info.value.name == "xi"


def test_ce_vote_drop_at_the_limit_is_rejected_by_the_whole_configuration() -> None:
    # xi = 0.2257 (a hair below the limit) leaves eta_xi ~ 4e-4 < delta: no valid threshold
    for xi in (0.2257, max_vote_drop(0.9, 10)):
        with pytest.raises(ParameterError):
            SimulationConfig(FERAUD, AlgorithmConfig(algorithm="ce", xi=xi), n_agents=1000)


# -- DP-MASE -----------------------------------------------------------------------------------
def test_dp_mase_threshold_for_beta_half_is_5() -> None:
    assert vote_threshold(0.05, 0.5) == 5
    assert AlgorithmConfig(algorithm="dp-mase").threshold(10) == 5
    assert AlgorithmConfig(algorithm="dp-mase").local_confidence(10, 32) == 0.5


def test_local_confidences() -> None:
    assert AlgorithmConfig().local_confidence(10, 32) == 0.9
    assert AlgorithmConfig(algorithm="independent").local_confidence(10, 32) == 0.05 / 32
    assert AlgorithmConfig(algorithm="central").local_confidence(10, 32) == 0.05
    assert AlgorithmConfig(algorithm="independent").threshold(10) is None
    assert AlgorithmConfig(algorithm="central").threshold(10) is None


# -- every invalid parameter -------------------------------------------------------------------
GAUSSIAN = problem("rio-2").environment

INVALID: list[tuple[str, Callable[[], object], str, str]] = [
    # (case, call, parameter named, a fragment of the valid range in the message)
    ("eta=0", lambda: AlgorithmConfig(eta=0.0), "eta", "(0, 1)"),
    ("eta=1", lambda: AlgorithmConfig(eta=1.0), "eta", "(0, 1)"),
    ("eta=1.5", lambda: AlgorithmConfig(eta=1.5), "eta", "(0, 1)"),
    ("eta<0", lambda: AlgorithmConfig(eta=-0.1), "eta", "(0, 1)"),
    ("vote_threshold eta=1", lambda: vote_threshold(0.05, 1.0), "eta", "(0, 1)"),
    ("delta=0", lambda: AlgorithmConfig(delta=0.0), "delta", "(0, 1)"),
    ("delta=eta", lambda: AlgorithmConfig(delta=0.9, eta=0.9), "delta", "< eta"),
    ("delta>eta", lambda: AlgorithmConfig(delta=0.95, eta=0.9), "delta", "< eta"),
    ("vote_threshold delta>=eta", lambda: vote_threshold(0.9, 0.9), "delta", "< eta"),
    ("dp delta>=beta", lambda: AlgorithmConfig("dp-mase", delta=0.5), "delta", "< beta"),
    ("dp beta=1", lambda: AlgorithmConfig("dp-mase", beta=1.0), "beta", "(0, 1)"),
    ("dp eps<=0", lambda: AlgorithmConfig("dp-mase", dp_epsilon=0.0), "dp_epsilon", "> 0"),
    ("xi zeroes eta_xi", lambda: corrupted_threshold(0.05, 0.9, 0.3, 10), "xi", "< 1 - (1 - eta)"),
    ("xi=1", lambda: AlgorithmConfig("ce", xi=1.0), "xi", "(0, 1)"),
    ("ce xi=0", lambda: AlgorithmConfig("ce", xi=0.0), "xi", "(0, 1)"),
    ("xi outside ce", lambda: AlgorithmConfig("de", xi=0.1), "xi", "ce only"),
    ("epsilon=0", lambda: AlgorithmConfig(epsilon=0.0), "epsilon", "> 0"),
    ("one arm: environment", lambda: Environment((0.5,)), "arms", "at least 2"),
    ("one arm: check", lambda: check_arms(1), "arms", "at least 2"),
    ("one arm: config", lambda: AlgorithmConfig().validate_for(1, 64), "arms", "at least 2"),
    (
        "one arm: subroutine",
        lambda: subroutine_class("se")(1, LocalParams(), np.random.default_rng(0)),
        "arms",
        "at least 2",
    ),
    ("agents < M", lambda: SimulationConfig(FERAUD, n_agents=28), "agents", "M=29"),
    (
        "agents < M (ce)",
        lambda: SimulationConfig(FERAUD, AlgorithmConfig("ce", xi=0.1), n_agents=10),
        "agents",
        "M=11",
    ),
    ("agents=0", lambda: AlgorithmConfig("central").validate_for(10, 0), "agents", ">= 1"),
    ("unknown subroutine", lambda: AlgorithmConfig(subroutine="ucb"), "subroutine", "ser3"),
    ("unknown subroutine class", lambda: subroutine_class("ucb"), "subroutine", "ser3"),
    ("unknown algorithm", lambda: AlgorithmConfig(algorithm="gossip"), "algorithm", "dp-mase"),
    ("unknown activation", lambda: Activation("skewed"), "activation", "groups"),
    ("unknown activation text", lambda: Activation.parse("skewed:1"), "activation", "groups"),
    ("phi with ser3", lambda: AlgorithmConfig(phi=0.1), "phi", "ser4 only"),
    ("phi with se", lambda: AlgorithmConfig(subroutine="se", phi=0.1), "phi", "ser4 only"),
    ("ser4 without phi", lambda: AlgorithmConfig(subroutine="ser4"), "phi", "(0, 1)"),
    ("ser4 phi=1", lambda: AlgorithmConfig(subroutine="ser4", phi=1.0), "phi", "(0, 1)"),
    (
        "dp-mase gaussian",
        lambda: SimulationConfig(GAUSSIAN, AlgorithmConfig("dp-mase"), n_agents=32),
        "rewards",
        "[0, 1]",
    ),
    (
        "dp-se gaussian",
        lambda: subroutine_class("dp-se")(10, LocalParams(sigma=1.0), np.random.default_rng(0)),
        "rewards",
        "[0, 1]",
    ),
    ("dp-mase with me", lambda: AlgorithmConfig("dp-mase", subroutine="me"), "subroutine", "DP"),
    ("groups p=0", lambda: Activation.parse("groups:0:0.8"), "activation", "(0, 1)"),
    ("groups p=1.5", lambda: Activation.parse("groups:1.5:0.8"), "activation", "(0, 1)"),
    ("groups q=1", lambda: Activation.parse("groups:0.5:1"), "activation", "(0, 1)"),
    ("groups arity", lambda: Activation.parse("groups:0.5"), "activation", "2 parameter"),
    ("uniform arity", lambda: Activation.parse("uniform:1"), "activation", "0 parameter"),
    ("power alpha<0", lambda: Activation.parse("power:-1:0.8"), "activation", "ALPHA >= 0"),
    ("power gamma=0", lambda: Activation.parse("power:0:0"), "activation", "GAMMA > 0"),
    ("zipf s=0", lambda: Activation.parse("zipf:0"), "activation", "S > 0"),
    ("not a number", lambda: Activation.parse("groups:a:b"), "activation", "numbers"),
    ("bernoulli mean>1", lambda: Environment((0.5, 1.5)), "means", "[0, 1]"),
    ("gaussian sigma=0", lambda: Environment((1.0, 2.0), "gaussian", 0.0), "sigma", "> 0"),
    ("rewards kind", lambda: Environment((0.1, 0.2), "poisson"), "rewards", "gaussian"),
    ("stop rule", lambda: SimulationConfig(FERAUD, stop="never"), "stop", "global"),
    ("budget", lambda: SimulationConfig(FERAUD, budget=0), "budget", ">= 1"),
    ("local confidence", lambda: LocalParams(confidence=1.0), "confidence", "(0, 1)"),
]


@pytest.mark.parametrize(
    ("call", "name", "fragment"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_parameter_is_named_with_its_valid_range(
    call: Callable[[], object], name: str, fragment: str
) -> None:
    with pytest.raises(ParameterError) as info:
        call()
    err = info.value
    assert err.name == name
    message = str(err)
    assert message.startswith(f"{name}=")
    assert fragment in message, message


def test_parameter_error_is_a_value_error() -> None:
    assert issubclass(ParameterError, ValueError)


# -- activation distributions ------------------------------------------------------------------
SPECS = ["uniform", "groups:0.5:0.8", "groups:0.25:0.9", "power:0:0.8", "power:3:1.5", "zipf:1.1"]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n_agents", [1, 2, 7, 32, 33, 1024])
def test_activation_probabilities_are_a_distribution(spec: str, n_agents: int) -> None:
    p = Activation.parse(spec).probabilities(n_agents)
    assert p.shape == (n_agents,)
    assert np.all(p > 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_activation_spec_round_trip() -> None:
    for spec in SPECS:
        assert Activation.parse(spec).spec == spec


def test_uniform_activation() -> None:
    assert np.allclose(Activation().probabilities(40), 1 / 40)


@pytest.mark.parametrize("n_agents", [2, 32, 64, 33, 1000])
def test_groups_half_of_the_agents_make_80_percent(n_agents: int) -> None:
    p = Activation.parse("groups:0.5:0.8").probabilities(n_agents)
    first = round(0.5 * n_agents)
    assert p[:first].sum() == pytest.approx(0.8)
    # uniform within each group
    assert np.allclose(p[:first], p[0])
    assert np.allclose(p[first:], p[-1])
    if n_agents % 2 == 0:
        assert first == n_agents // 2


@pytest.mark.parametrize("spec", ["power:0:0.8", "power:2:1.2", "zipf:1.1"])
def test_power_law_is_strictly_decreasing(spec: str) -> None:
    p = Activation.parse(spec).probabilities(256)
    assert np.all(np.diff(p) < 0)


def test_power_law_formula() -> None:
    n = np.arange(1, 65, dtype=float)
    expected = (n + 1.5) ** -0.8
    assert np.allclose(Activation("power", (1.5, 0.8)).probabilities(64), expected / expected.sum())
    assert math.isclose(
        Activation("power", (0.0, 0.8)).probabilities(2)[0], 1 / (1 + 2**-0.8), rel_tol=1e-12
    )


def test_problem_two_is_skewed() -> None:
    p = problem("feraud-2").activation.probabilities(32)
    assert p[:16].sum() == pytest.approx(0.8)


# -- the validators at their boundaries ----------------------------------------------------------
def rejected(call: Callable[[], object]) -> ParameterError:
    with pytest.raises(ParameterError) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    ("call", "name", "value", "fragment"),
    [
        (lambda: check_open_unit("beta", 1.0), "beta", 1.0, "(0, 1)"),
        (lambda: check_epsilon(0.0), "epsilon", 0.0, "> 0"),
        (lambda: check_arms(1), "arms", 1, "at least 2"),
        (lambda: vote_threshold(0.0, 0.9), "delta", 0.0, "(0, 1)"),
        (lambda: vote_threshold(0.9, 0.5), "delta", 0.9, "< eta=0.5"),
        (lambda: corrupted_local_confidence(1.2, 0.1, 10), "eta", 1.2, "(0, 1)"),
        (lambda: corrupted_local_confidence(0.9, -0.1, 10), "xi", -0.1, "[0, 1)"),
        (lambda: corrupted_local_confidence(0.9, 1.0, 10), "xi", 1.0, "[0, 1)"),
        (lambda: corrupted_local_confidence(0.9, 1.5, 10), "xi", 1.5, "[0, 1)"),
        (lambda: corrupted_local_confidence(0.9, "0.1", 10), "xi", "0.1", "[0, 1)"),
        (lambda: corrupted_local_confidence(0.9, 0.3, 10), "xi", 0.3, "0.2257"),
        (lambda: corrupted_threshold(0.0, 0.9, 0.1, 10), "delta", 0.0, "(0, 1)"),
        (lambda: corrupted_threshold(0.8, 0.9, 0.1, 10), "delta", 0.8, "< eta_xi=0.7419"),
        (lambda: check_tolerance(-1), "tolerance", -1, ">= 0"),
        (lambda: check_tolerance(1.5), "tolerance", 1.5, ">= 0"),
        (lambda: check_tolerance(True), "tolerance", True, ">= 0"),
        (lambda: check_epsilon_for_rewards(1.5, None), "epsilon", 1.5, "(0, 1]"),
        (lambda: check_agents_for_threshold(28, 29), "agents", 28, "M=29"),
    ],
)
def test_a_rejected_value_is_named_with_the_value_and_its_valid_range(
    call: Callable[[], object], name: str, value: object, fragment: str
) -> None:
    err = rejected(call)
    assert (err.name, err.value) == (name, value)
    assert str(err).startswith(f"{name}={value!r} is invalid")
    assert fragment in err.valid, err.valid


def test_the_validators_accept_their_boundaries() -> None:
    assert check_epsilon_for_rewards(1.0, None) == 1.0  # (0, 1] is closed at 1
    assert check_epsilon_for_rewards(1.5, 0.5) == 1.5  # sub-Gaussian rewards: no upper limit
    assert [check_tolerance(f) for f in (0, 3)] == [0, 3]
    assert check_agents_for_threshold(29, 29) == 29  # N = M agents can remove an arm


@pytest.mark.parametrize("eta", [0.3, 0.7, 0.9, 0.99])
def test_ce_without_drops_is_de_exactly(eta: float) -> None:
    """xi = 0 gives eta itself, not 1 - (1 - eta): in floating point that is 0.30000000000000004
    for 0.3, and CE without drops would not be DE to the bit."""
    assert corrupted_local_confidence(eta, 0.0, 10) == eta
    assert corrupted_threshold(0.01, eta, 0.0, 10) == vote_threshold(0.01, eta)


def test_ce_vote_drop_exactly_at_the_limit_is_rejected() -> None:
    """K = 2 and xi = eta: eta_xi = 1 - (1 - eta) / (1 - xi) is 0 exactly."""
    err = rejected(lambda: corrupted_local_confidence(0.9, max_vote_drop(0.9, 2), 2))
    assert err.name == "xi"


def test_ce_threshold_needs_delta_strictly_below_eta_xi() -> None:
    eta_xi = corrupted_local_confidence(0.9, 0.1, 10)
    assert rejected(lambda: corrupted_threshold(eta_xi, 0.9, 0.1, 10)).name == "delta"
    assert corrupted_threshold(eta_xi * 0.9, 0.9, 0.1, 10) == 2


@pytest.mark.parametrize(("threshold", "xi"), [(5, 0.5), (3, 0.25), (11, 0.1), (29, 0.2)])
def test_ce_dropped_votes_need_agents_and_the_message_says_how_many(
    threshold: int, xi: float
) -> None:
    """N (1 - xi) >= M is required (equality included), and the message names the smallest N."""
    err = rejected(lambda: check_agents_for_dropped_votes(1, threshold, xi))
    assert (err.name, err.value) == ("agents", 1)
    found = re.search(r"at least (\d+) agents", err.valid)
    assert found, err.valid
    needed = int(found.group(1))
    assert (needed - 1) * (1 - xi) < threshold <= needed * (1 - xi)
    assert check_agents_for_dropped_votes(needed, threshold, xi) == needed
    assert rejected(lambda: check_agents_for_dropped_votes(needed - 1, threshold, xi)).value == (
        needed - 1
    )


def test_too_few_agents_for_m_plus_f_names_both() -> None:
    err = rejected(lambda: check_agents_for_threshold(10, 12, tolerance=1))
    assert (err.name, err.value) == ("agents", 10)
    assert "M + f = 11 + 1 = 12 (tolerance f=1)" in err.valid
    assert "M + f" not in rejected(lambda: check_agents_for_threshold(10, 12)).valid


@pytest.mark.parametrize("threshold", [2, 5, 29])
def test_tie_warning_from_fewer_than_2m_minus_1_agents(threshold: int) -> None:
    """With N >= 2M - 1 two arms cannot both stay short of M votes; below, they can."""
    assert tie_warning(2 * threshold - 1, threshold) is None
    assert tie_warning(10 * threshold, threshold) is None
    n_agents = 2 * threshold - 2
    warning = tie_warning(n_agents, threshold)
    assert warning is not None
    assert warning.startswith(f"{n_agents} agents < 2 x threshold - 1 = {2 * threshold - 1}:")


def test_the_tie_warning_says_what_to_do() -> None:
    """The demo's defaults (32 agents, M = 29): the warning names the way out, in numbers."""
    warning = tie_warning(32, 29)
    assert warning is not None
    assert "enroll at least 57 agents" in warning
    assert "a threshold of at most 16" in warning  # 2 x 16 - 1 = 31 <= 32
    assert tie_warning(32, 16) is None
