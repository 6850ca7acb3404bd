"""Properties of the Arm Selection subroutines that no other fast test pinned down.

Each test here kills mutants that scripts/mutation found surviving (docs/TESTING.md, "Mutation
testing"): a rule applied to the wrong arms, a sigma ignored, two rules firing in one check and one
of their eliminations lost. Rewards are constants, so every run is deterministic and short.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from common.errors import ParameterError
from common.subroutines import SUBROUTINES, LocalParams, catalog, subroutine_class
from common.subroutines.base import SUB_GAUSSIAN
from common.subroutines.radius import dp_epoch_length

MODES = [False, True]  # every_arm: one arm per activation (Feraud) / every arm (Rio)
SE_FAMILY = ["se", "ser3", "ser4", "kl-se", "stitched-se"]
EXPLORE_COMMIT = ["lucb", "ugapec", "kl-lucb", "stitched-lucb"]


def make(name: str, n_arms: int, every_arm: bool = False, **params: Any) -> Any:
    local = LocalParams(every_arm=every_arm, **params)
    return subroutine_class(name)(n_arms, local, np.random.default_rng(0))


def play(sub: Any, values: list[float], limit: int = 100_000) -> list[int]:
    """Activations with reward values[arm] until the subroutine is done; checks at each one that
    an arm leaves the local set only by being returned (so the agent votes against it), once."""
    initial = set(sub.active)
    returned: list[int] = []
    for _ in range(limit):
        if sub.done:
            return returned
        arms = sub.select()
        returned += sub.observe(arms, [values[a] for a in arms])
        assert len(set(returned)) == len(returned), returned
        assert set(returned) == initial - set(sub.active), (returned, sub.active)
    raise AssertionError(f"{sub.name} not done after {limit} activations")


def rejected(call: Callable[[], object]) -> ParameterError:
    with pytest.raises(ParameterError) as info:
        call()
    return info.value


# -- what a subroutine accepts -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("epsilon", 0.0, "> 0"),
        ("confidence", 0.0, "(0, 1)"),
        ("confidence", 1.0, "(0, 1)"),
        ("sigma", 0.0, "> 0"),
        ("phi", 1.0, "[0, 1)"),
        ("phi", -0.1, "[0, 1)"),
        ("dp_epsilon", 0.0, "> 0"),
    ],
)
def test_local_params_reject_a_value_outside_its_range(
    field: str, value: float, fragment: str
) -> None:
    """The agent service rebuilds LocalParams from stored state: it checks every field itself."""
    err = rejected(lambda: LocalParams(**{field: value}))
    assert (err.name, err.value) == (field, value)
    assert fragment in err.valid


@pytest.mark.parametrize(
    ("call", "name", "value", "fragment"),
    [
        (lambda: make("kl-se", 3, sigma=1.0), "rewards", "gaussian", "[0, 1]"),
        (lambda: make("kl-lucb", 3, sigma=1.0), "rewards", "gaussian", "[0, 1]"),
        (lambda: make("dp-se", 3, sigma=1.0), "rewards", "gaussian", "[0, 1]"),
        (lambda: make("se", 1), "arms", 1, "at least 2"),
        (lambda: make("se", 3).restart([]), "arms", [], "at least one arm"),
        (lambda: subroutine_class("ucb"), "subroutine", "ucb", "se, ser3, ser4"),
    ],
)
def test_a_subroutine_refuses_what_it_cannot_run_and_says_why(
    call: Callable[[], object], name: str, value: object, fragment: str
) -> None:
    err = rejected(call)
    assert (err.name, err.value) == (name, value)
    assert fragment in err.valid, err.valid


@pytest.mark.parametrize("name", sorted(SUBROUTINES))
def test_constructing_on_a_subset_runs_on_that_subset(name: str) -> None:
    sub = subroutine_class(name)(6, LocalParams(), np.random.default_rng(0), arms=[4, 1, 2])
    assert sub.active == [1, 2, 4]
    assert sub.initial_arms == 3  # the union bounds are over the local set
    assert set(play(sub, [0.0, 0.1, 0.9, 0.0, 0.2, 0.0]) + sub.active) == {1, 2, 4}


def test_catalog_lists_every_selectable_subroutine_as_its_class_describes_it() -> None:
    entries = {entry["name"]: entry for entry in catalog()}
    assert set(entries) == {name for name, cls in SUBROUTINES.items() if cls.selectable}
    assert "dp-se" not in entries  # DP-MASE's own
    for name, entry in entries.items():
        cls = SUBROUTINES[name]
        assert entry == {
            "name": name,
            "rewards": list(cls.rewards),
            "description": cls.summary,
            "reference": cls.reference,
        }
        assert entry["description"] and entry["reference"]


# -- sub-Gaussian rewards ------------------------------------------------------------------------
def width(sub: Any) -> float:
    """The confidence width the subroutine would use now (every arm played 5 times, mean 0.5)."""
    if hasattr(sub, "radius"):
        return float(sub.radius(5))
    if hasattr(sub, "samples"):
        return float(sub.samples)
    if hasattr(sub, "budget"):  # CDE's fixed-budget run: its pulls per arm
        return float(sub.budget)
    sub.counts[:] = 5
    sub.sums[:] = 2.5
    low, high = sub.interval(0, 5 * sub.n_arms)
    return (high - low) / 2


@pytest.mark.parametrize(
    "name", [n for n, c in sorted(SUBROUTINES.items()) if SUB_GAUSSIAN in c.rewards]
)
@pytest.mark.parametrize("sigma", [0.25, 1.5])
def test_every_width_scales_with_sigma_as_a_sub_gaussian_one(name: str, sigma: float) -> None:
    """Rewards in [0, 1] are 1/2-sub-Gaussian: a sigma-sub-Gaussian reward needs widths 2 sigma
    times theirs (Median Elimination and CDE's fixed budget: (2 sigma)^2 times their samples, up
    to the ceiling)."""
    bounded = width(make(name, 4, epsilon=1.0))
    scaled = width(make(name, 4, epsilon=1.0, sigma=sigma))
    if name in ("me", "fixed-budget"):
        assert abs(scaled - (2 * sigma) ** 2 * bounded) <= (2 * sigma) ** 2 + 1
    else:
        assert scaled == pytest.approx(2 * sigma * bounded, rel=1e-12)


@pytest.mark.parametrize("sigma", [0.25, 1.5])
def test_median_elimination_keeps_sigma_in_later_rounds(sigma: float) -> None:
    runs = {}
    for s in (None, sigma):
        sub = make("me", 2, every_arm=True, epsilon=1.0, sigma=s)
        assert play(sub, [0.9, 0.1]) == [1]  # one round
        runs[s] = sub.samples  # the next round's size, computed at the end of this one
    assert abs(runs[sigma] - (2 * sigma) ** 2 * runs[None]) <= (2 * sigma) ** 2 + 1


# -- the rules ---------------------------------------------------------------------------------
@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("name", SE_FAMILY)
def test_a_check_returns_both_its_gap_eliminations_and_its_eps_stop(
    name: str, every_arm: bool
) -> None:
    """Means (1, 0, 1): arm 1 leaves by the gap rule in the very check where the eps-stop keeps
    arm 0 and removes arm 2 (eps is chosen so both rules first fire at the same round)."""
    epsilon = 0.5 if name == "kl-se" else 1.0
    sub = make(name, 3, every_arm=every_arm, epsilon=epsilon)
    rounds = []
    while not sub.done:
        arms = sub.select()
        out = sub.observe(arms, [[1.0, 0.0, 1.0][a] for a in arms])
        if out:
            rounds.append(out)
    assert rounds == [[1, 2]]
    assert sub.active == [0]


@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("name", sorted(SUBROUTINES))
def test_every_arm_that_leaves_is_returned(name: str, every_arm: bool) -> None:
    """Down to one arm by elimination alone (KL-SE's rule with K = 2), by a stop, or by halves."""
    epsilon = 1.0 if name in ("me", "dp-se") else 0.01
    for values in ([1.0, 0.0], [0.1, 0.2, 0.8, 0.9]):
        sub = make(name, len(values), every_arm=every_arm, epsilon=epsilon, dp_epsilon=0.5)
        returned = play(sub, values)
        assert sorted(returned + sub.active) == list(range(len(values)))
        assert sub.active == [values.index(max(values))]  # the best arm stays


@pytest.mark.parametrize("name", ["se", "ser3", "kl-se", "stitched-se"])
def test_equal_empirical_means_keep_the_lowest_index(name: str) -> None:
    """The compiled engine (common/simulation/fast.py) keeps the same arm: ties are common with
    Bernoulli rewards, and the two engines must agree."""
    sub = make(name, 3, epsilon=1.0)
    play(sub, [0.2, 0.5, 0.5])
    assert sub.active == [1]


def test_median_elimination_keeps_the_best_half_whatever_their_indices() -> None:
    sub = make("me", 4, every_arm=True, epsilon=1.0)
    first_round = []
    while not first_round:
        arms = sub.select()
        first_round = sub.observe(arms, [[0.1, 0.2, 0.8, 0.9][a] for a in arms])
    assert first_round == [0, 1]


@pytest.mark.parametrize("name", EXPLORE_COMMIT)
def test_explore_commit_plays_what_its_rule_asks_at_once_in_the_every_arm_model(
    name: str,
) -> None:
    sub = make(name, 3, every_arm=True, epsilon=0.01)
    assert sub.select() == [0, 1, 2]  # every arm's first sample, in one activation
    for _ in range(20):
        arms = sub.select()
        assert sub.observe(arms, [[0.5, 0.45, 0.1][a] for a in arms]) == []
        assert sub.select() == sub.queue and len(sub.queue) == 2  # both arms of the decision


@pytest.mark.parametrize("name", EXPLORE_COMMIT)
def test_explore_commit_drops_a_discarded_arm_from_its_queue(name: str) -> None:
    values = [0.5, 0.45, 0.1]
    sub = make(name, 3, epsilon=0.01)
    while not sub.queue or len(sub.queue) < (1 if name == "ugapec" else 2):
        arms = sub.select()
        sub.observe(arms, [values[a] for a in arms])
    queued = sub.queue[-1]
    assert sub.discard([queued]) == []  # two arms remain: no stop yet
    assert queued not in sub.active
    assert sub.queue and set(sub.queue) <= set(sub.active)  # a new decision if the queue emptied
    for _ in range(50):
        arms = sub.select()
        assert set(arms) <= set(sub.active)
        sub.observe(arms, [values[a] for a in arms])


@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("name", sorted(SUBROUTINES))
def test_a_discard_right_after_the_first_activation(name: str, every_arm: bool) -> None:
    """A global elimination can arrive right after a restart, before every arm has a sample (one
    arm per activation): the run goes on over the arms left."""
    values = [0.9, 0.5, 0.4, 0.1]
    sub = make(name, 4, every_arm=every_arm, epsilon=1.0 if name in ("me", "dp-se") else 0.05)
    arms = sub.select()
    sub.observe(arms, [values[a] for a in arms])
    assert sub.discard([2]) == []
    assert 2 not in sub.select()
    play(sub, values)
    assert sub.active == [0]


def test_dp_se_decides_first_after_r1_rounds() -> None:
    """Epoch e lasts R(e) rounds, from e = 1 (Sajed and Sheffet's schedule)."""
    beta, dp_epsilon = 0.9, 0.5
    first = dp_epoch_length(1, 2, beta, dp_epsilon)
    sub = make("dp-se", 2, every_arm=True, confidence=beta, dp_epsilon=dp_epsilon)
    for _ in range(first - 1):
        assert sub.observe([0, 1], [0.9, 0.1]) == []
    # a gap of 0.8 against 2 (h + c) = 0.15 and Laplace noise of scale 1 / (eps R) = 0.005
    assert sub.observe([0, 1], [0.9, 0.1]) == [1]
