"""CDE's report rule (common/votes.py): the pure `decide_report`, `reports_exhausted` (no answer
will come) and the `GlobalState.report` / `GlobalState.exhausted` that apply them.
coordinator/store/lua/report.lua is the same rule in Redis: tests/services/test_report_script.py replays
random sequences through both."""

from __future__ import annotations

import numpy as np
import pytest

from common.votes import (
    Elimination,
    GlobalState,
    ReportOutcome,
    decide_report,
    reports_exhausted,
)

R = ReportOutcome


# -- decide_report -----------------------------------------------------------------------------
def test_decide_report_counts_a_first_report_below_the_threshold() -> None:
    assert decide_report({0, 1, 2}, set(), 0, "a", threshold=2) is R.COUNTED
    assert decide_report({0, 1, 2}, {"b", "c"}, 1, "a", threshold=3) is R.COUNTED
    # the other reporters count only through this arm's count: many reports elsewhere do not
    assert decide_report({0, 1}, {"b", "c", "d", "e"}, 0, "a", threshold=2) is R.COUNTED


def test_decide_report_accepts_exactly_at_the_threshold() -> None:
    assert decide_report({0, 1, 2}, {"b", "c"}, 2, "a", threshold=3) is R.ACCEPTED
    assert decide_report({0, 1}, set(), 0, "a", threshold=1) is R.ACCEPTED
    # one report short: counted; M - 2 before it: counted
    assert decide_report({0, 1, 2}, {"b"}, 1, "a", threshold=3) is R.COUNTED
    assert decide_report({0, 1, 2}, set(), 0, "a", threshold=3) is R.COUNTED


def test_decide_report_one_report_per_agent_whatever_the_arm() -> None:
    # its report is in (on this arm or another): a duplicate, even one that would accept
    assert decide_report({0, 1, 2}, {"a"}, 0, "a", threshold=3) is R.DUPLICATE
    assert decide_report({0, 1, 2}, {"a", "b"}, 2, "a", threshold=3) is R.DUPLICATE


def test_decide_report_after_an_acceptance() -> None:
    # decided: a first report changes nothing, whatever its arm and count
    assert decide_report({1}, {"b", "c"}, 0, "a", threshold=2) is R.DECIDED
    assert decide_report({1}, {"b", "c"}, 2, "a", threshold=2) is R.DECIDED
    # a repeated report stays a duplicate once decided: its reply cannot time the acceptance
    assert decide_report({1}, {"a", "c"}, 2, "a", threshold=2) is R.DUPLICATE
    # two arms left is not decided
    assert decide_report({0, 1}, {"b"}, 0, "a", threshold=3) is R.COUNTED


def test_decide_report_is_pure() -> None:
    remaining, reporters = {0, 1, 2}, {"b", "c"}
    decide_report(remaining, reporters, 2, "a", threshold=3)
    assert remaining == {0, 1, 2} and reporters == {"b", "c"}


# -- reports_exhausted ---------------------------------------------------------------------------
def test_exhausted_when_no_arm_can_reach_the_threshold_with_the_agents_left() -> None:
    # M = 3, N = 6, two reports on each arm: no agent left, every arm at 2
    assert reports_exhausted({0, 1, 2}, {0: 2, 1: 2, 2: 2}, 6, 6, threshold=3)
    # one agent more: any arm can reach 3
    assert not reports_exhausted({0, 1, 2}, {0: 2, 1: 2, 2: 2}, 6, 7, threshold=3)


def test_exhausted_at_the_boundary() -> None:
    # count + free == M: reachable; M - 1: not
    assert not reports_exhausted({0, 1}, {0: 1, 1: 0}, 1, 3, threshold=3)
    assert reports_exhausted({0, 1}, {0: 1, 1: 0}, 1, 2, threshold=3)
    # one arm that can still reach it is enough
    assert not reports_exhausted({0, 1, 2}, {0: 0, 1: 0, 2: 3}, 3, 4, threshold=4)


def test_exhausted_needs_several_arms() -> None:
    # one arm left is an answer, not a tie; none left neither
    assert not reports_exhausted({1}, {1: 0}, 5, 5, threshold=3)
    assert not reports_exhausted(set(), {}, 5, 5, threshold=3)
    # exactly two arms, both short: exhausted
    assert reports_exhausted({0, 1}, {0: 1, 1: 1}, 2, 2, threshold=2)


def test_exhausted_reads_an_arm_without_a_count_as_having_none() -> None:
    """The coordinator's Redis holds no count for an arm nobody reported."""
    assert reports_exhausted({0, 1, 2}, {0: 1}, 2, 3, threshold=3)  # arms 1 and 2: 0 + 1
    assert not reports_exhausted({0, 1, 2}, {0: 1}, 2, 4, threshold=3)  # arm 0: 1 + 2
    assert reports_exhausted({0, 1}, {}, 0, 1, threshold=2)


def test_no_agent_left_counts_as_none_even_with_more_reports_than_agents() -> None:
    # N - reported below 0 (agents removed after they reported) is no agent, not fewer
    assert not reports_exhausted({0, 1}, {0: 2, 1: 1}, 4, 3, threshold=2)
    # every agent reported: each arm has only its count
    assert reports_exhausted({0, 1}, {0: 1, 1: 1}, 2, 2, threshold=2)
    assert not reports_exhausted({0, 1}, {0: 1, 1: 1}, 2, 3, threshold=2)


# -- GlobalState.report --------------------------------------------------------------------------
def test_reports_accept_the_first_arm_at_the_threshold_and_the_others_leave() -> None:
    state = GlobalState(4, threshold=3)
    assert state.report("a", 2, time=10) is R.COUNTED
    assert state.report("b", 0, time=11) is R.COUNTED
    assert state.report("c", 2, time=12) is R.COUNTED
    assert state.report("d", 3, time=13) is R.COUNTED
    assert (state.remaining, state.version, state.eliminations) == ({0, 1, 2, 3}, 0, [])
    assert state.report("e", 2, time=14) is R.ACCEPTED
    assert state.remaining == {2}
    assert state.version == 1
    # every other arm leaves at once, in index order, each with the reports it had
    assert state.eliminations == [
        Elimination(arm=0, votes=1, time=14, order=1, epoch=0),
        Elimination(arm=1, votes=0, time=14, order=2, epoch=0),
        Elimination(arm=3, votes=1, time=14, order=3, epoch=0),
    ]
    assert state.voters == {0: {"b"}, 1: set(), 2: {"a", "c", "e"}, 3: {"d"}}
    assert state.reporters == {"a", "b", "c", "d", "e"}
    assert (state.messages, state.ignored) == (5, 0)


def test_a_second_report_is_a_duplicate_that_changes_nothing() -> None:
    state = GlobalState(3, threshold=2)
    assert state.report("a", 1) is R.COUNTED
    for arm in (1, 0, 2):  # the same arm or another: still its one report
        assert state.report("a", arm) is R.DUPLICATE
    assert state.voters == {0: set(), 1: {"a"}, 2: set()}
    assert state.reporters == {"a"}
    assert (state.messages, state.ignored, state.version) == (4, 3, 0)
    assert state.remaining == {0, 1, 2}


def test_reports_after_the_answer_are_ignored() -> None:
    state = GlobalState(3, threshold=2)
    state.report("a", 0)
    assert state.report("b", 0) is R.ACCEPTED
    version, eliminations = state.version, list(state.eliminations)
    assert state.report("c", 1) is R.DECIDED  # a first report, too late
    assert state.report("c", 1) is R.DECIDED  # it was not recorded
    assert state.report("a", 2) is R.DUPLICATE  # a reporter's repeat stays a duplicate
    assert state.remaining == {0}
    assert state.voters == {0: {"a", "b"}, 1: set(), 2: set()}
    assert state.reporters == {"a", "b"}
    assert (state.version, state.eliminations) == (version, eliminations)
    assert (state.messages, state.ignored) == (5, 3)


def test_a_threshold_of_one_accepts_the_first_report() -> None:
    state = GlobalState(2, threshold=1)
    assert state.report("a", 1, time=3) is R.ACCEPTED
    assert state.remaining == {1}
    assert state.eliminations == [Elimination(0, 0, 3, 1, 0)]


def test_without_a_clock_the_eliminations_are_at_time_0() -> None:
    """The clock is the caller's (activations in the simulators); none given is 0."""
    reports = GlobalState(2, threshold=1)
    reports.report("a", 0)
    votes = GlobalState(3, threshold=1)
    votes.vote("a", 0)
    votes.vote_many("a", [1])
    assert [e.time for e in reports.eliminations + votes.eliminations] == [0, 0, 0]


def test_a_report_on_an_unknown_arm_is_refused_without_counting() -> None:
    state = GlobalState(3, threshold=2)
    for arm in (3, -1, 7):
        with pytest.raises(ValueError, match=rf"arm={arm} is invalid: must be in \[0, 2\]"):
            state.report("a", arm)
    assert (state.messages, state.ignored, state.reporters) == (0, 0, set())
    # the ends of the range are arms
    assert state.report("a", 0) is R.COUNTED
    assert state.report("b", 2) is R.COUNTED


def test_the_acceptance_keeps_the_epoch_and_moves_the_version_on() -> None:
    """A state that starts at another epoch and version (as the coordinator's counters may):
    the eliminations carry its epoch, and the version goes up by one, as report.lua's HINCRBY."""
    state = GlobalState(3, threshold=1, epoch=4, version=7)
    state.report("a", 1, time=2)
    assert [(e.arm, e.order, e.epoch) for e in state.eliminations] == [(0, 1, 4), (2, 2, 4)]
    assert state.version == 8


# -- GlobalState.exhausted -----------------------------------------------------------------------
def test_exhausted_follows_the_reports_and_the_agents() -> None:
    """M = 3, 3 arms: two reports on each arm leave none that 6 agents can bring to 3."""
    state = GlobalState(3, threshold=3)
    assert not state.exhausted(6)
    for agent, arm in zip("abcdef", [0, 1, 2, 0, 1, 2], strict=True):
        assert not state.exhausted(6)
        assert state.report(agent, arm) is R.COUNTED
    assert state.exhausted(6)
    assert not state.exhausted(7)  # one agent more could bring any arm to 3
    assert state.report("g", 1) is R.ACCEPTED
    assert not state.exhausted(6)  # answered
    assert not state.exhausted(7)


def test_exhausted_counts_the_reporters_of_every_arm() -> None:
    """The agents left are N less every reporter, whichever arm it reported."""
    state = GlobalState(3, threshold=3)
    state.report("a", 0)
    state.report("b", 0)
    state.report("c", 1)
    # N = 4: one agent left; arm 0 can still reach 3
    assert not state.exhausted(4)
    state.report("d", 2)
    assert state.exhausted(4)  # arm 0 at 2 with no agent left


def reachable_answer(state: GlobalState, n_agents: int) -> bool:
    """Brute force: some arm is accepted if every agent that has not reported reports it."""
    for arm in sorted(state.remaining):
        trial = GlobalState(state.n_arms, state.threshold)
        trial.remaining, trial.reporters = set(state.remaining), set(state.reporters)
        trial.voters = {a: set(v) for a, v in state.voters.items()}
        outcomes = [trial.report(f"free-{n}", arm) for n in range(n_agents - len(state.reporters))]
        if R.ACCEPTED in outcomes:
            return True
    return False


# -- GlobalState follows decide_report on random sequences ---------------------------------------
SEEDS = range(40)


def random_reports(seed: int) -> tuple[int, int, int, list[tuple[str, int]]]:
    """(arms, threshold, agents, (agent, arm) reports) of one seed: repeats, and arms of
    unequal popularity, so that some sequences accept an arm and others run out of agents."""
    rng = np.random.default_rng(seed)
    n_arms = int(rng.integers(2, 6))
    threshold = int(rng.integers(1, 6))
    n_agents = int(rng.integers(threshold, 3 * threshold + 2))
    weights = rng.dirichlet(np.ones(n_arms))
    sequence = [
        (f"agent-{int(rng.integers(n_agents))}", int(rng.choice(n_arms, p=weights)))
        for _ in range(int(rng.integers(5, 4 * n_agents + 6)))
    ]
    return n_arms, threshold, n_agents, sequence


@pytest.mark.parametrize("seed", SEEDS)
def test_state_follows_the_pure_rule_on_random_sequences(seed: int) -> None:
    """Each outcome is decide_report's, the counters and sets move as it says, and `exhausted`
    holds exactly when no completion by the agents that have not reported can accept an arm."""
    n_arms, threshold, n_agents, sequence = random_reports(seed)
    state = GlobalState(n_arms, threshold)
    ignored = 0
    for step, (agent, arm) in enumerate(sequence):
        remaining, reporters = frozenset(state.remaining), frozenset(state.reporters)
        count = len(state.voters[arm])
        expected = decide_report(remaining, reporters, count, agent, threshold)

        assert state.report(agent, arm, time=step) is expected

        if expected in (R.DUPLICATE, R.DECIDED):
            ignored += 1
            assert state.reporters == reporters and len(state.voters[arm]) == count
        else:
            assert state.reporters == reporters | {agent}
            assert len(state.voters[arm]) == count + 1
        if expected is R.ACCEPTED:
            assert state.remaining == {arm}
            assert [e.arm for e in state.eliminations] == sorted(remaining - {arm})
            assert all(e.time == step for e in state.eliminations)
        else:
            assert state.remaining == remaining
        assert (state.messages, state.ignored) == (step + 1, ignored)
        assert state.version == (len(state.remaining) == 1)
        assert sum(len(v) for v in state.voters.values()) == len(state.reporters) <= n_agents
        assert state.exhausted(n_agents) == (
            len(state.remaining) > 1 and not reachable_answer(state, n_agents)
        )


def test_the_random_sequences_reach_every_outcome_and_exhaustion() -> None:
    """The sequences above are not vacuous: together they give every outcome, and some end
    accepted, others exhausted, others still open."""
    outcomes, ends = set(), set()
    for seed in SEEDS:
        n_arms, threshold, n_agents, sequence = random_reports(seed)
        state = GlobalState(n_arms, threshold)
        outcomes |= {state.report(agent, arm) for agent, arm in sequence}
        ends.add(
            "accepted"
            if len(state.remaining) == 1
            else "exhausted"
            if state.exhausted(n_agents)
            else "open"
        )
    assert outcomes == set(R)
    assert ends == {"accepted", "exhausted", "open"}
