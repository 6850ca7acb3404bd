"""Arm Selection subroutines and the local agent: formulas, stopping, persistence, votes."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from common.agent import AgentSpec, LocalAgent
from common.algorithms import AlgorithmConfig
from common.environments import Environment, problem
from common.errors import ParameterError
from common.simulation import SimulationConfig, run_trials
from common.subroutines import (
    SUBROUTINES,
    ArmSelection,
    DPSuccessiveElimination,
    LocalParams,
    MedianElimination,
    restore,
    subroutine_class,
)
from common.subroutines.bounds import elimination_level, kl_interval, stitched_radius
from common.subroutines.radius import (
    dp_elimination_gap,
    dp_epoch_length,
    elimination_radius,
    lucb_radius,
    median_elimination_samples,
)
from tests.stats import ALPHA, max_failures, power, two_arm_failure_bound

NAMES = sorted(SUBROUTINES)  # se, ser3, ser4, kl-se, stitched-se, me, lucb, dp-se
SE_FAMILY = ("se", "ser3", "ser4", "kl-se", "stitched-se")
MODES = [False, True]  # every_arm: one arm per activation (Feraud) / every arm (Rio)
EASY = Environment((0.9, 0.5, 0.4, 0.1))


def make(
    name: str,
    *,
    n_arms: int = 4,
    every_arm: bool = False,
    epsilon: float = 0.5,
    confidence: float = 0.9,
    phi: float | None = None,
    dp_epsilon: float = 0.5,
    seed: int = 0,
) -> ArmSelection:
    if phi is None:
        phi = 0.05 if name == "ser4" else 0.0
    params = LocalParams(
        epsilon=epsilon,
        confidence=confidence,
        every_arm=every_arm,
        phi=phi,
        dp_epsilon=dp_epsilon,
    )
    return subroutine_class(name)(n_arms, params, np.random.default_rng(seed))


def copy_rng(rng: np.random.Generator) -> np.random.Generator:
    twin = np.random.default_rng()
    twin.bit_generator.state = rng.bit_generator.state
    return twin


def step(
    sub: ArmSelection, env: Environment, rng: np.random.Generator
) -> tuple[list[int], list[int]]:
    """One activation: the arms played and the arms eliminated."""
    if isinstance(getattr(sub, "wants_reset", None), type(sub.select)):
        sub.wants_reset()  # type: ignore[attr-defined]  # SER4 draws its coin every activation
    arms = sub.select()
    out = sub.observe(arms, env.draw(arms, 0, rng)) if arms else []
    return arms, out


def constant(sub: ArmSelection, values: list[float]) -> tuple[list[int], list[int]]:
    """One activation with deterministic rewards values[arm]."""
    arms = sub.select()
    return arms, sub.observe(arms, [values[a] for a in arms])


# -- persistence -------------------------------------------------------------------------------
@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("prefix", [0, 9, 150])
def test_state_round_trip_continues_identically(name: str, every_arm: bool, prefix: int) -> None:
    env = Environment((0.7, 0.5, 0.45, 0.3))
    sub = make(name, every_arm=every_arm, epsilon=1.0 if name == "me" else 0.5)
    rewards = np.random.default_rng(99)
    for _ in range(prefix):
        step(sub, env, rewards)
    state = json.loads(json.dumps(sub.to_state()))  # JSON-able, and survives JSON
    twin = restore(state, copy_rng(sub.rng))
    twin_rewards = copy_rng(rewards)
    assert type(twin) is type(sub)
    assert twin.to_state() == sub.to_state()
    for i in range(4000):
        a, out_a = step(sub, env, rewards)
        b, out_b = step(twin, env, twin_rewards)
        assert (a, out_a) == (b, out_b), f"diverged {i} activations after the restore"
        if i % 50 == 0:
            assert twin.to_state() == sub.to_state()
        if sub.done:
            break
    assert twin.to_state() == sub.to_state()
    assert twin.rng.bit_generator.state == sub.rng.bit_generator.state


def test_state_is_plain_json() -> None:
    sub = make("dp-se", every_arm=True)
    for _ in range(10):
        step(sub, EASY, np.random.default_rng(1))
    state = sub.to_state()
    assert json.loads(json.dumps(state)) == state
    assert state["name"] == "dp-se"
    assert "rng" not in state


# -- the activation cycle ----------------------------------------------------------------------
@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("name", NAMES)
def test_selects_only_active_arms_and_is_done_with_one(name: str, every_arm: bool) -> None:
    sub = make(name, every_arm=every_arm, epsilon=1.0 if name == "me" else 0.5)
    rewards = np.random.default_rng(5)
    eliminated: list[int] = []
    for _ in range(50_000):
        before = list(sub.active)
        assert before == sorted(before)
        arms = sub.select()
        if sub.done:
            break
        assert arms, "a subroutine that is not done plays something"
        assert set(arms) <= set(before)
        assert len(set(arms)) == len(arms)
        if not every_arm:
            assert len(arms) == 1
        elif name in (*SE_FAMILY, "dp-se"):
            assert arms == before  # every arm of the local set, once
        out = sub.observe(arms, EASY.draw(arms, 0, rewards))
        assert set(out) <= set(before)
        assert not set(out) & set(sub.active)
        assert sorted(set(before) - set(out)) == sub.active
        eliminated += out
    assert sub.done
    assert len(sub.active) == 1
    assert sub.select() == []
    assert sorted([*eliminated, *sub.active]) == [0, 1, 2, 3]
    assert len(set(eliminated)) == 3  # each arm is eliminated once


@pytest.mark.parametrize("name", NAMES)
def test_restart_forgets_and_uses_the_new_set(name: str) -> None:
    sub = make(name, every_arm=True)
    for _ in range(20):
        step(sub, EASY, np.random.default_rng(2))
    sub.restart([3, 1])
    assert sub.active == [1, 3]
    assert sub.initial_arms == 2
    assert not sub.counts.any()
    assert not sub.sums.any()
    assert set(sub.select()) <= {1, 3}


# -- Successive Elimination --------------------------------------------------------------------
def hoeffding(r: int, k: int, conf: float) -> float:
    return math.sqrt(math.log(4 * k * r * r / conf) / (2 * r))


def test_se_radius_formula() -> None:
    assert elimination_radius(1, 10, 0.9, None) == pytest.approx(1.3773597877)
    assert elimination_radius(100, 10, 0.9, None) == pytest.approx(0.2549958857)
    for r, k, conf in [(1, 2, 0.5), (7, 10, 0.9), (1000, 3, 0.05), (12345, 100, 1e-4)]:
        assert elimination_radius(r, k, conf, None) == pytest.approx(hoeffding(r, k, conf))
        # sub-Gaussian: sigma sqrt(2 log(4 K r^2 / conf) / r)
        expected = 2.0 * math.sqrt(2 * math.log(4 * k * r * r / conf) / r)
        assert elimination_radius(r, k, conf, 2.0) == pytest.approx(expected)
    assert elimination_radius(5, 5, 0.05, 2.0) == pytest.approx(3.8388207298)


def test_se_radius_uses_the_size_of_the_set_at_the_restart() -> None:
    sub = make("se", n_arms=10, confidence=0.9)
    assert sub.radius(3) == pytest.approx(hoeffding(3, 10, 0.9))
    sub.restart([2, 5, 7])
    assert sub.radius(3) == pytest.approx(hoeffding(3, 3, 0.9))


def first_round_below(k: int, conf: float, bound: float) -> int:
    r = 1
    while hoeffding(r, k, conf) > bound:
        r += 1
    return r


@pytest.mark.parametrize("name", ["se", "ser3", "ser4"])
@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize(("k", "eps", "conf"), [(2, 0.5, 0.9), (5, 0.25, 0.9), (10, 0.3, 0.05)])
def test_se_eps_stop_fires_exactly_at_the_first_round_with_radius_below_half_eps(
    name: str, every_arm: bool, k: int, eps: float, conf: float
) -> None:
    stop = first_round_below(k, conf, eps / 2)
    assert hoeffding(stop, k, conf) <= eps / 2 < hoeffding(stop - 1, k, conf)
    sub = make(name, n_arms=k, every_arm=every_arm, epsilon=eps, confidence=conf)
    values = [0.5] * k  # equal means: no arm is ever eliminated by the gap rule
    values[k // 2] = 0.5 + 1e-9  # the empirical best that the eps-stop keeps
    pulls_per_round = 1 if every_arm else k
    for _ in range((stop - 1) * pulls_per_round):
        _, out = constant(sub, values)
        assert out == []
    for _ in range(pulls_per_round - 1):
        assert constant(sub, values)[1] == []
    _, out = constant(sub, values)
    assert out == [a for a in range(k) if a != k // 2]
    assert sub.active == [k // 2]
    assert int(sub.counts[k // 2]) == stop


@pytest.mark.parametrize("every_arm", MODES)
def test_se_gap_elimination_fires_at_the_first_round_with_gap_at_least_two_radii(
    every_arm: bool,
) -> None:
    gap, k, conf = 0.6, 3, 0.9
    expected = first_round_below(k, conf, gap / 2)
    sub = make("se", n_arms=k, every_arm=every_arm, epsilon=0.01, confidence=conf)
    values = [1.0, 1.0 - gap, 1.0]
    rounds_seen = 0
    while True:
        _, out = constant(sub, values)
        if len(set(sub.counts[sub.active].tolist())) == 1:
            rounds_seen = int(sub.counts[0])
        if out:
            break
    assert out == [1]
    assert rounds_seen == expected
    assert sub.active == [0, 2]


@pytest.mark.parametrize("name", ["se", "ser3"])
def test_round_robin_order(name: str) -> None:
    k = 10
    sub = make(name, n_arms=k, epsilon=0.01, seed=3)
    orders = []
    for _ in range(60):
        order = sub.order.copy()
        orders.append(order)
        assert sorted(order.tolist()) == list(range(k))  # a permutation of the arms
        played = [constant(sub, [0.5] * k)[0][0] for _ in range(k)]
        assert played == sorted(range(k), key=lambda a: order[a])  # played in the round's order
    if name == "se":
        assert all((o == np.arange(k)).all() for o in orders)
    else:
        assert all((a != b).any() for a, b in itertools.pairwise(orders))


def test_ser3_first_arm_of_a_round_is_uniform() -> None:
    k, rounds = 4, 4000
    sub = make("ser3", n_arms=k, epsilon=1e-3, seed=11)
    first = np.zeros(k, dtype=int)
    for _ in range(rounds):
        first[int(np.argmin(sub.order))] += 1
        for _ in range(k):
            constant(sub, [0.5] * k)
    assert stats.chisquare(first).pvalue > 1e-3


@pytest.mark.parametrize("phi", [0.02, 0.2])
def test_ser4_reset_coin_has_probability_phi(phi: float) -> None:
    sub = make("ser4", phi=phi, seed=8)
    n = 20_000
    hits = sum(sub.wants_reset() for _ in range(n))  # type: ignore[attr-defined]
    assert stats.binomtest(hits, n, phi).pvalue > 1e-3
    agent = LocalAgent(AgentSpec(4, "ser4", sub.params), np.random.default_rng(9))
    hits = sum(agent.wants_reset() for _ in range(n))
    assert stats.binomtest(hits, n, phi).pvalue > 1e-3


@pytest.mark.parametrize("name", ["se", "ser3", "me", "lucb", "dp-se"])
def test_only_ser4_wants_resets_and_the_others_draw_nothing(name: str) -> None:
    rng = np.random.default_rng(4)
    agent = LocalAgent(AgentSpec(4, name, LocalParams()), rng)
    before = rng.bit_generator.state
    assert not any(agent.wants_reset() for _ in range(1000))
    assert rng.bit_generator.state == before


# -- DP successive elimination -----------------------------------------------------------------
def epoch_length(e: int, k: int, beta: float, dp: float) -> int:
    eps_e = 2.0**-e
    return math.ceil(
        max(
            32 * math.log(8 * k * e * e / beta) / eps_e**2,
            8 * math.log(4 * k * e * e / beta) / (dp * eps_e),
        )
    )


def test_dp_epoch_length_formula() -> None:
    assert dp_epoch_length(1, 10, 0.5, 0.1) == 702  # privacy term: 8 log(80) / (0.1 * 0.5)
    assert dp_epoch_length(2, 10, 0.5, 0.1) == 3309  # accuracy term: 32 log(640) / 0.25^2
    assert dp_epoch_length(3, 10, 0.5, 1.0) == 14894
    for e, k, beta, dp in [
        (1, 2, 0.5, 0.05),
        (2, 10, 0.1, 0.25),
        (5, 3, 0.5, 1.0),
        (4, 7, 0.3, 0.01),
    ]:
        assert dp_epoch_length(e, k, beta, dp) == epoch_length(e, k, beta, dp)


def test_dp_elimination_gap_formula() -> None:
    for e, r, k, beta, dp in [(1, 702, 10, 0.5, 0.1), (3, 14894, 4, 0.2, 1.0)]:
        h = math.sqrt(math.log(8 * k * e * e / beta) / (2 * r))
        c = math.log(4 * k * e * e / beta) / (dp * r)
        assert dp_elimination_gap(e, r, k, beta, dp) == pytest.approx(2 * (h + c))


class RecordingRng:
    """Delegates to a Generator and records every Laplace draw."""

    def __init__(self, rng: np.random.Generator) -> None:
        self._rng = rng
        self.laplace_calls: list[tuple[float, float, Any, np.ndarray]] = []

    def laplace(self, loc: float, scale: float, size: Any = None) -> np.ndarray:
        draw = self._rng.laplace(loc, scale, size)
        self.laplace_calls.append((loc, scale, size, np.array(draw)))
        return draw

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rng, name)


@pytest.mark.parametrize("every_arm", MODES)
def test_dp_se_epochs_noise_and_elimination(every_arm: bool) -> None:
    k, beta, dp = 4, 0.5, 0.5
    env = Environment((0.8, 0.75, 0.5, 0.2))
    sub = make("dp-se", n_arms=k, every_arm=every_arm, confidence=beta, dp_epsilon=dp, seed=1)
    assert isinstance(sub, DPSuccessiveElimination)
    recorder = RecordingRng(sub.rng)
    sub.rng = recorder  # type: ignore[assignment]
    rewards = np.random.default_rng(2)
    epochs_checked = 0
    while not sub.done and epochs_checked < 3:
        e, active = sub.epoch, list(sub.active)
        rounds = epoch_length(e, len(active), beta, dp)
        assert sub.epoch_rounds == rounds
        assert sub.noise_scale() == pytest.approx(1.0 / (dp * rounds))
        sums = np.zeros(k)
        for _ in range(rounds * (1 if every_arm else len(active))):
            arms = sub.select()
            draw = env.draw(arms, 0, rewards)
            sums[arms] += draw
            out = sub.observe(arms, draw)
            if sub.epoch == e:
                assert out == []
        assert sub.epoch == e + 1  # the epoch ended after exactly R(e) samples of each arm
        loc, scale, size, noise = recorder.laplace_calls[-1]
        assert loc == 0.0
        assert scale == pytest.approx(1.0 / (dp * rounds))
        assert size == len(active)
        noisy = sums[active] / rounds + noise
        gap = dp_elimination_gap(e, rounds, len(active), beta, dp)
        assert out == [a for a, mu in zip(active, noisy, strict=True) if noisy.max() - mu > gap]
        assert not sub.counts.any()  # each reward is used once
        epochs_checked += 1
    assert epochs_checked >= 1
    assert len(recorder.laplace_calls) == epochs_checked


# -- Median Elimination ------------------------------------------------------------------------
def test_me_sample_size_formula() -> None:
    for eps, delta in [(0.0625, 0.45), (0.25, 0.05), (0.01, 0.001)]:
        n = math.ceil(4 / eps**2 * math.log(3 / delta))
        assert median_elimination_samples(eps, delta, None) == n
        assert median_elimination_samples(eps, delta, 2.0) == math.ceil(
            16 * 4 / eps**2 * math.log(3 / delta)
        )
    assert median_elimination_samples(0.0625, 0.45, None) == 1943


@pytest.mark.parametrize("every_arm", MODES)
def test_me_rounds_sample_sizes_and_halving(every_arm: bool) -> None:
    k, eps, conf = 10, 1.0, 0.9
    env = Environment(tuple(np.linspace(0.9, 0.1, k)))
    sub = make("me", n_arms=k, every_arm=every_arm, epsilon=eps, confidence=conf, seed=4)
    assert isinstance(sub, MedianElimination)
    rewards = np.random.default_rng(6)
    round_eps, round_delta = eps / 4, conf / 2
    sizes = []
    while not sub.done:
        n = median_elimination_samples(round_eps, round_delta, None)
        assert sub.samples == n
        assert sub.round_epsilon == pytest.approx(round_eps)
        assert sub.round_delta == pytest.approx(round_delta)
        active = list(sub.active)
        pulls = np.zeros(k, dtype=int)
        sums = np.zeros(k)
        out: list[int] = []
        while not out:
            arms = sub.select()
            assert set(arms) <= set(active)
            draw = env.draw(arms, 0, rewards)
            pulls[arms] += 1
            sums[arms] += draw
            out = sub.observe(arms, draw)
        assert all(pulls[a] == n for a in active)  # every arm exactly n_l times this round
        assert len(out) == len(active) // 2  # the lower half leaves
        mu = sums[active] / n
        ranked = [active[i] for i in sorted(range(len(active)), key=lambda i: (-mu[i], active[i]))]
        assert sorted(out) == sorted(ranked[math.ceil(len(active) / 2) :])
        sizes.append(len(active))
        round_eps, round_delta = round_eps * 0.75, round_delta / 2
    assert sizes == [10, 5, 3, 2]


# -- LUCB --------------------------------------------------------------------------------------
def test_lucb_radius_formula() -> None:
    for u, t, k, conf in [(1, 10, 4, 0.9), (50, 400, 10, 0.05)]:
        expected = math.sqrt(math.log(5 * k * t**4 / (4 * conf)) / (2 * u))
        assert lucb_radius(u, t, k, conf, None) == pytest.approx(expected)
        assert lucb_radius(u, t, k, conf, 1.5) == pytest.approx(
            1.5 * math.sqrt(2 * math.log(5 * k * t**4 / (4 * conf)) / u)
        )


@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("seed", range(5))
def test_lucb_stops_with_the_empirical_best(every_arm: bool, seed: int) -> None:
    k, eps, conf = 4, 0.2, 0.1
    env = Environment((0.8, 0.6, 0.3, 0.2))
    sub = make("lucb", n_arms=k, every_arm=every_arm, epsilon=eps, confidence=conf, seed=seed)
    rewards = np.random.default_rng(100 + seed)
    out: list[int] = []
    for _ in range(200_000):
        _, out = step(sub, env, rewards)
        if out:
            break
    assert sub.done, "LUCB stops"
    (kept,) = sub.active
    assert sorted(out) == [a for a in range(k) if a != kept]  # one stop eliminates all others
    mu = sub.means()
    assert kept == max(range(k), key=lambda a: (mu[a], -a))
    time = int(sub.counts.sum())
    radius = [lucb_radius(int(sub.counts[a]), time, k, conf, None) for a in range(k)]
    challenger = max((a for a in range(k) if a != kept), key=lambda a: (mu[a] + radius[a], -a))
    assert (mu[challenger] + radius[challenger]) - (mu[kept] - radius[kept]) < eps


# -- correctness of a single agent -------------------------------------------------------------
# The two-arm instance of tests/test_guarantees.py at the papers' eta = 0.9: SE's own guarantee
# (failure <= 0.9) says nothing here, and the measured failure rates of every subroutine are far
# below any such level, even with the radius halved. The level is instead the exact union bound
# of tests/stats.py (about 1e-9 here: the rule accepts no failure), and the negative control runs
# the product's class with its radius x 0.5 (a subclass) through the same code.
TWO_ARMS = Environment((0.7, 0.3))
TWO_EPS, TWO_CONF = 0.39, 0.9  # arm 1 is not eps-optimal: 0.7 - 0.3 > 0.39
SINGLE_RUNS = 700
SINGLE = [("se", True), ("ser3", False), ("lucb", False)]


def halved_radius(name: str) -> type[ArmSelection]:
    """The product's class with every confidence radius x 0.5."""
    base = subroutine_class(name)
    if name == "lucb":

        class HalvedLUCB(base):  # type: ignore[valid-type, misc]
            def interval(self, arm: int, time: int) -> tuple[float, float]:
                low, high = super().interval(arm, time)
                return (3 * low + high) / 4, (low + 3 * high) / 4

        return HalvedLUCB

    class HalvedSE(base):  # type: ignore[valid-type, misc]
        def radius(self, rounds: int) -> float:
            return 0.5 * float(super().radius(rounds))

    return HalvedSE


def single_agent_failures(cls: type[ArmSelection], every_arm: bool) -> int:
    """Runs of one agent on TWO_ARMS that keep arm 1 (not eps-optimal)."""
    params = LocalParams(epsilon=TWO_EPS, confidence=TWO_CONF, every_arm=every_arm)
    failed = 0
    for seed in range(SINGLE_RUNS):
        sub = cls(2, params, np.random.default_rng(seed))
        rewards = np.random.default_rng(10_000 + seed)
        while not sub.done:
            step(sub, TWO_ARMS, rewards)
        failed += sub.active[0] != 0
    return failed


@pytest.mark.parametrize(("name", "every_arm"), SINGLE)
def test_single_agent_fails_at_most_its_proven_bound(name: str, every_arm: bool) -> None:
    """Level B = 9.0e-10 for the three (`two_arm_failure_bound`; LUCB decides at equal counts on
    two arms whatever the activation model): no failure of 700 is accepted at alpha = 1e-3."""
    level = two_arm_failure_bound(name, TWO_ARMS.means, TWO_EPS, TWO_CONF)
    accepted = max_failures(SINGLE_RUNS, level, ALPHA)
    assert accepted == 0
    assert single_agent_failures(subroutine_class(name), every_arm) <= accepted


@pytest.mark.parametrize(("name", "every_arm"), SINGLE)
def test_single_agent_test_rejects_a_halved_radius(name: str, every_arm: bool) -> None:
    """The negative control. With the radius x 0.5, 11 (se), 8 (ser3) and 64 (lucb) of the 700
    runs fail; the power of the rule (no failure accepted) against those rates is 1 - 1.5e-5,
    1 - 3.2e-4 and 1 - 7e-30 (asserted >= 0.99). The same runs check the bound itself: the broken
    variant's failures stay within its own bound (0.0095 for se and ser3, 0.10 for lucb; up to 16
    and 97 of 700 accepted)."""
    level = two_arm_failure_bound(name, TWO_ARMS.means, TWO_EPS, TWO_CONF)
    accepted = max_failures(SINGLE_RUNS, level, ALPHA)
    failed = single_agent_failures(halved_radius(name), every_arm)
    assert failed > accepted
    assert power(SINGLE_RUNS, accepted, failed / SINGLE_RUNS) >= 0.99, failed
    broken = two_arm_failure_bound(name, TWO_ARMS.means, TWO_EPS, TWO_CONF, scale=0.5)
    assert failed <= max_failures(SINGLE_RUNS, broken, ALPHA), (failed, broken)


# -- SE with sharper bounds: kl-se and stitched-se ---------------------------------------------
# (their state round trip, activation cycle and restart are checked with every subroutine above)
def expected_kl_se_out(
    sub: ArmSelection, before: list[int], rounds: int, eps: float, conf: float
) -> list[int]:
    """kl-se's rules, recomputed from the statistics: KL intervals at log(4 K r^2 / conf),
    U_a <= max_b L_b eliminates a, then the eps-stop on the empirical best h."""
    level = math.log(4 * sub.initial_arms * rounds**2 / conf)
    mu = sub.sums / np.maximum(sub.counts, 1)
    box = {a: kl_interval(float(mu[a]), rounds, level) for a in before}
    top = max(low for low, _ in box.values())
    out = {a for a in before if box[a][1] <= top}
    rest = [a for a in before if a not in out]
    if len(rest) > 1:
        h = max(rest, key=lambda a: (mu[a], -a))
        if max(box[a][1] for a in rest if a != h) - box[h][0] < eps:
            out |= set(rest) - {h}
    return sorted(out)


def expected_se_out(mu: np.ndarray, before: list[int], radius: float, eps: float) -> list[int]:
    best = max(mu[a] for a in before)
    out = {a for a in before if best - mu[a] >= 2 * radius}
    rest = [a for a in before if a not in out]
    if radius <= eps / 2 and len(rest) > 1:
        h = max(rest, key=lambda a: (mu[a], -a))
        out |= set(rest) - {h}
    return sorted(out)


@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("name", ["kl-se", "stitched-se"])
@pytest.mark.parametrize("seed", range(2))
def test_sharp_se_decides_by_its_rules_at_each_round_end(
    name: str, every_arm: bool, seed: int
) -> None:
    """Every local elimination happens at the end of a round, exactly as the rules say; rounds
    are SER3's (least-sampled arm first, ties by a fresh random order)."""
    k, eps, conf = 6, 0.1, 0.3
    env = Environment((0.9, 0.85, 0.6, 0.5, 0.2, 0.02))
    sub = make(name, n_arms=k, every_arm=every_arm, epsilon=eps, confidence=conf, seed=seed)
    rewards = np.random.default_rng(50 + seed)
    checked = 0
    while not sub.done:
        before = list(sub.active)
        _, out = step(sub, env, rewards)
        counts = {int(sub.counts[a]) for a in before}
        if len(counts) != 1:
            assert out == []
            continue
        (rounds,) = counts
        if name == "kl-se":
            expected = expected_kl_se_out(sub, before, rounds, eps, conf)
        else:
            radius = stitched_radius(rounds, k, conf, None)
            assert sub.radius(rounds) == radius  # type: ignore[attr-defined]
            expected = expected_se_out(sub.means(), before, radius, eps)
        assert out == expected, f"round {rounds}"
        checked += 1
    assert checked > 10
    assert env.eps_optimal(sub.active[0], eps)


def test_kl_se_level_and_stitched_radius_use_the_set_at_the_restart() -> None:
    kl = make("kl-se", n_arms=10, confidence=0.9)
    st = make("stitched-se", n_arms=10, confidence=0.9)
    assert kl.level(7) == elimination_level(7, 10, 0.9)  # type: ignore[attr-defined]
    assert st.radius(7) == stitched_radius(7, 10, 0.9, None)  # type: ignore[attr-defined]
    kl.restart([2, 5, 7])
    st.restart([2, 5, 7])
    assert kl.level(7) == pytest.approx(math.log(4 * 3 * 49 / 0.9))  # type: ignore[attr-defined]
    assert st.radius(7) == stitched_radius(7, 3, 0.9, None)  # type: ignore[attr-defined]
    sigma = subroutine_class("stitched-se")(4, LocalParams(sigma=2.0), np.random.default_rng(0))
    assert sigma.radius(9) == stitched_radius(9, 4, 0.9, 2.0)  # type: ignore[attr-defined]
    assert sigma.radius(9) == pytest.approx(4 * stitched_radius(9, 4, 0.9, None))  # s = 2 vs 1/2


def test_kl_se_rejects_gaussian_rewards() -> None:
    gaussian = problem("rio-2").environment
    with pytest.raises(ParameterError) as info:
        SimulationConfig(gaussian, AlgorithmConfig("de", "kl-se"), n_agents=32)
    assert info.value.name == "subroutine" and "bounded" in str(info.value)
    with pytest.raises(ParameterError) as info:
        AlgorithmConfig("central", "kl-se").local_params(10, 1, 1.0)
    assert info.value.name == "subroutine"
    with pytest.raises(ParameterError) as info:
        subroutine_class("kl-se")(4, LocalParams(sigma=1.0), np.random.default_rng(0))
    assert info.value.name == "rewards"
    assert subroutine_class("kl-se").rewards == ("bounded",)
    # stitched-se takes both; so does the simulation
    assert set(subroutine_class("stitched-se").rewards) == {"bounded", "sub-gaussian"}
    SimulationConfig(gaussian, AlgorithmConfig("de", "stitched-se"), n_agents=32)


@pytest.mark.parametrize("name", ["kl-se", "stitched-se"])
def test_sharp_se_state_round_trip_mid_round_after_a_discard(name: str) -> None:
    """Restored in the middle of a round, after a discard shrank the set (the level and radius
    keep the K of the restart): the twin continues identically, votes and all."""
    env = Environment((0.9, 0.85, 0.6, 0.5, 0.2, 0.02))
    sub = make(name, n_arms=6, epsilon=0.1, confidence=0.3, seed=4)
    rewards = np.random.default_rng(8)
    for _ in range(23):
        step(sub, env, rewards)
    assert sub.discard([5]) == []
    for _ in range(4):
        step(sub, env, rewards)
    assert not sub.done and len(set(sub.counts[sub.active].tolist())) > 1  # mid-round
    state = json.loads(json.dumps(sub.to_state()))
    assert state["initial_arms"] == 6 and 5 not in state["active"]
    twin = restore(state, copy_rng(sub.rng))
    twin_rewards = copy_rng(rewards)
    assert type(twin) is type(sub) and twin.to_state() == sub.to_state()
    while not sub.done:
        assert step(sub, env, rewards) == step(twin, env, twin_rewards)
    assert twin.done and twin.to_state() == sub.to_state()


def single_agent_samples(name: str, runs: int) -> tuple[float, int]:
    """Feraud's problem 1 (0.7, 0.5, 0.3, 0.1 x 7), eps 0.25, conf 0.9, one agent: the mean number
    of samples to stop, and how many runs kept an eps-optimal arm. Every arm of the set is played
    at each activation: the same rounds as one arm at a time, in fewer Python calls."""
    env = problem("feraud-1").environment
    total = correct = 0
    for seed in range(runs):
        sub = make(name, n_arms=env.n_arms, every_arm=True, epsilon=0.25, confidence=0.9, seed=seed)
        rewards = np.random.default_rng(70_000 + seed)
        while not sub.done:
            step(sub, env, rewards)
        total += int(sub.counts.sum())
        correct += env.eps_optimal(sub.active[0], 0.25)
    return total / runs, correct


def test_sharp_bounds_need_fewer_samples_than_ser3() -> None:
    runs = 50  # means about 1,660 (ser3), 740 (kl-se) and 830 (stitched-se)
    ser3, ser3_ok = single_agent_samples("ser3", runs)
    kl, kl_ok = single_agent_samples("kl-se", runs)
    stitched, stitched_ok = single_agent_samples("stitched-se", runs)
    assert kl < ser3, (kl, ser3)
    assert stitched < ser3, (stitched, ser3)
    # A seed regression, not a guarantee (conf 0.9 allows most runs to fail; the two-arm tests
    # above are the guarantee tests): on these seeds every run keeps an eps-optimal arm, and a
    # change here means the random stream or the algorithm changed.
    assert (ser3_ok, kl_ok, stitched_ok) == (runs, runs, runs)


# -- explore-then-commit: ugapec, kl-lucb, stitched-lucb ---------------------------------------
def etc_intervals(sub: ArmSelection, name: str) -> dict[int, tuple[float, float]]:
    """Each arm's [L, U] at a decision, recomputed from the statistics by the papers' formulas."""
    k, conf, time = sub.initial_arms, sub.params.confidence, max(1, int(sub.counts.sum()))
    mu = sub.sums / np.maximum(sub.counts, 1)
    box: dict[int, tuple[float, float]] = {}
    for a in sub.active:
        n = int(sub.counts[a])
        if name == "kl-lucb":
            box[a] = kl_interval(float(mu[a]), n, math.log(11.0 * k * time**1.1 / conf))
            continue
        if name == "ugapec":
            rad = math.sqrt(math.log(4 * k * max(time - 1, 1) ** 3 / conf) / (2 * n))
        else:
            alpha = conf / (2 * k)
            inner = math.log(math.log(2 * n)) + 0.72 * math.log(5.2 / alpha)
            rad = 1.7 * 0.5 * math.sqrt(inner / n)
        box[a] = (float(mu[a]) - rad, float(mu[a]) + rad)
    return box


def expected_etc(
    sub: ArmSelection, name: str, eps: float, every_arm: bool
) -> tuple[int | None, list[int]]:
    """(the arm kept if the rule stops, else None; the arms queued to play)."""
    box = etc_intervals(sub, name)
    arms = list(sub.active)
    mu = sub.sums / np.maximum(sub.counts, 1)
    if name == "ugapec":
        gap = {k: max(box[i][1] for i in arms if i != k) - box[k][0] for k in arms}
        j = min(arms, key=lambda k: (gap[k], k))
        if gap[j] < eps:
            return j, []
        u = max((i for i in arms if i != j), key=lambda i: (box[i][1], -i))
        if every_arm:
            return None, [j, u]
        wider = box[u][1] - box[u][0] > box[j][1] - box[j][0]
        return None, [u if wider else j]
    h = max(arms, key=lambda a: (mu[a], -a))
    challenger = max((a for a in arms if a != h), key=lambda a: (box[a][1], -a))
    if box[challenger][1] - box[h][0] < eps:
        return h, []
    return None, [h, challenger]


@pytest.mark.parametrize("every_arm", MODES)
@pytest.mark.parametrize("name", ["ugapec", "kl-lucb", "stitched-lucb"])
@pytest.mark.parametrize("seed", range(2))
def test_explore_commit_decides_by_its_rule_at_each_decision(
    name: str, every_arm: bool, seed: int
) -> None:
    """Every decision (empty queue, every arm seen) is replayed from the statistics: the queue the
    rule asks for, or the stop with the arm it keeps and every other arm eliminated."""
    eps, conf = 0.2, 0.5
    env = Environment((0.8, 0.6, 0.45, 0.2))
    sub = make(name, n_arms=4, every_arm=every_arm, epsilon=eps, confidence=conf, seed=seed)
    rewards = np.random.default_rng(300 + seed)
    decisions = 0
    for _ in range(100_000):
        before = list(sub.active)
        arms = sub.select()
        sub._record(arms, [float(rewards.random() < env.means[a]) for a in arms])
        sub.queue = [a for a in sub.queue if a not in arms]  # type: ignore[attr-defined]
        deciding = not sub.queue and all(sub.counts[a] > 0 for a in before)  # type: ignore[attr-defined]
        expected = expected_etc(sub, name, eps, every_arm) if deciding else (None, [])
        out = sub._decide()  # type: ignore[attr-defined]
        if not deciding:
            assert out == []
            continue
        decisions += 1
        kept, queued = expected
        if kept is not None:
            assert sub.active == [kept] and sorted(out) == [a for a in before if a != kept]
            break
        assert out == [] and sub.queue == queued  # type: ignore[attr-defined]
    assert sub.done and decisions > 3


@pytest.mark.parametrize("name", ["ugapec", "kl-lucb", "stitched-lucb"])
def test_explore_commit_plays_only_its_queue(name: str) -> None:
    """One arm per activation: UGapEc queues one arm per decision, LUCB1's rule two."""
    sub = make(name, n_arms=4, every_arm=False, epsilon=0.05, confidence=0.5, seed=1)
    env, rewards = Environment((0.6, 0.55, 0.5, 0.2)), np.random.default_rng(7)
    for _ in range(4):  # every arm once
        step(sub, env, rewards)
    for _ in range(50):
        if sub.done:
            break
        queue = list(sub.queue)  # type: ignore[attr-defined]
        assert len(queue) == (1 if name == "ugapec" else 2)
        for arm in queue:  # one per activation, in order; the decision after the last
            assert sub.select() == [arm]
            sub.observe([arm], [float(rewards.random() < env.means[arm])])
    assert int(sub.counts.sum()) > 4 + 20


def test_kl_lucb_rejects_gaussian_rewards_and_the_others_take_them() -> None:
    gaussian = problem("rio-2").environment
    with pytest.raises(ParameterError) as info:
        SimulationConfig(gaussian, AlgorithmConfig("de", "kl-lucb"), n_agents=32)
    assert info.value.name == "subroutine" and "bounded" in str(info.value)
    with pytest.raises(ParameterError) as info:
        subroutine_class("kl-lucb")(4, LocalParams(sigma=1.0), np.random.default_rng(0))
    assert info.value.name == "rewards"
    for name in ("ugapec", "stitched-lucb"):
        assert set(subroutine_class(name).rewards) == {"bounded", "sub-gaussian"}
        SimulationConfig(gaussian, AlgorithmConfig("de", name), n_agents=32)


def test_explore_commit_with_sharper_bounds_needs_fewer_samples_than_lucb() -> None:
    runs = 25  # means about 990 (lucb), 320 (kl-lucb) and 240 (stitched-lucb)
    lucb, lucb_ok = single_agent_samples("lucb", runs)
    for name in ("kl-lucb", "stitched-lucb"):
        samples, ok = single_agent_samples(name, runs)
        assert samples < 0.8 * lucb, (name, samples, lucb)
        assert ok == runs, (name, ok)  # a seed regression, as above
    assert lucb_ok == runs


def local_samples(subroutine: str, means: tuple[float, ...], eps: float) -> float:
    """One agent's mean samples to stop at conf 0.9 (the fast engine, 40 runs, seed 3)."""
    algo = AlgorithmConfig("independent", subroutine, epsilon=eps, delta=0.9)
    results = run_trials(SimulationConfig(Environment(means), algo, n_agents=1), 40, seed=3)
    assert all(r.correct for r in results)  # a seed regression, as above
    return float(np.mean([r.sample_complexity for r in results]))


@pytest.mark.parametrize(
    ("means", "eps", "kl_wins"),
    [
        ((0.95,) + (0.85,) * 9, 0.05, True),  # the best and its rivals near 1
        ((0.15,) + (0.05,) * 9, 0.05, True),  # ... near 0
        ((0.55,) + (0.45,) * 9, 0.05, False),  # ... near 1/2
        ((0.7, 0.5, 0.3) + (0.1,) * 7, 0.25, False),  # Problem 1: many arms near 0, not the best
    ],
)
def test_kl_lucb_beats_stitched_lucb_when_the_deciding_arms_are_near_0_or_1(
    means: tuple[float, ...], eps: float, kl_wins: bool
) -> None:
    """docs/SUBROUTINES.md's advice (section 4), on one agent: means about 2,400 against 5,400
    (near 1), 3,900 against 5,300 (near 0), 10,200 against 5,000 (near 1/2) and 330 against 230
    (Problem 1): the ratio 0.85 asserted is at least 5 standard errors from each."""
    kl, stitched = local_samples("kl-lucb", means, eps), local_samples("stitched-lucb", means, eps)
    if kl_wins:
        assert kl < 0.85 * stitched, (kl, stitched)
    else:
        assert stitched < 0.85 * kl, (kl, stitched)


# -- the local agent ---------------------------------------------------------------------------
def se_agent(k: int = 4, vote_drop: float = 0.0, seed: int = 0, name: str = "se") -> LocalAgent:
    params = LocalParams(epsilon=0.5, confidence=0.9, every_arm=True)
    return LocalAgent(AgentSpec(k, name, params, vote_drop), np.random.default_rng(seed))


def run_to_done(agent: LocalAgent, values: list[float]) -> list[int]:
    votes: list[int] = []
    while not agent.done:
        arms = agent.select()
        votes += agent.observe(arms, [values[a] for a in arms])
    return votes


def test_agent_votes_against_what_it_eliminates() -> None:
    agent = se_agent()
    assert run_to_done(agent, [1.0, 0.0, 0.0, 0.0]) == [1, 2, 3]
    assert agent.local_arms == [0]
    assert agent.voted == {1, 2, 3}


def test_agent_restarts_on_an_empty_intersection_and_never_votes_twice() -> None:
    agent = se_agent()
    assert sorted(run_to_done(agent, [1.0, 0.0, 0.0, 0.0])) == [1, 2, 3]
    # others voted its arm 0 out: K_n & K is empty -> fresh statistics on K, and no vote
    assert agent.sync({1, 2, 3}) == []
    assert agent.local_arms == [1, 2, 3]
    assert not agent.sub.counts.any()
    assert not agent.done
    # the new run eliminates 2 and 3 again: already voted against, nothing is sent twice
    assert run_to_done(agent, [0.0, 1.0, 0.0, 0.0]) == []
    assert agent.local_arms == [1]
    assert agent.voted == {1, 2, 3}
    # a non-empty intersection keeps the statistics
    counts = agent.sub.counts.copy()
    assert agent.sync({1, 2}) == []
    assert agent.local_arms == [1]
    assert (agent.sub.counts == counts).all()
    # |K| = 1 with another arm: K_n := K
    assert agent.sync({2}) == []
    assert agent.local_arms == [2]
    assert agent.done


def test_agent_new_epoch_clears_votes() -> None:
    agent = se_agent()
    run_to_done(agent, [1.0, 0.0, 0.0, 0.0])
    assert agent.sync({0, 1, 2, 3}, epoch=1) == []
    assert agent.epoch == 1
    assert agent.voted == set()
    assert agent.local_arms == [0, 1, 2, 3]
    assert not agent.sub.counts.any()
    assert sorted(run_to_done(agent, [0.0, 0.0, 0.0, 1.0])) == [0, 1, 2]  # votes again


def test_agent_sync_returns_the_votes_of_a_round_that_a_discard_completes() -> None:
    params = LocalParams(epsilon=1.0, confidence=0.9)  # one arm per activation
    agent = LocalAgent(AgentSpec(4, "me", params), np.random.default_rng(0))
    sub = agent.sub
    assert isinstance(sub, MedianElimination)
    values = [1.0, 0.5, 0.2, 0.7]
    while int(sub.counts[3]) < sub.samples - 1 or int(sub.counts[2]) < sub.samples:
        arms = agent.select()
        assert agent.observe(arms, [values[a] for a in arms]) == []
    assert all(sub.counts[a] == sub.samples for a in (0, 1, 2))
    votes = agent.sync({0, 1, 2})  # arm 3 left globally: the round is complete on {0, 1, 2}
    assert votes == [2]  # the lower half of {0, 1, 2} by empirical mean
    assert agent.voted == {2}
    assert agent.local_arms == [0, 1]


@pytest.mark.parametrize("seed", range(10))
def test_agent_never_votes_twice_in_an_epoch_random_run(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = 6
    env = Environment(tuple(rng.uniform(0, 1, k)))
    agent = LocalAgent(
        AgentSpec(k, "ser3", LocalParams(epsilon=0.3, confidence=0.9)), np.random.default_rng(seed)
    )
    remaining, sent, epoch = set(range(k)), [], 0
    for t in range(20_000):
        if rng.random() < 0.002 and len(remaining) > 1:
            remaining.discard(int(rng.choice(sorted(remaining))))  # others voted it out
        if rng.random() < 0.0003:
            remaining, sent, epoch = set(range(k)), [], epoch + 1
        sent += agent.sync(remaining, epoch)
        assert set(agent.local_arms) <= remaining
        arms = agent.select()
        if arms:
            sent += agent.observe(arms, env.draw(arms, t, rng))
        assert len(sent) == len(set(sent)), f"a second vote on the same arm: {sent}"
        assert set(sent) <= agent.voted


@pytest.mark.parametrize("xi", [0.1, 0.3])
def test_ce_drops_each_vote_with_probability_xi(xi: float) -> None:
    k, agents = 10, 800
    sent = decided = 0
    for seed in range(agents):
        agent = se_agent(k, vote_drop=xi, seed=seed)
        votes = run_to_done(agent, [1.0] + [0.0] * (k - 1))
        assert agent.local_arms == [0]  # the arm is eliminated locally whether or not it is sent
        assert agent.voted == set(range(1, k))
        assert set(votes) <= agent.voted
        sent += len(votes)
        decided += k - 1
    assert stats.binomtest(decided - sent, decided, xi).pvalue > 1e-3


def test_agent_round_trip_continues_identically() -> None:
    env = Environment((0.7, 0.5, 0.45, 0.3, 0.2))
    params = LocalParams(epsilon=0.3, confidence=0.8)
    spec = AgentSpec(5, "ser3", params, vote_drop=0.2)
    agent = LocalAgent(spec, np.random.default_rng(1))
    rewards = np.random.default_rng(2)
    for t in range(137):
        agent.sync({0, 1, 2, 3, 4})
        arms = agent.select()
        agent.observe(arms, env.draw(arms, t, rewards))
    state = json.loads(json.dumps(agent.to_state()))
    twin = LocalAgent.from_state(spec, state, copy_rng(agent.rng))
    twin_rewards = copy_rng(rewards)
    remaining = {0, 1, 2, 3, 4}
    for t in range(137, 5000):
        if t == 300:
            remaining = {0, 1, 3}
        a = agent.sync(remaining), agent.select()
        b = twin.sync(remaining), twin.select()
        assert a == b
        if a[1]:
            assert agent.observe(a[1], env.draw(a[1], t, rewards)) == twin.observe(
                b[1], env.draw(b[1], t, twin_rewards)
            )
        if agent.done:
            break
    assert twin.to_state() == agent.to_state()
    assert agent.done
