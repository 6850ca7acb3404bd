"""The global vote rule: the pure `decide_vote` and the `GlobalState` that applies it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from common.votes import (
    GlobalState,
    VoteOutcome,
    decide_vote,
    is_tied,
    reachable_votes,
    tie_certificate,
)

V = VoteOutcome


# -- decide_vote -------------------------------------------------------------------------------
def test_decide_vote_counts_a_new_voter() -> None:
    assert decide_vote({0, 1, 2}, set(), "a", 1, threshold=3) is V.COUNTED
    assert decide_vote({0, 1, 2}, {"b"}, "a", 1, threshold=3) is V.COUNTED


def test_decide_vote_eliminates_at_the_threshold() -> None:
    assert decide_vote({0, 1, 2}, {"b", "c"}, "a", 1, threshold=3) is V.ELIMINATED
    assert decide_vote({0, 1}, set(), "a", 0, threshold=1) is V.ELIMINATED


def test_decide_vote_ignores_a_duplicate() -> None:
    # even when the duplicate would have reached the threshold
    assert decide_vote({0, 1, 2}, {"a", "b"}, "a", 1, threshold=3) is V.DUPLICATE


def test_decide_vote_never_removes_the_last_arm() -> None:
    # identified: a vote against the last arm is ignored, whatever its count
    assert decide_vote({1}, {"b", "c"}, "a", 1, threshold=3) is V.LAST_ARM
    assert decide_vote({1}, set(), "a", 1, threshold=3) is V.LAST_ARM
    assert decide_vote({1}, {"a"}, "a", 1, threshold=3) is V.DUPLICATE  # its vote is in
    assert decide_vote({1, 2}, {"b"}, "a", 1, threshold=2) is V.ELIMINATED


def test_decide_vote_on_an_arm_already_out() -> None:
    assert decide_vote({0, 2}, {"b", "c", "d"}, "a", 1, threshold=3) is V.ARM_OUT
    # a repeated vote is a duplicate, arm out or not: its reply cannot time the elimination
    assert decide_vote({0, 2}, {"a", "c", "d"}, "a", 1, threshold=3) is V.DUPLICATE


def test_decide_vote_is_pure() -> None:
    remaining, voters = {0, 1, 2}, {"b", "c"}
    decide_vote(remaining, voters, "a", 1, threshold=3)
    assert remaining == {0, 1, 2}
    assert voters == {"b", "c"}


# -- GlobalState -------------------------------------------------------------------------------
def test_state_starts_with_every_arm() -> None:
    state = GlobalState(5, threshold=3)
    assert state.remaining == {0, 1, 2, 3, 4}
    assert all(state.votes_against(a) == 0 for a in range(5))
    assert (state.version, state.epoch, state.messages, state.ignored) == (0, 0, 0, 0)


def test_state_eliminates_at_the_threshold_and_bumps_the_version() -> None:
    state = GlobalState(4, threshold=3)
    assert state.vote("a", 2, time=10) is V.COUNTED
    assert state.vote("b", 2, time=11) is V.COUNTED
    assert state.remaining == {0, 1, 2, 3}
    assert state.version == 0
    assert state.vote("c", 2, time=12) is V.ELIMINATED
    assert state.remaining == {0, 1, 3}
    assert state.version == 1
    assert state.votes_against(2) == 3
    (elim,) = state.eliminations
    assert (elim.arm, elim.votes, elim.time, elim.order) == (2, 3, 12, 1)
    assert state.vote("a", 0, time=13) is V.COUNTED
    assert state.version == 1  # a counted vote does not change the set
    assert state.messages == 4
    assert state.ignored == 0


def test_state_ignores_duplicate_votes_but_counts_the_message() -> None:
    state = GlobalState(3, threshold=2)
    state.vote("a", 1)
    for _ in range(5):
        assert state.vote("a", 1) is V.DUPLICATE
    assert state.remaining == {0, 1, 2}
    assert state.votes_against(1) == 1
    assert state.messages == 6
    assert state.ignored == 5
    assert state.version == 0


def test_state_never_removes_the_last_arm() -> None:
    state = GlobalState(2, threshold=2)
    state.vote_many("a", [0])
    assert state.vote("b", 0) is V.ELIMINATED
    assert state.remaining == {1}
    outcomes = [state.vote(agent, 1) for agent in "abcdef"]
    assert all(o is V.LAST_ARM for o in outcomes)
    assert state.remaining == {1} and state.voters[1] == set() and state.ignored == 6
    assert state.version == 1
    assert state.fewest_votes_arm() == 1


def test_state_late_votes_are_messages_that_change_nothing() -> None:
    state = GlobalState(3, threshold=2)
    state.vote("a", 0)
    state.vote("b", 0)
    version, voters = state.version, set(state.voters[0])
    assert state.vote("c", 0) is V.ARM_OUT
    assert state.vote("a", 0) is V.DUPLICATE
    assert state.voters[0] == voters
    assert state.version == version
    assert state.messages == 4
    assert state.ignored == 2
    assert len(state.eliminations) == 1


def test_state_rejects_an_unknown_arm_without_counting_it() -> None:
    state = GlobalState(3, threshold=2)
    with pytest.raises(ValueError, match=r"arm=3 .*\[0, 2\]"):  # the valid range is stated
        state.vote("a", 3)
    with pytest.raises(ValueError, match=r"arm=-1 .*\[0, 2\]"):
        state.vote("a", -1)
    assert state.messages == 0


def test_state_reset_starts_a_new_epoch() -> None:
    state = GlobalState(3, threshold=2)
    state.vote_many("a", [0, 1])
    state.vote("b", 0)
    assert state.remaining == {1, 2}
    version = state.version
    state.reset()
    assert state.epoch == 1
    assert state.version == version + 1
    assert state.remaining == {0, 1, 2}
    assert all(state.votes_against(a) == 0 for a in range(3))
    # the same agents may vote again in the new epoch
    assert state.vote("a", 0) is V.COUNTED
    assert state.vote("b", 0) is V.ELIMINATED
    assert state.messages == 5  # messages are a total over epochs


def test_elimination_order_restarts_with_the_epoch() -> None:
    state = GlobalState(3, threshold=1)
    state.vote("a", 0)
    state.reset()
    state.vote("a", 2)
    assert state.eliminations[-1].order == 1
    assert [e.epoch for e in state.eliminations] == [0, 1]


def test_vote_many_records_the_clock_it_is_given() -> None:
    state = GlobalState(3, threshold=2)
    state.vote_many("a", [0, 1], time=5)
    state.vote_many("b", [2, 0], time=9)
    assert [(e.arm, e.time) for e in state.eliminations] == [(0, 9)]


# -- settled agents and ties (CE's "settled" message) -------------------------------------------
def test_an_elimination_keeps_only_the_settled_agents_that_voted_against_the_arm() -> None:
    """A settled agent that did not vote against the arm that left may have held it: it restarts,
    so its flag goes; one that voted against it keeps its flag; voters that never said they
    settled do not become settled."""
    state = GlobalState(3, threshold=2)
    state.vote("a", 1)  # an honest agent votes, then says it settled
    state.settle("a")
    state.settle("b")
    assert state.settled == {"a", "b"}
    assert state.messages == 3  # a settled message is a message
    assert state.vote("c", 1) is V.ELIMINATED
    assert state.settled == {"a"}
    assert state.messages == 4


def test_an_agent_that_votes_after_settling_is_no_longer_settled() -> None:
    """ "Settled" is a claim that holds while the agent keeps still: a counted vote withdraws it,
    so a settled agent that votes cannot keep a tie standing on its word."""
    state = GlobalState(3, threshold=2)
    state.settle("a")
    state.vote("a", 0)
    assert state.settled == set()
    state.settle("b")
    assert state.vote("b", 0) is V.ELIMINATED and state.settled == set()


def test_f_settled_claims_do_not_decide_a_tie() -> None:
    """The hardened-edge audit: under CE two agents said "settled" with no vote and the experiment
    turned tied with every arm a candidate. With a tolerance f, f claims are not believed: each
    arm can still get their votes; f + 1 claims (more than f can lie) are."""
    remaining, voters, n = {0, 1, 2, 3}, {a: set() for a in range(4)}, 4
    threshold = 3  # M + f with M = 2, f = 1
    claims = {"x", "y"}
    assert is_tied(remaining, voters, claims, n, threshold)  # believed: 2 agents left, < 3
    assert not is_tied(remaining, voters, claims, n, threshold, tolerance=1)  # 1 may lie: 3
    assert is_tied(remaining, voters, claims | {"z"}, n, threshold, tolerance=1)  # 1 + 1 < 3
    # a claim backed by votes (voted against every remaining arm but one) is not a mere word
    backed = {0: {"x"}, 1: {"x"}, 2: {"x"}, 3: set()}
    assert reachable_votes(remaining, backed, {"x"}, n, liars=1) == {0: 4, 1: 4, 2: 4, 3: 3}


def test_tied_follows_votes_and_settled_messages() -> None:
    """Two agents, M = 2, three arms: each vote leaves every arm short of M while agents can still
    vote; the experiment is tied once neither agent can vote any more."""
    state = GlobalState(3, threshold=2)
    assert not state.tied(2)
    state.vote("a", 0)
    state.vote("b", 1)
    assert not state.tied(2)  # both can still vote against arm 2
    state.settle("a")  # a says it settled (its local set holds one arm, 1 or 2)
    assert not state.tied(2)  # b can still give arm 0 its second vote
    state.settle("b")
    assert state.tied(2)
    assert not state.tied(3)  # a third agent could still vote


def test_reachable_votes_reads_an_arm_missing_from_the_voters_as_having_none() -> None:
    """The coordinator's Redis holds no voter set for an arm without votes."""
    assert reachable_votes({0, 1, 2}, {1: {"a"}}, set(), 3) == {0: 3, 1: 3, 2: 3}
    assert reachable_votes({0, 1}, {}, {"a"}, 3) == {0: 2, 1: 2}
    assert is_tied({0, 1}, {0: {"a"}}, {"a", "b"}, 2, threshold=2)
    assert not is_tied({0, 1}, {}, set(), 2, threshold=2)


def test_reachable_votes_with_several_liars() -> None:
    """f >= 2: each arm gets the votes of at most f of the agents that only claimed to settle,
    and only of those that did not vote against it already (they are among its voters)."""
    remaining, voters, claims = {0, 1, 2, 3}, {0: {"x"}}, {"x", "y", "z"}
    # 3 agents free; arm 0 has x's vote, y and z may lie; the others, any 2 of x, y and z
    assert reachable_votes(remaining, voters, claims, 6, liars=2) == {0: 6, 1: 5, 2: 5, 3: 5}
    # more liars than claims: each arm gets every claim it lacks, no more
    assert reachable_votes(remaining, voters, claims, 6, liars=3) == {0: 6, 1: 6, 2: 6, 3: 6}
    assert reachable_votes(remaining, voters, claims, 6, liars=5) == {0: 6, 1: 6, 2: 6, 3: 6}
    # one claim and f = 2: one vote more, not two
    assert reachable_votes({0, 1, 2}, {}, {"x"}, 3, liars=2) == {0: 3, 1: 3, 2: 3}
    assert reachable_votes({0, 1, 2}, {}, {"x"}, 3, liars=0) == {0: 2, 1: 2, 2: 2}
    # M + f = 4 with f = 2 and N = 5: three claims leave 2 free agents and 2 possible liars
    assert not is_tied({0, 1, 2}, {}, claims, 5, threshold=4, tolerance=2)
    assert is_tied({0, 1, 2}, {}, claims, 5, threshold=4, tolerance=1)
    assert is_tied({0, 1, 2}, {}, claims | {"w"}, 5, threshold=4, tolerance=2)


def most_votes(
    arm: int,
    remaining: set[int],
    voters: dict[int, set[str]],
    settled: set[str],
    agents: list[str],
    liars: int,
) -> int:
    """By brute force: the most distinct votes `arm` can have, if every agent that can still
    vote votes against it and any `liars` of the agents that only claimed to settle do too."""
    by_votes = {
        a for a in agents if sum(a in voters.get(b, ()) for b in remaining) >= len(remaining) - 1
    }
    able = [a for a in agents if a not in settled | by_votes]
    claimed = sorted(settled - by_votes)
    best = 0
    for lying in itertools.combinations(claimed, min(liars, len(claimed))):
        state = GlobalState(max(remaining) + 1, threshold=10**6)
        for b in remaining:
            for a in voters.get(b, ()):
                state.vote(a, b)
        for a in [*able, *lying]:
            state.vote(a, arm)
        best = max(best, state.votes_against(arm))
    return best


@pytest.mark.parametrize("seed", range(30))
def test_reachable_votes_is_the_most_a_brute_force_finds(seed: int) -> None:
    rng = np.random.default_rng(500 + seed)
    n_arms, n_agents = int(rng.integers(2, 6)), int(rng.integers(1, 8))
    agents = [f"a{i}" for i in range(n_agents)]
    # several arms: with one left there is nothing to tie (is_tied does not ask)
    remaining = {a for a in range(n_arms) if rng.random() < 0.8} | {0, n_arms - 1}
    voters = {b: {a for a in agents if rng.random() < 0.4} for b in remaining}
    settled = {a for a in agents if rng.random() < 0.4}
    for liars in range(4):
        expected = {b: most_votes(b, remaining, voters, settled, agents, liars) for b in remaining}
        assert reachable_votes(remaining, voters, settled, n_agents, liars=liars) == expected


# -- what a tie certifies ------------------------------------------------------------------------
def test_tie_certificate_states_m_n_and_the_certified_failure() -> None:
    small = tie_certificate(3, 4, 0.02935)
    assert small.startswith(
        "the best arm is among the candidates unless M = 3 agents voted it out by error "
        "(probability at most 0.0294 with the N = 4 agents enrolled), "
    )
    # the best arm may leave without error: the clause says when, and that no vote erred then
    assert (
        ", or another arm is within epsilon of it (then either may have been voted out without "
        "error); " in small
    )
    assert small.endswith("nothing is certified about the differences between the candidates")
    assert "union" not in small and "C(N, M)" not in small and "f =" not in small
    # the bound is rounded up (it stays a bound), 1 when it is 1, and tiny values in full
    assert "at most 1 with the N = 1,024 agents" in tie_certificate(29, 1024, 1.0)
    assert "at most 4e-40 with" in tie_certificate(29, 32, 3.9999e-40)


def test_tie_certificate_with_liars_says_how_many_it_tolerates() -> None:
    honest = tie_certificate(3, 4, 0.1)
    lying = tie_certificate(3, 4, 0.1, tolerance=2)
    assert lying == f"while at most f = 2 agents lie, {honest}"
    assert not honest.startswith("while")


def test_fewest_votes_arm() -> None:
    state = GlobalState(4, threshold=5)
    state.vote_many("a", [0, 1, 3])
    state.vote_many("b", [0, 3])
    assert state.fewest_votes_arm() == 2
    state.vote("c", 2)
    state.vote("d", 2)
    assert state.fewest_votes_arm() == 1


# -- GlobalState follows decide_vote on random vote sequences ----------------------------------
@pytest.mark.parametrize("seed", range(40))
def test_state_follows_the_pure_rule_on_random_sequences(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_arms = int(rng.integers(2, 8))
    threshold = int(rng.integers(1, 6))
    n_agents = int(rng.integers(1, 10))
    state = GlobalState(n_arms, threshold)
    messages = ignored = version = epoch = 0
    eliminated_in_epoch: list[int] = []
    for step in range(int(rng.integers(20, 300))):
        if rng.random() < 0.02:
            state.reset()
            epoch += 1
            version += 1
            eliminated_in_epoch = []
            assert state.remaining == set(range(n_arms))
            assert all(not state.voters[a] for a in range(n_arms))
            continue
        agent = f"agent-{int(rng.integers(n_agents))}"
        arm = int(rng.integers(n_arms))
        remaining_before = frozenset(state.remaining)
        voters_before = frozenset(state.voters[arm])
        expected = decide_vote(remaining_before, voters_before, agent, arm, threshold)

        outcome = state.vote(agent, arm, time=step)

        messages += 1
        assert outcome is expected
        if expected in (V.ARM_OUT, V.DUPLICATE, V.LAST_ARM):
            ignored += 1
            assert state.voters[arm] == voters_before
            assert state.remaining == remaining_before
        else:
            assert state.voters[arm] == voters_before | {agent}
        if expected is V.ELIMINATED:
            version += 1
            eliminated_in_epoch.append(arm)
            assert state.remaining == remaining_before - {arm}
            assert state.eliminations[-1].arm == arm
            assert state.eliminations[-1].votes == threshold
            assert state.eliminations[-1].time == step
        elif expected is not V.ARM_OUT:
            assert state.remaining == remaining_before
        # invariants of the rule
        assert state.remaining, "the last arm never leaves"
        assert (state.messages, state.ignored, state.version, state.epoch) == (
            messages,
            ignored,
            version,
            epoch,
        )
        for a in range(n_arms):
            assert len(state.voters[a]) <= n_agents
            if a not in state.remaining:
                assert len(state.voters[a]) == threshold  # exactly M distinct voters removed it
            elif len(state.remaining) > 1:
                assert len(state.voters[a]) < threshold
        assert sorted(eliminated_in_epoch) == sorted(set(range(n_arms)) - state.remaining)
