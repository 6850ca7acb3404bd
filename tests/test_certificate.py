"""What an experiment certifies (common/certificate.py): the binomial tail against brute force, its
monotonicity, the fixes the warning names (each certifies, one step less does not), each
subroutine's constant against its own radius, and the reduction from local errors to the best arm
voted out, played through the real vote rule."""

from __future__ import annotations

import itertools
import json
import math
import re
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from common.algorithms import AlgorithmConfig
from common.binomial import TINY, binomial_tail
from common.certificate import (
    LOCAL_ERROR_FACTORS,
    Certificate,
    Remedy,
    certified_failure,
    certify,
    certify_simulation,
    largest_agents,
    largest_local_error,
    local_error,
    lower,
    remedy,
    smallest_threshold,
    upper,
)
from common.environments import Environment
from common.errors import ParameterError
from common.simulation import SimulationConfig
from common.stats import proportion_interval
from common.subroutines import SUBROUTINES, LocalParams
from common.subroutines.explore_commit import UGapEc
from common.subroutines.radius import elimination_radius, lucb_radius
from common.votes import GlobalState, VoteOutcome
from dexp.cli import app


def exact_tail(n: int, m: int, p: float) -> Fraction:
    """P(Bin(n, p) >= m) in exact rational arithmetic."""
    q = Fraction(p)
    return sum(
        (Fraction(math.comb(n, k)) * q**k * (1 - q) ** (n - k) for k in range(max(m, 0), n + 1)),
        Fraction(0),
    )


def enumerated_failure(agents: int, threshold: int, p: float, liars: int) -> Fraction:
    """The best arm (arm 0) voted out, by enumeration of which honest agents err: the liars vote
    against arm 0, each erring honest agent too, the others against arm 1; GlobalState decides."""
    q = Fraction(p)
    honest = agents - liars
    total = Fraction(0)
    for erring in itertools.product((False, True), repeat=honest):
        state = GlobalState(3, threshold=threshold)
        for n in range(liars):
            state.vote(f"liar-{n}", 0)
        for n, errs in enumerate(erring):
            state.vote(f"agent-{n}", 0 if errs else 1)
        if 0 not in state.remaining:
            k = sum(erring)
            total += q**k * (1 - q) ** (honest - k)
    return total


@pytest.mark.parametrize(
    ("agents", "threshold", "p", "liars"),
    [(4, 3, 0.2, 0), (6, 3, 0.37, 0), (8, 5, 0.5, 2), (9, 4, 0.05, 1), (10, 10, 0.9, 0)],
)
def test_certified_failure_is_the_best_arm_voted_out_enumerated(
    agents: int, threshold: int, p: float, liars: int
) -> None:
    exact = enumerated_failure(agents, threshold, p, liars)
    value = certified_failure(agents, threshold, p, liars)
    assert value >= exact  # a bound: never below the exact value
    assert value == pytest.approx(float(exact), rel=1e-7)


def test_binomial_tail_against_exact_arithmetic_down_to_1e_300() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 120))
        m = int(rng.integers(0, n + 2))
        p = float(
            rng.choice([rng.random(), 10 ** rng.uniform(-30, 0), 1 - 10 ** rng.uniform(-9, -1)])
        )
        exact = exact_tail(n, m, p)
        value = binomial_tail(n, m, p)
        if exact == 0:
            assert value == 0.0
        elif exact < Fraction(TINY):
            assert value == TINY  # "at most 1e-300": still a bound
        else:
            assert float(exact) <= value <= float(exact) * (1 + 2e-8), (n, m, p)


def test_tiny_values_are_reported_and_1_when_it_is() -> None:
    assert binomial_tail(40, 40, 0.1) == pytest.approx(1e-40, rel=1e-8)
    assert binomial_tail(40, 40, 0.1) >= 1e-40
    assert certified_failure(1024, 29, 0.37) == 1.0  # not 248, not 0.9999999
    assert binomial_tail(10_000, 10_000, 0.01) == TINY  # 1e-20000 underflows: "at most 1e-300"
    assert binomial_tail(5, 6, 0.5) == 0.0 and binomial_tail(5, 0, 0.5) == 1.0
    assert upper(1.0) == "1" and upper(3.951e-10) == "3.96e-10" and upper(0.1) == "0.1"
    assert lower(0.0203) == "0.0203" and lower(0.02039) == "0.0203"


def test_large_n_against_scipy() -> None:
    from scipy.special import bdtrc

    for n, m, p in [(10_000, 3780, 0.37), (10_000, 5000, 0.37), (100_000, 41, 3e-4)]:
        assert binomial_tail(n, m, p) == pytest.approx(float(bdtrc(m - 1, n, p)), rel=2e-8)


def test_monotone_in_agents_error_threshold_and_liars() -> None:
    tails = [certified_failure(n, 29, 0.37) for n in range(29, 200)]
    assert tails == sorted(tails) and tails[0] < 1e-12 and tails[-1] == 1.0
    by_p = [certified_failure(64, 29, p) for p in np.linspace(0.01, 0.99, 50)]
    assert by_p == sorted(by_p)
    by_m = [certified_failure(64, m, 0.37) for m in range(1, 66)]
    assert by_m == sorted(by_m, reverse=True) and by_m[-1] == 0.0
    # the coordinator assumes f liars, the worst of 0..f at a fixed threshold M + f
    by_liars = [certified_failure(64, 31, 0.37, liars) for liars in range(3)]
    assert by_liars == sorted(by_liars)


@pytest.mark.parametrize(
    ("agents", "threshold", "p", "delta", "liars"),
    [(64, 29, 0.3701, 0.05, 0), (1024, 29, 0.3701, 0.05, 0), (64, 31, 0.37, 0.05, 2),
     (200, 11, 0.2746, 0.01, 0), (40, 12, 0.2056, 1e-6, 0)],
)  # fmt: skip
def test_each_fix_certifies_and_one_step_less_does_not(
    agents: int, threshold: int, p: float, delta: float, liars: int
) -> None:
    assert certified_failure(agents, threshold, p, liars) > delta

    m = smallest_threshold(agents, p, delta, liars)
    assert certified_failure(agents, m, p, liars) <= delta
    assert certified_failure(agents, m - 1, p, liars) > delta

    n = largest_agents(threshold, p, delta, liars)
    assert n is not None and n >= threshold
    assert certified_failure(n, threshold, p, liars) <= delta
    assert certified_failure(n + 1, threshold, p, liars) > delta

    most = largest_local_error(agents, threshold, delta, liars)
    assert certified_failure(agents, threshold, most, liars) <= delta
    assert certified_failure(agents, threshold, most * (1 + 1e-9), liars) > delta
    assert largest_agents(threshold, 0.999, delta) is None  # not even `threshold` agents do
    printed = float(lower(most))  # the warning's figure, rounded down, certifies too
    assert certified_failure(agents, threshold, printed, liars) <= delta
    step = 10 ** (math.floor(math.log10(printed)) - 2)
    assert certified_failure(agents, threshold, printed + step, liars) > delta


def test_the_warning_names_fixes_that_certify() -> None:
    algo = AlgorithmConfig()  # DE-SER3, eps 0.25, delta 0.05, eta 0.9: M = 29
    certificate = certify(algo, 10, 1024)
    warning = certificate.warning()
    assert warning is not None
    assert warning.startswith("certified failure 1 is above delta = 0.05 with 1,024 agents: ")
    numbers = re.search(
        r"a threshold of ([\d,]+) votes, agents that err with probability at most ([\d.e-]+) each "
        r"\(now ([\d.]+)\) or at most ([\d,]+) agents would certify it$",
        warning,
    )
    assert numbers is not None, warning
    m, p_most, p_now, n_most = numbers.groups()
    p = certificate.local_error
    assert float(p_now) >= p and upper(p) == p_now
    assert certified_failure(1024, int(m.replace(",", "")), p) <= 0.05
    assert certified_failure(1024, int(m.replace(",", "")) - 1, p) > 0.05
    assert certified_failure(1024, 29, float(p_most)) <= 0.05
    assert certified_failure(int(n_most.replace(",", "")), 29, p) <= 0.05
    assert certified_failure(int(n_most.replace(",", "")) + 1, 29, p) > 0.05
    assert certify(algo, 10, 32).warning() is None  # P(Bin(32, 0.37) >= 29) = 4e-10


def test_configurations_each_get_their_bound() -> None:
    ser3 = math.pi**2 / 24
    de = certify(AlgorithmConfig(), 10, 64)
    assert de.local_error == pytest.approx(ser3 * 0.9)
    assert de.failure == pytest.approx(float(exact_tail(64, 29, ser3 * 0.9)), rel=1e-7)
    assert "29 of the 64 agents to err" in de.statement()
    assert "within epsilon of the best" in de.statement()  # the epsilon-stop caveat
    # CE: runs at eta_xi, and a decided vote is sent with probability 1 - xi
    ce = certify(AlgorithmConfig(algorithm="ce", xi=0.1), 10, 64)
    eta_xi = 1 - 0.1 / 0.9**9
    assert ce.threshold == 11 and ce.local_error == pytest.approx(ser3 * eta_xi * 0.9)
    assert "err and send that vote" in ce.statement()
    # DP-MASE: beta, and the best arm itself (no epsilon-stop)
    dp = certify(AlgorithmConfig(algorithm="dp-mase", subroutine="se"), 10, 64)
    assert dp.local_error == pytest.approx(ser3 * 0.5) and dp.threshold == 5
    assert "within epsilon" not in dp.statement()
    # a tolerance f: M honest votes from N - f honest agents
    tolerant = certify(AlgorithmConfig(tolerance=2), 10, 64)
    assert tolerant.failure == pytest.approx(float(exact_tail(62, 29, ser3 * 0.9)), rel=1e-7)
    assert "29 of the 62 honest agents (2 may lie)" in tolerant.statement()
    # DSER4: per epoch
    assert (
        certify(AlgorithmConfig(subroutine="ser4", phi=1e-4), 10, 40)
        .statement()
        .startswith("In each epoch, the best arm is voted out by error")
    )
    # fewer honest agents than M: nothing can be voted out
    few = certify(AlgorithmConfig(), 10, 20)
    assert few.failure == 0.0 and "cannot be voted out" in few.statement()
    # the baselines: each agent alone at delta / N, one central run at delta
    alone = certify(AlgorithmConfig(algorithm="independent"), 10, 64)
    assert alone.failure == pytest.approx(1 - (1 - ser3 * 0.05 / 64) ** 64, rel=1e-7)
    assert alone.failure <= 0.05 and alone.warning() is None
    assert certify(AlgorithmConfig(algorithm="central"), 10, 64).failure == pytest.approx(
        ser3 * 0.05
    )
    drift = certify(AlgorithmConfig(), 10, 64, drifting=True)
    assert drift.failure == 1.0 and "drift" in drift.statement()


def test_every_subroutine_has_its_constant_at_most_1() -> None:
    assert set(LOCAL_ERROR_FACTORS) == set(SUBROUTINES)
    assert all(0 < c <= 1 for c in LOCAL_ERROR_FACTORS.values())
    for name in SUBROUTINES:
        if name in ("dp-se", "fixed-budget"):  # picked by DP-MASE and CDE
            continue
        algo = AlgorithmConfig(subroutine=name, phi=0.01 if name == "ser4" else 0.0)
        assert local_error(algo, 10, 64) == pytest.approx(LOCAL_ERROR_FACTORS[name] * 0.9)


def test_the_constants_are_the_sums_of_the_radii_one_side_per_arm() -> None:
    """Each constant is the sum, over one side of each of the K arms and every check, of the
    Hoeffding probability exp(-2 n rad^2) of the subroutine's own radius (K = 10, conf = 0.9)."""
    k, conf = 10, 0.9
    rounds = sum(
        k * math.exp(-2 * r * elimination_radius(r, k, conf, None) ** 2) for r in range(1, 200_000)
    )
    assert rounds / conf == pytest.approx(LOCAL_ERROR_FACTORS["ser3"], rel=1e-4)
    # LUCB1: decisions at t >= 2 samples, each arm with 1 <= n <= t of them
    lucb = sum(
        k * t * math.exp(-2 * lucb_radius(1, t, k, conf, None) ** 2) for t in range(2, 20_000)
    )  # exp(-2 n rad(n, t)^2) does not depend on n
    assert lucb / conf == pytest.approx(LOCAL_ERROR_FACTORS["lucb"], rel=1e-4)
    # UGapEc: one event per pull count n, at the level of time t = n (section 2's union), which
    # is smaller than the union over decision times t >= 2 and n <= t
    ugapec = UGapEc(k, LocalParams(confidence=conf), np.random.default_rng(0))
    total = 0.0
    for n in range(1, 20_000):
        ugapec.counts[:] = n
        total += k * math.exp(-2 * n * ugapec.beta(0, n) ** 2)
    assert total / conf == pytest.approx(LOCAL_ERROR_FACTORS["ugapec"], rel=1e-3)
    ugapec.counts[:] = 1
    times = sum(k * t * math.exp(-2 * ugapec.beta(0, t) ** 2) for t in range(2, 20_000))
    assert total < times  # (zeta(2) + zeta(3)) / 4 = 0.71 by decision times


def test_the_vote_rule_turns_independent_local_errors_into_the_binomial_tail() -> None:
    """A synthetic model, played through GlobalState: N agents, L of them liars voting against the
    best arm; each honest agent's run errs with probability exactly p_run and then votes against
    it, a vote CE drops with probability xi. The rate at which the best arm is voted out matches
    P(Bin(N - L, p_run (1 - xi)) >= M + f - L) within its 99.9 % interval, and the wrong readings
    (no drop, no liars, M given agents, the union over N agents) fall outside it."""
    agents, threshold, liars, p_run, xi, trials = 12, 5, 1, 0.3, 0.2, 4000
    rng = np.random.default_rng(2024)
    out = 0
    for _ in range(trials):
        state = GlobalState(3, threshold=threshold)
        for n in range(liars):
            state.vote(f"liar-{n}", 0)
        errs = rng.random(agents - liars) < p_run
        sent = rng.random(agents - liars) >= xi
        outcomes = [
            state.vote(f"agent-{n}", 0 if err and kept else 1)
            for n, (err, kept) in enumerate(zip(errs, sent, strict=True))
        ]
        out += VoteOutcome.ELIMINATED in outcomes and 0 not in state.remaining
    low, high = proportion_interval(out, trials, level=0.999)
    bound = certified_failure(agents, threshold, p_run * (1 - xi), liars)
    assert low <= bound <= high, (out / trials, bound)
    m = threshold - liars
    for wrong in (
        certified_failure(agents, threshold, p_run, liars),  # the drop ignored
        certified_failure(agents, threshold, p_run * (1 - xi)),  # the liar ignored
        (p_run * (1 - xi)) ** m,  # Theorem 1's M given agents
        min(1.0, math.comb(agents - liars, m) * (p_run * (1 - xi)) ** m),  # the union
    ):
        assert not low <= wrong <= high, wrong


def simulate(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["simulate", *args, "--json"])
    assert result.exit_code == 0, result.output
    document: dict[str, Any] = json.loads(result.stdout)
    return document


# K = 3, eta = 0.5, delta = 0.05: M = 5; 12 agents; p = (pi^2 / 24) 0.5
SMALL = ["--agents", "12", "--eta", "0.5", "--stop", "global", "--seed", "3"]


def test_simulate_reports_the_bound_for_its_n_and_stays_within_it() -> None:
    """The fast simulator, 400 trials on a fixed seed: with no other arm within eps of the best,
    how often the best arm is voted out stays within the certified failure (0.080 here: a bound
    that means something, where the papers' eta^M = 0.031 for M given agents would not hold over
    12), and the document says it for the simulated N."""
    doc = simulate("--means", "0.9,0.5,0.1", *SMALL, "--trials", "400")
    expected = certify(AlgorithmConfig(eta=0.5), 3, 12).failure
    assert doc["certified_failure"] == expected == pytest.approx(0.08026, rel=1e-4)
    assert "5 of the 12 agents" in doc["certificate"]
    assert "no other arm is within epsilon of the best arm 0" in doc["certificate"]
    summary = doc["summary"]
    low, _ = summary["best_arm_voted_out_ci95"]
    assert low <= expected
    assert doc["warnings"] == [certify(AlgorithmConfig(eta=0.5), 3, 12).warning()]


def test_simulate_says_when_an_arm_within_eps_lets_the_best_arm_leave_without_error() -> None:
    """Two equal best arms: the epsilon-stop votes either out without any error, far more often
    than the certified failure, which bounds only errors; the sentence says so."""
    doc = simulate("--means", "0.8,0.8,0.2", *SMALL, "--trials", "100")
    assert "arm 1 is within epsilon of the best arm 0" in doc["certificate"]
    low, _ = doc["summary"]["best_arm_voted_out_ci95"]
    assert low > doc["certified_failure"]


# -- edges of the arithmetic ----------------------------------------------------------------------
def test_liars_that_are_every_agent_cannot_vote_out_more_than_they_are() -> None:
    """N = f: no honest agent; the best arm leaves by error only if the liars alone reach the
    threshold, which they do at M + f <= f (never here) and cannot at M + f > N."""
    assert certified_failure(3, 4, 0.5, liars=3) == 0.0  # 3 liars, 4 votes needed
    assert certified_failure(3, 3, 0.5, liars=3) == 1.0  # the liars alone remove it
    assert certified_failure(2, 4, 0.5, liars=3) == 0.0  # more liars than agents: none honest


def test_the_smallest_threshold_at_its_ends() -> None:
    # an error so rare that one vote (or f + 1, with f liars) certifies
    assert smallest_threshold(10, 1e-6, 0.05) == 1
    assert smallest_threshold(10, 1e-6, 0.05, liars=2) == 3
    # an error so likely that no threshold the 5 agents can reach certifies: N + 1
    assert smallest_threshold(5, 0.99, 1e-9) == 6
    assert smallest_threshold(5, 0.99, 1e-9, liars=2) == 6


def test_the_largest_local_error_at_its_ends() -> None:
    # a threshold no agent set reaches: any error certifies, 1 is the largest
    assert largest_local_error(5, 6, 0.05) == 1.0
    assert largest_local_error(5, 8, 0.05, liars=2) == 1.0
    # M = N = 1: P(one agent errs) = p, so p = delta (less the tail's relative margin of 1e-8),
    # to the last bits of the bisection; M = 1 of N = 2: 1 - (1 - p)^2 = 0.19 at p = 0.1
    for agents, delta, p in ((1, 0.25, 0.25), (2, 0.19, 0.1)):
        most = largest_local_error(agents, 1, delta)
        assert most == pytest.approx(p, rel=3e-8)
        assert certified_failure(agents, 1, most) <= delta
        assert certified_failure(agents, 1, most * (1 + 1e-14)) > delta


def test_the_largest_agents_at_its_ends() -> None:
    # every number up to the limit certifies: the limit, whatever it is
    assert largest_agents(3, 1e-9, 0.05, limit=100) == 100
    assert largest_agents(3, 1e-9, 0.05, limit=7) == 7
    # not even M agents: None; exactly M agents: M (at p^M = delta, M = 2)
    assert largest_agents(2, 0.5, 0.2) is None
    assert largest_agents(2, 0.5, 0.2500001) == 2
    # with f = 3 liars and M + f = 4, N = 4 is one honest agent (P = p = 0.1 <= 0.15) and
    # N = 5 two (0.19): 4
    assert largest_agents(4, 0.1, 0.15, liars=3) == 4
    # a threshold the liars reach alone certifies nothing, with any number of agents
    assert largest_agents(2, 1e-9, 0.05, liars=3) is None


@pytest.mark.parametrize(
    ("x", "up", "down"),
    [
        (0.123, "0.123", "0.123"),  # exact at 3 digits: no rounding either way
        (0.1231, "0.124", "0.123"),
        (0.1239, "0.124", "0.123"),
        (4.56e-7, "4.56e-07", "4.56e-07"),
        (4.5601e-7, "4.57e-07", "4.56e-07"),
        (0.9995, "1", "0.999"),
        (0.05, "0.05", "0.05"),
        (0.0, "0", "0"),  # not in (0, 1): as it is
        (1.0, "1", "1"),
        (2.5, "2.5", "2.5"),
        (1.2345, "1.24", "1.23"),  # above 1 too (e0), to 3 significant digits
        (123.456, "124", "123"),
        (13.5, "13.5", "13.5"),
        (-0.5, "-0.5", "-0.5"),
        (math.inf, "inf", "inf"),
        (math.nan, "nan", "nan"),
    ],
)
def test_upper_and_lower_round_to_three_digits_in_their_direction(
    x: float, up: str, down: str
) -> None:
    assert (upper(x), lower(x)) == (up, down)
    if 0 < x < 1:
        assert float(upper(x)) >= x >= float(lower(x))


# -- the sentences --------------------------------------------------------------------------------
def test_the_statement_of_each_voting_case() -> None:
    """The votes certificate's sentence in each case, whole: the number, M, who errs, and when it
    is the probability of a wrong answer. p = (pi^2 / 24) eta; the failure P(Bin(N, p) >= M)."""
    de = certify(AlgorithmConfig(eta=0.5), 3, 12)  # M = 5, p = 0.2056, P(Bin(12, p) >= 5)
    assert de.statement() == (
        "The best arm is voted out by error with probability at most 0.0803: it takes 5 of the 12 "
        "agents to err, each with probability at most 0.206. When no other arm is within epsilon "
        "of the best, that is the probability of a wrong answer."
    )
    dp = certify(AlgorithmConfig(algorithm="dp-mase", subroutine="se"), 10, 64)
    assert dp.statement() == (
        "The best arm is voted out by error with probability at most 0.999: it takes 5 of the 64 "
        "agents to err, each with probability at most 0.206. That is the probability of a wrong "
        "answer."
    )
    ce = certify(AlgorithmConfig(algorithm="ce", xi=0.1), 10, 64)
    assert "it takes 11 of the 64 agents to err and send that vote (xi drops it), each" in (
        ce.statement()
    )
    lying = certify(AlgorithmConfig(tolerance=2), 10, 64)
    assert "it takes 29 of the 62 honest agents (2 may lie) to err, each" in lying.statement()
    # one honest vote left to take (M + f = 29, f = 28), and M = N: still the sentence of a bound
    one = certify(AlgorithmConfig(), 10, 64, liars=28)
    assert (one.honest_votes, one.failure) == (1, certified_failure(64, 29, one.local_error, 28))
    assert one.statement().startswith(
        "The best arm is voted out by error with probability at most 1: it takes 1 of the 36 "
        "honest agents (28 may lie) to err, each with probability at most 0.371."
    )
    every = certify(AlgorithmConfig(), 10, 29)  # p = 0.37^29
    assert every.statement().startswith(
        "The best arm is voted out by error with probability at most 3.04e-13: it takes 29 of "
        "the 29 agents to err, each"
    )


def test_the_statement_when_nothing_or_everything_can_be_voted_out() -> None:
    # M + f = 29 + 2 with 30 agents: at most 28 honest, 29 honest votes needed
    few = certify(AlgorithmConfig(tolerance=2), 10, 30)
    assert few.failure == 0.0 and few.certifies
    assert few.statement() == (
        "The best arm cannot be voted out by error: it takes 29 honest votes and at most 28 of "
        "the 30 agents are honest."
    )
    assert certify(AlgorithmConfig(), 10, 1).statement() == (
        "The best arm cannot be voted out by error: it takes 29 honest votes and there is only 1 "
        "agent."
    )
    assert certify(AlgorithmConfig(), 10, 20).statement().endswith("there are only 20 agents.")
    # the liars are the threshold: nothing below 1; per epoch under DSER4
    alone = certify(AlgorithmConfig(), 10, 64, liars=29)
    assert alone.honest_votes == 0 and alone.failure == 1.0
    assert alone.statement() == (
        "The best arm can be voted out by the 29 lying agents alone: the threshold is 29. "
        "Nothing below 1 is certified."
    )
    dser4 = certify(AlgorithmConfig(subroutine="ser4", phi=1e-4), 10, 64, liars=30)
    assert dser4.per_epoch and dser4.statement().startswith(
        "In each epoch, the best arm can be voted out by the 30 lying agents alone"
    )
    assert certify(AlgorithmConfig(), 10, 64).honest_votes == 29
    assert not certify(AlgorithmConfig(), 10, 64).per_epoch


def test_the_statements_of_the_baselines_and_of_drift() -> None:
    # each of 64 agents at delta / 64: p = (pi^2 / 24) 0.05 / 64, and 1 - (1 - p)^64
    alone = certify(AlgorithmConfig(algorithm="independent"), 10, 64)
    assert (alone.kind, alone.algorithm, alone.delta, alone.agents) == (
        "independent",
        "independent",
        0.05,
        64,
    )
    assert alone.local_error == pytest.approx(math.pi**2 / 24 * 0.05 / 64)
    assert alone.statement() == (
        "Each of the 64 agents identifies alone; the chance that any of them keeps an arm that is "
        "not epsilon-optimal is at most 0.0204 (each at most 0.000322)."
    )
    central = certify(AlgorithmConfig(algorithm="central"), 10, 64)
    assert (central.kind, central.algorithm, central.delta) == ("central", "central", 0.05)
    assert central.failure == central.local_error == pytest.approx(math.pi**2 / 24 * 0.05)
    assert central.statement() == (
        "One run on every reward keeps an arm that is not epsilon-optimal with probability at "
        "most 0.0206."
    )
    assert central.certifies and central.warning() is None
    drift = certify(AlgorithmConfig(), 10, 64, drifting=True)
    assert (drift.kind, drift.algorithm, drift.failure, drift.delta) == ("drift", "de", 1.0, 0.05)
    assert drift.statement() == (
        "Nothing below 1 is certified: the rewards drift, and the local confidence bounds hold "
        "for fixed means only."
    )
    assert drift.warning() == (
        "certified failure 1 is above delta = 0.05 with 64 agents: nothing certifies it (the "
        "rewards drift)"
    )
    assert certify(AlgorithmConfig(), 10, 1, drifting=True).warning() == (
        "certified failure 1 is above delta = 0.05 with 1 agent: nothing certifies it (the "
        "rewards drift)"
    )


@pytest.mark.parametrize("subroutine", ["kl-lucb", "me", "ser3"])
def test_one_independent_agent_is_the_central_run(subroutine: str) -> None:
    """N = 1: the one agent runs at delta, as the central run does, with the same bound. A
    subroutine whose constant is 1 (kl-lucb, me) certifies delta exactly; the union's rounding
    up once put it at 0.0501 > 0.05, with a warning that blamed drifting rewards."""
    alone = certify(AlgorithmConfig(algorithm="independent", subroutine=subroutine), 10, 1)
    central = certify(AlgorithmConfig(algorithm="central", subroutine=subroutine), 10, 1)
    assert alone.failure == central.failure == LOCAL_ERROR_FACTORS[subroutine] * 0.05
    assert alone.certifies and alone.warning() is None


# -- the warning's options ------------------------------------------------------------------------
def test_the_warning_leaves_out_the_fixes_that_do_not_exist() -> None:
    """A threshold above N is no fix, and neither is a number of agents below M: the warning
    names only the changes that certify, joined with "or"."""
    # p = 0.99 with 5 agents at 1e-9: no threshold up to 5 certifies, nor any number of agents
    strong = Certificate(
        "votes", certified_failure(5, 5, 0.99), 5, 1e-9, "de", local_error=0.99, threshold=5
    )
    warning = strong.warning()
    assert warning is not None
    fix = remedy(5, 5, 0.99, 1e-9, 0)
    assert fix.threshold == 6 and fix.agents is None
    assert warning == (
        f"certified failure {upper(strong.failure)} is above delta = 1e-09 with 5 agents: agents "
        f"that err with probability at most {lower(fix.local_error)} each (now 0.99) would "
        "certify it"
    )
    # the threshold is a fix, the agents are not: two options, "or" between them
    two = Certificate(
        "votes", certified_failure(40, 12, 0.5), 40, 1e-6, "de", local_error=0.5, threshold=12
    )
    fix = remedy(40, 12, 0.5, 1e-6, 0)
    assert fix.agents is None and fix.threshold <= 40
    assert two.warning() == (
        f"certified failure {upper(two.failure)} is above delta = 1e-06 with 40 agents: a "
        f"threshold of {fix.threshold} votes or agents that err with probability at most "
        f"{lower(fix.local_error)} each (now 0.5) would certify it"
    )


def test_a_threshold_of_n_is_a_fix() -> None:
    """P(Bin(5, 1/2) >= 5) = 1/32 <= 0.05 < P(Bin(5, 1/2) >= 4) = 6/32: the smallest threshold
    that certifies is N itself, and the warning names it."""
    cert = Certificate(
        "votes", certified_failure(5, 3, 0.5), 5, 0.05, "de", local_error=0.5, threshold=3
    )
    assert smallest_threshold(5, 0.5, 0.05) == 5
    warning = cert.warning()
    assert warning is not None and warning.startswith(
        "certified failure 0.501 is above delta = 0.05 with 5 agents: a threshold of 5 votes or "
    )


def test_each_search_certifies_at_equality() -> None:
    """A bound equal to delta certifies (<=, not <): each search, given delta = the bound of a
    configuration, returns that configuration's value."""
    delta = certified_failure(40, 12, 0.3)
    assert smallest_threshold(40, 0.3, delta) == 12
    assert largest_agents(12, 0.3, delta) == 40
    assert largest_local_error(40, 12, certified_failure(40, 12, 0.25)) == 0.25
    # a threshold no agent set reaches certifies even delta = 0, at any local error
    assert largest_local_error(5, 6, 0.0) == 1.0


@pytest.mark.parametrize(
    ("threshold", "p", "delta"), [(5, 0.2, 0.05), (3, 0.01, 1e-4), (12, 0.3, 1e-3)]
)
def test_largest_agents_is_the_largest_by_a_scan(threshold: int, p: float, delta: float) -> None:
    """The doubling and bisection search against a scan of every N (the tail grows with N)."""
    scan = [n for n in range(threshold, 3000) if certified_failure(n, threshold, p) <= delta]
    found = largest_agents(threshold, p, delta)
    assert type(found) is int and found == max(scan)


def test_remedy_with_liars_is_each_search_with_liars() -> None:
    fix = remedy(64, 31, 0.37, 0.05, 2)
    assert fix == Remedy(
        threshold=smallest_threshold(64, 0.37, 0.05, 2),
        local_error=largest_local_error(64, 31, 0.05, 2),
        agents=largest_agents(31, 0.37, 0.05, 2),
    )
    assert fix != remedy(64, 31, 0.37, 0.05, 0)


# -- certify's inputs -----------------------------------------------------------------------------
def test_certify_takes_the_liars_it_is_given_or_the_tolerance() -> None:
    tolerant = AlgorithmConfig(tolerance=2)
    assert certify(tolerant, 10, 64).liars == 2
    assert certify(tolerant, 10, 64, liars=0).liars == 0
    assert certify(tolerant, 10, 64, liars=0).failure == certified_failure(
        64, 31, local_error(tolerant, 10, 64)
    )
    assert certify(tolerant, 10, 64).threshold == 31 == tolerant.threshold(10)


def test_certify_with_no_agent_yet() -> None:
    """Voting algorithms certify before anyone enrolls (nothing can leave: failure 0); the
    baselines need an agent."""
    empty = certify(AlgorithmConfig(), 10, 0)
    assert (empty.failure, empty.agents, empty.certifies) == (0.0, 0, True)
    assert empty.local_error == local_error(AlgorithmConfig(), 10, 1)
    with pytest.raises(ParameterError, match="agents=0 is invalid: must be >= 1"):
        certify(AlgorithmConfig(algorithm="independent"), 10, 0)
    with pytest.raises(ParameterError, match="agents=-1 is invalid: must be >= 0"):
        certify(AlgorithmConfig(), 10, -1)
    assert certify(AlgorithmConfig(algorithm="central"), 10, 1).agents == 1


def test_the_independent_bound_is_the_union_over_agents_rounded_up() -> None:
    """1 - (1 - p)^N in exact arithmetic, never below it and at most 2e-8 above it (N p, the
    union, at N = 1, where it is exact)."""
    algo = AlgorithmConfig(algorithm="independent", delta=0.5)
    for n in (1, 2, 64, 10_000):
        p = local_error(algo, 10, n)
        exact = 1 - (1 - Fraction(p)) ** n
        value = certify(algo, 10, n).failure
        assert exact <= Fraction(value) <= exact * Fraction(1 + 2e-8)


def test_certify_simulation_passes_its_attackers_and_its_drift() -> None:
    environment = Environment((0.9, 0.5, 0.1))
    config = SimulationConfig(environment, AlgorithmConfig(tolerance=1), n_agents=40, attackers=1)
    cert = certify_simulation(config)
    assert cert == certify(AlgorithmConfig(tolerance=1), 3, 40, liars=1)
    assert cert.liars == 1 and cert.kind == "votes"
    honest = SimulationConfig(environment, AlgorithmConfig(tolerance=1), n_agents=40)
    assert certify_simulation(honest).liars == 0  # its attackers, not the tolerance
    drifting = SimulationConfig(
        Environment((0.9, 0.5, 0.1), drift=(0.0, 1e-5, 0.0)), AlgorithmConfig(), n_agents=40
    )
    assert certify_simulation(drifting).kind == "drift"


@pytest.mark.parametrize(
    ("x", "up", "down"), [(10.0, "10", "10"), (120.0, "120", "120"), (10.05, "10.1", "10")]
)
def test_upper_and_lower_print_numbers_above_ten_without_trailing_zeros(
    x: float, up: str, down: str
) -> None:
    """e0 and e^e0 can be 10 or more: three digits, no trailing zero or point."""
    assert (upper(x), lower(x)) == (up, down)
