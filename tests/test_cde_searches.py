"""CDE's searches against scans (common/cde.py): the threshold, the knee, the fewest agents, the
strongest privacy, what a running experiment needs; and the report's arithmetic at its edges.

The searches only look for a good threshold (whatever they return, the bound is computed exactly
for it), but what they promise is checked here against a plain scan of every candidate, on many
small configurations with and without liars, so that a search that misses the smallest
certifying threshold, or the fewest agents, fails.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from common import cde
from common.errors import ParameterError

DELTA = 0.05
# (K, eta, P, f): a grid small enough to scan, with liars, close and far from certifying
CONFIGS = [
    (k, eta, privacy, liars)
    for k, eta, privacy, liars in itertools.product(
        (2, 3, 5), (0.1, 0.25), (0.6, 0.75, 0.9), (0, 1, 3)
    )
    if privacy > 1 / k
]
AGENTS = (4, 9, 17, 30, 55, 90)


def scanned(agents: int, eta: float, privacy: float, k: int, liars: int) -> int | None:
    """The smallest threshold whose bound is at most delta, by trying every M from f + 1 to N."""
    return next(
        (
            m
            for m in range(liars + 1, max(agents, liars + 1) + 1)
            if cde.failure(agents, m, eta, privacy, k, liars).total <= DELTA
        ),
        None,
    )


@pytest.mark.parametrize(("k", "eta", "privacy", "liars"), CONFIGS)
def test_the_threshold_is_the_smallest_a_scan_finds(
    k: int, eta: float, privacy: float, liars: int
) -> None:
    """For every N of the grid: `certifying_threshold` is the scan's smallest certifying M (None
    when none certifies), `certifies` says whether there is one, and `threshold_for` takes it,
    else the M of the smallest uncapped bound among f + 1 .. the knee where no answer reaches
    1/2."""
    for agents in AGENTS:
        if agents <= liars:
            continue
        expected = scanned(agents, eta, privacy, k, liars)
        found = cde.certifying_threshold(agents, DELTA, eta, privacy, k, liars)
        assert found == expected, (agents, found, expected)
        assert cde.certifies(agents, DELTA, eta, privacy, k, liars) == (expected is not None)
        chosen = cde.threshold_for(agents, DELTA, eta, privacy, k, liars)
        if expected is not None:
            assert chosen == expected
            continue
        top = cde._knee(agents, 0.5, eta, privacy, k, liars)

        def uncapped(m: int, agents: int = agents) -> float:
            wrong = cde.wrong_arm(m, eta, privacy, k, liars)[0]
            return wrong + cde.no_answer(agents - liars, m, eta, privacy, k, liars)

        best = min(range(liars + 1, top + 1), key=lambda m: (uncapped(m), m))
        assert uncapped(chosen) == uncapped(best), (agents, chosen, best)


@pytest.mark.parametrize("liars", [0, 2])
def test_the_knee_is_the_largest_threshold_below_a_level(liars: int) -> None:
    """`_knee` is the largest M >= f + 1 whose no-answer term is at most the level, by a scan;
    f + 1 when even that one is above it; at level 0 it is the last M before the n honest
    reports can all fall short, the largest M with n > K (M - 1)."""
    k, eta, privacy = 4, 0.1, 0.6
    for agents in (liars + 1, liars + 2, 12, 40, 100):
        honest = agents - liars
        for level in (0.0, 1e-4, 0.01, 0.3, 0.99):
            fine = [
                m
                for m in range(liars + 1, honest + 1)
                if cde.no_answer(honest, m, eta, privacy, k, liars) <= level
            ]
            expected = max(fine) if fine else liars + 1
            assert cde._knee(agents, level, eta, privacy, k, liars) == expected, (agents, level)
        assert cde._knee(agents, 0.0, eta, privacy, k, liars) == max(
            liars + 1, (honest - 1) // k + 1
        )
    assert cde._knee(liars, 0.5, eta, privacy, k, liars) == liars + 1  # no honest agent


def test_the_knee_counts_the_room_the_liars_leave_on_two_arms() -> None:
    """With two arms the liars' f reports matter to the knee: the n honest reports that do not
    reach M on the one good arm leave at least n - (M - 1) on the bad one, which is accepted
    first if they reach M - f. So the knee, by a scan, is above the one that ignores the liars'
    room (found at these points)."""
    k, eta, privacy = 2, 0.1, 0.6
    for liars, agents in ((3, 11), (3, 23), (5, 25), (5, 34)):
        honest = agents - liars
        fine = [
            m
            for m in range(liars + 1, honest + 1)
            if cde.no_answer(honest, m, eta, privacy, k, liars) <= 0.3
        ]
        blind = [
            m
            for m in range(liars + 1, honest + 1)
            if cde.no_answer(honest, m, eta, privacy, k) <= 0.3
        ]
        assert cde._knee(agents, 0.3, eta, privacy, k, liars) == max(fine) == max(blind) + 1


def test_honest_reports_beyond_the_room_force_an_answer_or_a_wrong_one() -> None:
    """K = 2, f = 5 liars, 20 honest reports, M = 11: with one good arm short of 11 the bad arm
    has at least 10 honest reports, and 6 (M - f) were enough for it to win the race, which the
    wrong-arm term counts. So the no-answer term is the two-good-arms one alone, not the larger
    one-good-arm one that a count without the liars' room would take."""
    eta, privacy = 0.1, 0.6
    both = cde.report_shares(eta, privacy, 2).optimal(2)
    term = cde.failure(25, 11, eta, privacy, 2, liars=5).no_answer
    assert term == cde.none_reach(20, 11, both, 2)
    assert term < cde.none_reach(20, 11, cde.report_shares(eta, privacy, 2).optimal(1), 1)


def test_the_fewest_agents_are_found_by_a_scan() -> None:
    """`smallest_agents` is the first N at which some threshold certifies (then every larger N
    does), and `agents_for` the first at which a given one does, with and without liars; both
    say None when the limit comes first."""
    for k, eta, privacy, liars in ((2, 0.1, 0.75, 0), (3, 0.1, 0.75, 2), (5, 0.25, 0.9, 1)):
        fewest = cde.smallest_agents(DELTA, eta, privacy, k, liars)
        assert fewest is not None and fewest > liars
        assert scanned(fewest, eta, privacy, k, liars) is not None
        assert all(scanned(n, eta, privacy, k, liars) is None for n in range(liars + 1, fewest))
        assert cde.smallest_agents(DELTA, eta, privacy, k, liars, limit=fewest - 1) is None
        m = cde.threshold_for(fewest, DELTA, eta, privacy, k, liars)
        needed = cde.agents_for(m, DELTA, eta, privacy, k, liars)
        assert needed is not None and needed <= fewest
        assert cde.failure(needed, m, eta, privacy, k, liars).total <= DELTA
        assert cde.failure(needed - 1, m, eta, privacy, k, liars).total > DELTA
        assert cde.agents_for(m, DELTA, eta, privacy, k, liars, limit=needed - 1) is None
    # with liars the threshold itself may be reached by fewer agents than M (f + 1 at least)
    assert cde.agents_for(3, DELTA, 0.1, 0.75, 2, liars=2) is None  # M = f + 1: liars alone


def test_the_strongest_privacy_is_the_first_thousandth_that_certifies() -> None:
    """`strongest_privacy` returns P in thousandths: it certifies and the thousandth below does
    not, with and without liars; with a million agents and two arms the first thousandth above
    1/2 certifies already; None when not even 0.999 does."""
    for agents, k, liars in ((64, 2, 0), (200, 3, 2), (1_000, 5, 1)):
        strongest = cde.strongest_privacy(agents, DELTA, 0.1, k, liars)
        assert strongest is not None
        assert cde.certifies(agents, DELTA, 0.1, strongest, k, liars)
        below = round(strongest - 0.001, 3)
        assert below <= 1 / k or not cde.certifies(agents, DELTA, 0.1, below, k, liars)
    assert cde.strongest_privacy(3, DELTA, 0.1, 10) is None


@pytest.mark.parametrize(("k", "first"), [(2, 0.501), (3, 0.334), (7, 0.143), (10, 0.101)])
def test_the_strongest_privacy_starts_at_the_first_thousandth_above_a_uniform_guess(
    k: int, first: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search's range: when every P certifies, the answer is the first thousandth above 1/K
    (never 1/K itself, which `check_privacy` refuses); when only 0.999 does, 0.999."""
    asked: list[float] = []

    def every(agents: int, delta: float, eta: float, privacy: float, *rest: int) -> bool:
        cde.check_privacy(privacy, k)
        asked.append(privacy)
        return True

    monkeypatch.setattr(cde, "certifies", every)
    assert cde.strongest_privacy(64, DELTA, 0.1, k) == first
    assert min(asked) == first
    monkeypatch.setattr(cde, "certifies", lambda *args: args[3] >= 0.999)
    assert cde.strongest_privacy(64, DELTA, 0.1, k) == 0.999


def test_the_first_certifying_search_against_a_scan() -> None:
    """`first_certifying` finds the first N in [start, limit] at which a test that stays true
    turns true (doubling, then bisection), None past the limit."""
    for start, first, limit in ((1, 1, 10), (1, 37, 1_000), (5, 6, 7), (3, 500, 499), (2, 64, 64)):
        found = cde.first_certifying(start, limit, lambda n, first=first: n >= first)
        assert found == (first if first <= limit else None)


def test_failure_and_its_terms_at_the_edges() -> None:
    """`failure` carries its threshold, caps the wrong-arm term at 1 (the searches compare the
    uncapped one), and with no honest agent no answer is certain."""
    bound = cde.failure(100, 1, 0.1, 0.3, 10)
    assert bound.threshold == 1 and cde.wrong_arm(1, 0.1, 0.3, 10)[0] > 1.0
    assert bound.wrong_arm == 1.0 and bound.total == 1.0
    assert cde.failure(0, 1, 0.1, 0.3, 10).no_answer == 1.0
    assert cde.failure(3, 4, 0.1, 0.3, 10, liars=3).no_answer == 1.0
    assert cde.failure(100, 5, 0.1, 0.3, 10, liars=2).threshold == 5


def test_the_hopeless_configurations() -> None:
    """`hopeless`: the best arm the local answer no more often than a bad one (eta >= (K - 1) / K,
    the same for every number of eps-optimal arms), and a race lost at least half the time: more
    than delta unless K = 2 and delta >= 1/2."""
    for k in (2, 3, 10):
        edge = (k - 1) / k
        assert cde.hopeless(DELTA, edge + 0.01, 0.7, k) and not cde.hopeless(
            DELTA, edge - 0.01, 0.7, k
        )
        shares = cde.report_shares(edge + 0.01, 0.7, k)
        assert all(shares.optimal(s) <= s * shares.bad for s in range(1, k))
    assert not cde.hopeless(0.6, 0.6, 0.7, 2) and cde.hopeless(0.4, 0.6, 0.7, 2)
    assert cde.hopeless(0.9, 0.95, 0.5, 3)  # (K - 1) / 2 = 1: any delta below 1


# -- the report ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("privacy", "k"), [(0.5, 2), (0.1, 10), (1.0, 4), (1.2, 3), (True, 2)])
def test_privacy_outside_the_open_interval_is_refused(privacy: float, k: int) -> None:
    with pytest.raises(ParameterError) as refused:
        cde.check_privacy(privacy, k)
    assert str(refused.value) == (
        f"privacy={privacy!r} is invalid: must be in (1/K, 1) = ({1.0 / k:.4g}, 1) with {k} "
        "arms: 1/K is a uniform guess, 1 is no privacy"
    )


def test_privacy_inside_the_interval_is_kept_as_a_float() -> None:
    assert cde.check_privacy(0.51, 2) == 0.51 and cde.check_privacy(0.999, 10) == 0.999
    assert isinstance(cde.check_privacy(0.6, 2), float)


def test_the_privacy_sentence_whole() -> None:
    """What the services print beside e0 (they do not know the means): e0 and e^e0 rounded up,
    the uniform prior's hit rate with one and with two eps-optimal arms, the caveat."""
    assert cde.privacy_sentence(0.6, 10) == (
        "e0 = 2.61: whatever it believed before, any adversary's odds about this agent's answer, "
        "hence its rewards, are multiplied by at most e^e0 = 13.5 by its report (local "
        "differential privacy). Hit rate under a uniform prior over which arm is best: at most "
        "0.6 when one arm alone is eps-optimal (with two, 0.772). Another prior gives another "
        "hit rate (a prior of 0.5 on one arm hits 0.5 without any report), its odds still "
        "multiplied by at most e^e0 (docs/CDE.md, section 2)."
    )
    assert "e0 = 1.39" in cde.privacy_sentence(0.8, 2)
    assert "at most 0.8 when one arm alone is eps-optimal (with two, 1)." in cde.privacy_sentence(
        0.8, 2
    )


def test_the_bounds_under_a_prior_at_their_edges() -> None:
    """A certain prior stays certain (1, not more); every arm eps-optimal: a hit for sure; the
    hit rate is the posterior bound of a blind guess's s / K."""
    assert cde.posterior_bound(1.0, 0.6, 10) == 1.0 and cde.posterior_bound(0.0, 0.6, 10) == 0.0
    assert cde.posterior_bound(1.2, 0.6, 10) == 1.0  # more than sure is sure
    odds = cde.report_odds(0.6, 10)
    assert cde.posterior_bound(0.25, 0.6, 10) == pytest.approx(0.25 * odds / (0.25 * odds + 0.75))
    assert cde.hit_rate_uniform_prior(0.6, 10, 10) == 1.0
    assert cde.hit_rate_uniform_prior(0.6, 10, 12) == 1.0
    assert cde.hit_rate_uniform_prior(0.6, 10, 9) == pytest.approx(
        cde.posterior_bound(0.9, 0.6, 10)
    )
    assert cde.hit_rate_uniform_prior(0.6, 10) == pytest.approx(0.6)


def test_one_randomized_report_keeps_its_answer_with_probability_p() -> None:
    """`randomize` with a fixed stream: the answer when the first uniform draw is below p, else
    another arm, never the answer, drawn uniformly among the K - 1 others."""
    p, _ = cde.report_probabilities(0.6, 4)
    rng = np.random.default_rng(1)
    draws = [cde.randomize(2, 4, 0.6, rng) for _ in range(4_000)]
    kept = np.mean([d == 2 for d in draws])
    assert abs(kept - p) < 0.03
    others = [d for d in draws if d != 2]
    assert set(others) == {0, 1, 3}
    assert math.isclose(cde.report_epsilon(0.6, 4), math.log(0.6 * 3 / 0.4))


def test_a_faithful_report_certifies_with_one_report() -> None:
    """Local runs that almost never err (eta = 0.001) and a report that almost never lies
    (P = 0.999): the first report is the answer (M = 1, or f + 1 with f liars), and one agent
    is enough: the searches start where they must, at f + 1."""
    assert cde.certifying_threshold(10, DELTA, 0.001, 0.999, 2) == 1
    assert cde.certifying_threshold(10, DELTA, 0.001, 0.999, 2, 1) == 2
    assert cde.certifies(10, DELTA, 0.001, 0.999, 2) and cde.certifies(1, DELTA, 0.001, 0.999, 2)
    assert not cde.certifies(1, DELTA, 0.001, 0.999, 2, 1)  # one agent, and it may lie
    assert cde.smallest_agents(DELTA, 0.001, 0.999, 2) == 1
    # a liar, then three honest (two could split between the arms, K (M - 1) = 2)
    assert cde.smallest_agents(DELTA, 0.001, 0.999, 2, 1) == 4
    assert cde.threshold_for(1, DELTA, 0.001, 0.999, 2) == 1


def test_the_defaults_have_no_liars() -> None:
    """Without `liars`, the searches count none: the same answers as liars = 0."""
    for agents, k, privacy in ((30, 3, 0.75), (90, 5, 0.9)):
        args = (agents, DELTA, 0.1, privacy, k)
        assert cde.certifies(*args) == cde.certifies(*args, 0)
        assert cde.certifying_threshold(*args) == cde.certifying_threshold(*args, 0)
        assert cde.certifying_threshold(*args) != cde.certifying_threshold(*args, 1)


def test_a_race_lost_half_the_time_is_hopeless_only_below_one_half() -> None:
    """With two arms the race is lost at least half the time: hopeless for delta < 1/2, not at
    delta = 1/2 itself."""
    assert cde.hopeless(0.49, 0.6, 0.7, 2) and not cde.hopeless(0.5, 0.6, 0.7, 2)


def test_the_privacy_sentence_with_three_arms_names_the_hit_rate_with_two() -> None:
    from common.certificate import upper

    two = cde.hit_rate_uniform_prior(0.6, 3, 2)
    assert 0.6 < two < 1.0
    assert f"(with two, {upper(two)})" in cde.privacy_sentence(0.6, 3)
