"""The vote Lua script through ExperimentStore on a real Redis: the rule of common/votes.py, atomic.

Every test runs on an emptied database (`clean_redis`) of a real redis-server started for the
session; the store is the coordinator's own, over redis.asyncio.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
from collections import Counter
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import pytest
from redis.asyncio.client import PubSub

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.votes import GlobalState, VoteOutcome
from coordinator.errors import (
    Forbidden,
    Invalid,
    NotFound,
    RateLimited,
    StoreUnavailable,
    Unauthorized,
)
from coordinator.store import (
    Enrollment,
    ExperimentReads,
    ExperimentState,
    ExperimentStore,
    Limits,
)

from .helpers import ce_config_for_threshold, config_for_threshold, flat, open_store, snapshot
from .workers import send_votes

T = TypeVar("T")
EXP = "exp"


def run(url: str, body: Callable[[ExperimentStore], Awaitable[T]]) -> T:
    """Run `body(store)` in a fresh event loop with a store over a fresh connection pool."""

    async def main() -> T:
        async with open_store(url) as store:
            return await body(store)

    return asyncio.run(main())


async def setup(
    store: ExperimentStore, threshold: int, n_arms: int = 3, n_agents: int = 0, exp: str = EXP
) -> list[Enrollment]:
    """Create `exp` with M = threshold and `n_arms` arms; enroll `n_agents` (id, token, index)."""
    arms = [f"arm{i}" for i in range(n_arms)]
    state = await store.create(exp, arms, config_for_threshold(threshold))
    assert state.threshold == threshold
    return [await store.enroll(exp) for _ in range(n_agents)]


async def next_message(pubsub: PubSub, deadline: float = 30.0) -> dict[str, Any]:
    """The next message of `pubsub`, however long it takes to arrive (`deadline`: a safety net)."""
    message = await asyncio.wait_for(pubsub.get_message(timeout=None), deadline)
    assert message is not None
    return dict(message)


def test_second_vote_by_the_same_agent_is_ignored(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> None:
        a, b = await setup(store, threshold=3, n_agents=2)
        first = await store.vote(EXP, a.token, 1, 0)
        assert (first.outcome, first.votes, first.counted) == (VoteOutcome.COUNTED, 1, True)
        again = await store.vote(EXP, a.token, 1, 0)
        assert (again.outcome, again.votes, again.counted) == (VoteOutcome.DUPLICATE, 1, False)
        other = await store.vote(EXP, b.token, 1, 0)
        assert (other.outcome, other.votes) == (VoteOutcome.COUNTED, 2)
        state = await store.get(EXP, voters=True)
        assert state.live.voters[1] == sorted([a.agent_id, b.agent_id])
        assert state.votes == [0, 2, 0]
        assert (state.counters.messages, state.counters.ignored_messages) == (3, 1)
        assert state.remaining_arms == [0, 1, 2]
        assert state.version == 0

    run(clean_redis, body)


def test_threshold_of_distinct_votes_eliminates_and_publishes(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> None:
        agents = await setup(store, threshold=4, n_agents=4)
        pubsub = store.redis.pubsub()
        await pubsub.subscribe(keys.events(EXP))
        assert (await next_message(pubsub))["type"] == "subscribe"
        outcomes = [(await store.vote(EXP, agent.token, 2, 0)).outcome for agent in agents[:3]]
        assert outcomes == [VoteOutcome.COUNTED] * 3
        assert (await store.get(EXP, voters=True)).remaining_arms == [0, 1, 2]
        last = await store.vote(EXP, agents[3].token, 2, 0)
        assert (last.outcome, last.eliminated, last.votes, last.version) == (
            VoteOutcome.ELIMINATED,
            True,
            4,
            1,
        )
        message = await next_message(pubsub)
        assert message["type"] == "message" and int(message["data"]) == 1
        assert await pubsub.get_message(timeout=0) is None  # published once
        await pubsub.aclose()
        state = await store.get(EXP, voters=True)
        assert state.remaining_arms == [0, 1]
        assert [(e.arm, e.name, e.votes, e.order) for e in state.eliminations] == [
            (2, "arm2", 4, 1)
        ]
        assert state.version == 1

    run(clean_redis, body)


def test_the_last_arm_never_leaves(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> None:
        a, b, c = await setup(store, threshold=2, n_arms=2, n_agents=3)
        await store.vote(EXP, a.token, 0, 0)
        assert (await store.vote(EXP, b.token, 0, 0)).outcome == VoteOutcome.ELIMINATED
        # identified: votes against the last arm are ignored, visibly, however many come
        for agent in (a, b, c):
            last = await store.vote(EXP, agent.token, 1, 0)
            assert (last.outcome, last.counted, last.eliminated, last.votes) == (
                VoteOutcome.LAST_ARM,
                False,
                False,
                0,
            )
        state = await store.get(EXP, voters=True)
        assert state.remaining_arms == [1]
        assert state.votes == [2, 0] and state.live.voters[1] == []
        assert len(state.eliminations) == 1
        assert state.version == 1
        assert (state.counters.messages, state.counters.ignored_messages) == (5, 3)

    run(clean_redis, body)


def test_a_vote_on_an_eliminated_arm_is_a_message_and_changes_nothing(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> None:
        a, b, c = await setup(store, threshold=2, n_arms=3, n_agents=3)
        await store.vote(EXP, a.token, 0, 0)
        await store.vote(EXP, b.token, 0, 0)
        before = await store.get(EXP, voters=True)
        late = await store.vote(EXP, c.token, 0, 0)
        assert (late.outcome, late.counted, late.votes, late.version) == (
            VoteOutcome.ARM_OUT,
            False,
            2,
            1,
        )
        after = await store.get(EXP, voters=True)
        assert after.counters.messages == before.counters.messages + 1 == 3
        assert after.counters.ignored_messages == before.counters.ignored_messages + 1 == 1
        changed = {k for k in flat(before) if flat(before)[k] != flat(after)[k]}
        # "revision": what the ETag is made of, the message counters among them; published_ms:
        # when the publication that carries them was taken (a clock in ms: the same within one)
        assert changed - {"published_ms"} == {
            "messages",
            "ignored_messages",
            "epoch_messages",
            "revision",
        }
        assert after.tags.published_ms >= before.tags.published_ms
        assert after.tags.revision[1:3] == before.tags.revision[1:3]  # no revision of the document

    run(clean_redis, body)


def test_a_stale_epoch_is_ignored(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> None:
        a, b = await setup(store, threshold=2, n_agents=2)
        assert (await store.reset(EXP, 0))[:3] == (True, 1, 1)
        stale = await store.vote(EXP, a.token, 0, 0)
        assert (stale.outcome, stale.counted, stale.epoch, stale.version) == (
            "stale_epoch",
            False,
            1,
            1,
        )
        future = await store.vote(EXP, b.token, 0, 7)
        assert future.outcome == "stale_epoch"
        state = await store.get(EXP, voters=True)
        assert state.votes == [0, 0, 0]
        assert (state.counters.messages, state.counters.ignored_messages) == (2, 2)
        current = await store.vote(EXP, a.token, 0, 1)
        assert current.outcome == VoteOutcome.COUNTED

    run(clean_redis, body)


def test_reset_clears_votes_restores_arms_and_is_conditional_on_the_epoch(
    clean_redis: str,
) -> None:
    async def body(store: ExperimentStore) -> None:
        a, b = await setup(store, threshold=2, n_arms=3, n_agents=2)
        await store.vote(EXP, a.token, 0, 0)
        await store.vote(EXP, b.token, 0, 0)
        await store.vote(EXP, a.token, 1, 0)
        state = await store.get(EXP, voters=True)
        assert (state.remaining_arms, state.votes, state.version) == ([1, 2], [2, 1, 0], 1)

        assert (await store.reset(EXP, 0))[:3] == (True, 2, 1)
        state = await store.get(EXP, voters=True)
        assert state.remaining_arms == [0, 1, 2]
        assert state.votes == [0, 0, 0]
        assert state.live.voters == [[], [], []]
        assert state.eliminations == []
        assert (state.version, state.epoch) == (2, 1)
        assert (state.counters.messages, state.counters.ignored_messages) == (
            3,
            0,
        )  # messages are history

        # a second agent answering the same epoch-0 reset makes no second epoch
        assert (await store.reset(EXP, 0))[:3] == (False, 2, 1)
        # the same agent may vote against the same arm again in the new epoch
        assert (await store.vote(EXP, a.token, 0, 1)).outcome == VoteOutcome.COUNTED
        assert (await store.vote(EXP, b.token, 0, 1)).outcome == VoteOutcome.ELIMINATED
        # the administrative reset is unconditional
        assert (await store.reset(EXP, None))[:3] == (True, 4, 2)
        assert (await store.get(EXP, voters=True)).remaining_arms == [0, 1, 2]

    run(clean_redis, body)


def test_rejected_votes_change_nothing(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> dict[str, Any]:
        (agent,) = await setup(store, threshold=2, n_arms=3, n_agents=1)
        (outsider,) = await setup(store, threshold=2, n_arms=3, n_agents=1, exp="other")
        await store.vote(EXP, agent.token, 1, 0)
        before = snapshot(clean_redis)
        with pytest.raises(Unauthorized, match="invalid agent token"):
            await store.vote(EXP, "nobody", 0, 0)
        with pytest.raises(Unauthorized, match="invalid agent token"):
            await store.vote(EXP, f"{agent.agent_id}.wrong-secret", 0, 0)
        with pytest.raises(Unauthorized, match="invalid agent token"):
            await store.vote(EXP, f"nobody.{agent.token.partition('.')[2]}", 0, 0)
        with pytest.raises(Forbidden, match="not enrolled in experiment 'exp'"):
            await store.vote(EXP, outsider.token, 0, 0)  # a valid token, of another experiment
        with pytest.raises(Forbidden, match="not enrolled in experiment 'other'"):
            await store.vote("other", agent.token, 0, 0)
        # the token is checked before the arm
        with pytest.raises(Unauthorized):
            await store.vote(EXP, f"{agent.agent_id}.wrong-secret", 3, 0)
        with pytest.raises(Forbidden):
            await store.vote(EXP, outsider.token, 3, 0)
        with pytest.raises(Invalid, match=r"arm=3 is invalid: must be in \[0, 2\]"):
            await store.vote(EXP, agent.token, 3, 0)
        with pytest.raises(Invalid, match="arm=-1 is invalid"):
            await store.vote(EXP, agent.token, -1, 0)
        with pytest.raises(NotFound, match="'missing' does not exist"):
            await store.vote("missing", agent.token, 0, 0)
        with pytest.raises(NotFound, match="'missing' does not exist"):
            await store.vote("missing", "garbage", 0, 0)  # the experiment is checked first
        with pytest.raises(NotFound):
            await store.reset("missing", None)
        with pytest.raises(NotFound):
            await store.enroll("missing")
        return before

    before = run(clean_redis, body)
    assert snapshot(clean_redis) == before
    assert not any("missing" in key for key in before)


def test_votes_survive_a_script_flush_and_killed_connections(clean_redis: str) -> None:
    """redis-py loads the script again after a flush and reconnects after a killed connection;
    no vote is lost or applied twice."""

    async def body(store: ExperimentStore) -> list[str]:
        a, b, c = await setup(store, threshold=5, n_arms=3, n_agents=3)
        outcomes = [str((await store.vote(EXP, a.token, 0, 0)).outcome)]
        await store.redis.script_flush()
        outcomes.append(str((await store.vote(EXP, b.token, 0, 0)).outcome))
        await store.redis.client_kill_filter(_type="normal", skipme=True)
        outcomes.append(str((await store.vote(EXP, c.token, 0, 0)).outcome))
        outcomes.append(str((await store.vote(EXP, c.token, 0, 0)).outcome))
        return outcomes

    assert run(clean_redis, body) == ["counted", "counted", "counted", "duplicate"]
    state = run(clean_redis, lambda store: store.get(EXP, voters=True))
    assert state.votes == [3, 0, 0]
    assert (state.counters.messages, state.counters.ignored_messages) == (4, 1)


# -- concurrency -------------------------------------------------------------------------------
def test_concurrent_votes_on_one_arm_count_exactly_and_eliminate_once(clean_redis: str) -> None:
    """200 agents vote twice each against arm 0 at once, through 4 clients of 8 connections."""
    threshold, n_agents = 29, 200

    async def body(store: ExperimentStore) -> Counter[str]:
        agents = await setup(store, threshold, n_arms=4, n_agents=n_agents)
        async with (
            open_store(clean_redis, 8) as s1,
            open_store(clean_redis, 8) as s2,
            open_store(clean_redis, 8) as s3,
            open_store(clean_redis, 8) as s4,
        ):
            stores = [s1, s2, s3, s4]
            calls = [
                stores[i % 4].vote(EXP, agent.token, 0, 0)
                for i, agent in enumerate(agents + agents[::-1])
            ]
            results = await asyncio.gather(*calls)
        assert max(r.version for r in results) == 1
        return Counter(str(r.outcome) for r in results)

    outcomes = run(clean_redis, body)
    # exactly M distinct voters, exactly one of them eliminates; everything else is ignored
    assert outcomes["counted"] == threshold - 1
    assert outcomes["eliminated"] == 1
    assert outcomes["duplicate"] + outcomes["arm_out"] == 2 * n_agents - threshold
    state = run(clean_redis, lambda store: store.get(EXP, voters=True))
    assert state.remaining_arms == [1, 2, 3]
    assert state.votes[0] == threshold
    assert len(state.eliminations) == 1 and state.eliminations[0].votes == threshold
    assert (state.counters.messages, state.counters.ignored_messages) == (400, 400 - threshold)
    assert state.version == 1


def test_concurrent_duplicates_count_each_agent_once(clean_redis: str) -> None:
    """M above the number of agents: 200 agents x 3 concurrent votes leave exactly 200 voters."""

    async def body(store: ExperimentStore) -> Counter[str]:
        agents = await setup(store, threshold=6, n_arms=3, n_agents=200)
        await store.redis.hset(keys.meta(EXP), "threshold", 1000)  # never reached
        async with open_store(clean_redis, 16) as other:
            calls = [s.vote(EXP, a.token, 2, 0) for a in agents for s in (store, other, store)]
            results = await asyncio.gather(*calls)
        return Counter(str(r.outcome) for r in results)

    assert run(clean_redis, body) == {"counted": 200, "duplicate": 400}
    state = run(clean_redis, lambda store: store.get(EXP, voters=True))
    assert state.votes == [0, 0, 200]
    assert (state.counters.messages, state.counters.ignored_messages) == (600, 400)


@pytest.mark.parametrize(("executor", "workers"), [("threads", 4), ("processes", 3)])
def test_votes_from_several_os_threads_or_processes(
    clean_redis: str, executor: str, workers: int
) -> None:
    """Workers, each with its own event loop and pool, flood arms 0 and 1 with M=17 (0 goes)."""
    threshold, n_agents = 17, 120
    agents = run(clean_redis, lambda store: setup(store, threshold, n_arms=3, n_agents=n_agents))
    # arm 0: every agent votes (twice); arm 1: only M - 1 distinct agents, so it stays
    tokens = [a.token for a in agents]
    votes = [(t, 0) for t in tokens] * 2 + [(t, 1) for t in tokens[: threshold - 1]] * 3
    rng = np.random.default_rng(7)
    order = rng.permutation(len(votes))
    shares = [[votes[i] for i in order[w::workers]] for w in range(workers)]
    args = [(clean_redis, EXP, share, 4) for share in shares]
    if executor == "threads":
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(lambda a: send_votes(*a), args))
    else:
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            results = pool.starmap(send_votes, args)
    outcomes = Counter(o for result in results for o in result)
    assert outcomes["eliminated"] == 1
    assert outcomes["counted"] == (threshold - 1) + (threshold - 1)
    assert sum(outcomes.values()) == len(votes)
    state = run(clean_redis, lambda store: store.get(EXP, voters=True))
    assert state.remaining_arms == [1, 2]
    assert state.votes == [threshold, threshold - 1, 0]
    assert [e.arm for e in state.eliminations] == [0]
    assert state.counters.messages == len(votes)
    assert state.counters.ignored_messages == len(votes) - (2 * threshold - 1)


# -- the Lua script agrees with common.votes ---------------------------------------------------
def random_votes(rng: np.random.Generator, n_arms: int, n_agents: int) -> list[tuple[int, int]]:
    """A random (agent, arm) sequence with duplicates, biased so that most arms get voted out."""
    n = int(rng.integers(20, 120))
    weights = rng.dirichlet(np.ones(n_arms) * 0.7)
    sequence = [(int(rng.integers(n_agents)), int(rng.choice(n_arms, p=weights))) for _ in range(n)]
    for _ in range(int(rng.integers(0, 10))):  # replay some earlier votes verbatim
        sequence.insert(int(rng.integers(len(sequence) + 1)), sequence[int(rng.integers(n))])
    return sequence


@pytest.mark.parametrize("seed", range(30))
def test_store_agrees_with_global_state(clean_redis: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    threshold = int(rng.integers(2, 7))
    n_arms = int(rng.integers(3, 7))
    n_agents = int(rng.integers(threshold, threshold + 6))
    sequence = random_votes(rng, n_arms, n_agents)
    exp = f"agree-{seed}"

    async def body(store: ExperimentStore) -> tuple[list[str], dict[str, Any]]:
        agents = await setup(store, threshold, n_arms=n_arms, n_agents=n_agents, exp=exp)
        outcomes = [
            str((await store.vote(exp, agents[a].token, arm, 0)).outcome) for a, arm in sequence
        ]
        return [a.agent_id for a in agents], {
            "outcomes": outcomes,
            "state": await store.get(exp, voters=True),
        }

    ids, got = run(clean_redis, body)
    reference = GlobalState(n_arms=n_arms, threshold=threshold)
    expected_outcomes = [str(reference.vote(ids[a], arm)) for a, arm in sequence]
    state = got["state"]

    assert got["outcomes"] == expected_outcomes
    assert state.remaining_arms == sorted(reference.remaining)
    assert state.live.voters == [sorted(reference.voters[arm]) for arm in range(n_arms)]
    assert [(e.arm, e.votes, e.order) for e in state.eliminations] == [
        (e.arm, e.votes, e.order) for e in reference.eliminations
    ]
    assert state.counters.messages == reference.messages == len(sequence)
    assert state.counters.ignored_messages == reference.ignored
    assert state.version == reference.version


# -- settled messages (CE) and ties agree with common.votes -------------------------------------
def settling_sequence(
    rng: np.random.Generator, n_arms: int, n_agents: int
) -> list[tuple[int, int | None]]:
    """(agent, arm) votes and (agent, None) settled messages, shaped like CE agents: each agent
    keeps one arm and votes against the others in a random order, a vote dropped now and then,
    then says it settled; plus some stray votes, replays and repeated settled messages."""
    scripts = []
    for agent in range(n_agents):
        kept = int(rng.integers(2))  # two top arms split the agents: ties are likely
        others = [arm for arm in rng.permutation(n_arms) if arm != kept]
        votes: list[tuple[int, int | None]] = [
            (agent, int(arm)) for arm in others if rng.random() > 0.15
        ]
        scripts.append([*votes, (agent, None)])
    sequence: list[tuple[int, int | None]] = []
    while any(scripts):
        agent = int(rng.choice([i for i, s in enumerate(scripts) if s]))
        sequence.append(scripts[agent].pop(0))
        if rng.random() < 0.08:  # a stray vote, a replay or a second settled message
            sequence.append(
                (int(rng.integers(n_agents)), int(rng.integers(n_arms)))
                if rng.random() < 0.5
                else sequence[int(rng.integers(len(sequence)))]
            )
    return sequence


SETTLING_SEEDS = range(20)


def settling_case(seed: int) -> tuple[int, int, int, list[tuple[int, int | None]]]:
    """(threshold, arms, agents, sequence) of one seed: fewer than 2M - 1 agents, ties possible."""
    rng = np.random.default_rng(1000 + seed)
    threshold = int(rng.integers(2, 6))
    n_arms = int(rng.integers(3, 6))
    n_agents = int(rng.integers(threshold, 2 * threshold))
    return threshold, n_arms, n_agents, settling_sequence(rng, n_arms, n_agents)


def status_of(reference: GlobalState, n_agents: int) -> str:
    if len(reference.remaining) == 1:
        return "identified"
    return "tied" if reference.tied(n_agents) else "exploring"


@pytest.mark.parametrize("seed", SETTLING_SEEDS)
def test_store_agrees_with_global_state_on_settled_messages_and_ties(
    clean_redis: str, seed: int
) -> None:
    """The vote and settled scripts keep the settled set as GlobalState does (an elimination
    keeps only the settled agents that voted against the arm), and the store's status is tied
    exactly when GlobalState.tied holds, after every message."""
    threshold, n_arms, n_agents, sequence = settling_case(seed)
    exp = f"settle-{seed}"

    async def body(store: ExperimentStore) -> tuple[list[str], list[dict[str, Any]]]:
        await store.create(
            exp, [f"arm{i}" for i in range(n_arms)], ce_config_for_threshold(threshold, n_arms)
        )
        agents = [await store.enroll(exp) for _ in range(n_agents)]
        seen = []
        for a, arm in sequence:
            if arm is None:
                outcome = (await store.settle(exp, agents[a].token, 0)).outcome
            else:
                outcome = str((await store.vote(exp, agents[a].token, arm, 0)).outcome)
            state = await store.get_with_status(exp, voters=True)
            seen.append({"outcome": outcome, **flat(state)})
        return [a.agent_id for a in agents], seen

    ids, seen = run(clean_redis, body)
    reference = GlobalState(n_arms=n_arms, threshold=threshold)
    for (a, arm), got in zip(sequence, seen, strict=True):
        if arm is None:
            reference.settle(ids[a])
            assert got["outcome"] == "settled"
        else:
            assert got["outcome"] == str(reference.vote(ids[a], arm))
        assert got["settled"] == sorted(reference.settled)
        assert got["remaining_arms"] == sorted(reference.remaining)
        assert got["voters"] == [sorted(reference.voters[arm]) for arm in range(n_arms)]
        assert (got["messages"], got["ignored_messages"], got["version"]) == (
            reference.messages,
            reference.ignored,
            reference.version,
        )
        assert got["status"] == status_of(reference, n_agents)


def test_the_agreement_sequences_reach_ties_and_identifications() -> None:
    """The sequences of the agreement test above are not vacuous: replayed through GlobalState
    alone (no Redis, no order between tests), they pass through every status."""
    statuses = set()
    for seed in SETTLING_SEEDS:
        threshold, n_arms, n_agents, sequence = settling_case(seed)
        reference = GlobalState(n_arms=n_arms, threshold=threshold)
        for a, arm in sequence:
            if arm is None:
                reference.settle(str(a))
            else:
                reference.vote(str(a), arm)
            statuses.add(status_of(reference, n_agents))
    assert statuses == {"exploring", "tied", "identified"}


def test_a_reset_clears_the_settled_agents_and_a_stale_settled_message_is_ignored(
    clean_redis: str,
) -> None:
    async def body(store: ExperimentStore) -> None:
        await store.create(EXP, ["a", "b", "c"], ce_config_for_threshold(3, 3))
        a, b = [await store.enroll(EXP) for _ in range(2)]
        first = await store.settle(EXP, a.token, 0)
        assert (first.outcome, first.added, first.remaining) == ("settled", True, [0, 1, 2])
        again = await store.settle(EXP, a.token, 0)
        assert (again.outcome, again.added) == ("settled", False)
        assert (await store.get(EXP, voters=True)).live.settled == [a.agent_id]
        assert (await store.reset(EXP, None))[:3] == (True, 1, 1)
        state = await store.get(EXP, voters=True)
        assert state.live.settled == [] and state.counters.settled_agents == 0
        stale = await store.settle(EXP, b.token, 0)
        assert (stale.outcome, stale.added, stale.epoch) == ("stale_epoch", False, 1)
        state = await store.get(EXP, voters=True)
        assert state.live.settled == []
        assert (state.counters.messages, state.counters.ignored_messages) == (3, 1)

    run(clean_redis, body)


def test_refused_settled_messages_change_nothing(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> dict[str, Any]:
        await store.create(EXP, ["a", "b", "c"], ce_config_for_threshold(3, 3))
        (agent,) = [await store.enroll(EXP)]
        (de_agent,) = await setup(store, threshold=2, n_agents=1, exp="de")
        store.limits = Limits(vote_rate=0.001, vote_burst=1)
        await store.settle(EXP, agent.token, 0)  # spends the agent's burst
        before = snapshot(clean_redis)
        with pytest.raises(Unauthorized):
            await store.settle(EXP, f"{agent.agent_id}.wrong-secret", 0)
        with pytest.raises(Forbidden, match="not enrolled in experiment 'exp'"):
            await store.settle(EXP, de_agent.token, 0)
        with pytest.raises(Forbidden, match="not CE"):
            await store.settle("de", de_agent.token, 0)
        with pytest.raises(NotFound):
            await store.settle("missing", agent.token, 0)
        with pytest.raises(RateLimited, match="too fast"):
            await store.settle(EXP, agent.token, 0)
        return before

    before = run(clean_redis, body)
    assert snapshot(clean_redis) == before


def test_a_script_run_after_its_deadline_changes_nothing(clean_redis: str) -> None:
    """Issue 36, item 8: each script that changes an experiment for a call (a vote, a settled
    message, a CDE report, an LDP report, an enrollment with a ticket, a reset) checks its
    deadline in Redis's clock before any write (lua/deadline.lua). Here the store reckons
    Redis's clock an hour behind, so every deadline has passed when the script runs, as when a
    hung Redis resumes: each call gets the 503 a timeout gives, and Redis is unchanged."""

    async def body(store: ExperimentStore) -> dict[str, Any]:
        arms = ["a", "b", "c"]
        (voter,) = await setup(store, threshold=2, n_agents=1, exp="de")
        await store.create("ce", arms, ce_config_for_threshold(3, 3))
        await store.create("cde", arms, AlgorithmConfig(algorithm="cde", privacy=0.8), agents=10)
        await store.create("ldp", arms, AlgorithmConfig(algorithm="ldp"))
        settler, reporter, device = [await store.enroll(e) for e in ("ce", "cde", "ldp")]
        (ticket,), _ = await store.issue_tickets("de", 1, 60)
        store.limits = Limits(redis_timeout_seconds=1.0)
        assert await store.core.deadline_ms() > 0  # measured against Redis's clock
        store.core._clock_offset = -3600.0  # the clock an hour behind Redis's
        before = snapshot(clean_redis)
        calls: list[Awaitable[Any]] = [
            store.vote("de", voter.token, 0, 0),
            store.settle("ce", settler.token, 0),
            store.report("cde", reporter.token, 1),
            store.crowd_report("ldp", device.token, 0, 1, 1),
            store.enroll("de", ticket=ticket),
            store.reset("de", 0, voter.agent_id),
            store.reset("de", None),
        ]
        for call in calls:
            with pytest.raises(StoreUnavailable, match="after its deadline"):
                await call
        return before

    before = run(clean_redis, body)
    assert snapshot(clean_redis) == before


def test_an_identification_between_the_two_reads_of_a_status_is_identified(
    clean_redis: str,
) -> None:
    """get_with_status reads the published counters, then (when they cannot rule a tie out)
    every live voter set. An elimination between the two reads that leaves one arm must not
    give a state that contradicts itself (`exploring` is fine for the two arms it shows,
    `identified` with two arms is not; the SDK's guide engineer once found `exploring` with one
    arm left, which no later change corrected), and the next read, after the elimination's
    publication, is `identified`. The interleaving is made deterministic: the last vote is
    applied inside the second read."""

    class InterleavedReads(ExperimentReads):
        between: Callable[[], Awaitable[object]] | None = None

        async def get(self, exp: str, voters: bool = False) -> ExperimentState:
            if voters and self.between is not None:
                between, self.between = self.between, None
                await between()
            return await super().get(exp, voters=voters)

    class Interleaved(ExperimentStore):
        reads_class = InterleavedReads

    async def body(store: ExperimentStore) -> None:
        interleaved = Interleaved(store.redis, store.limits)
        reads = interleaved.reads
        assert isinstance(reads, InterleavedReads)
        # M = 2, 2 arms, 2 agents: counters alone cannot rule a tie out once arm 1 has a vote
        a, b = await setup(interleaved, threshold=2, n_arms=2, n_agents=2)
        await interleaved.vote(EXP, a.token, 1, 0)
        reads.between = lambda: interleaved.vote(EXP, b.token, 1, 0)
        state = await interleaved.get_with_status(EXP)
        assert reads.between is None, "the voter sets were not read: no interleaving"
        assert (state.remaining_arms, state.status) == ([0, 1], "exploring")
        state = await interleaved.get_with_status(EXP)
        assert (state.remaining_arms, state.status) == ([0], "identified")

    run(clean_redis, body)


def test_settled_claims_under_a_tolerance_and_a_vote_after_settling(clean_redis: str) -> None:
    """The hardened-edge audit under CE: two agents said "settled" with no vote and the experiment
    turned tied, every arm a candidate; a settled agent could still vote. Now, with f = 1, one
    claim too many to believe is discounted (not tied), and an agent that votes after settling is
    no longer settled (the Lua script and GlobalState alike)."""

    async def body(store: ExperimentStore) -> None:
        config = dataclasses.replace(ce_config_for_threshold(2, 4), tolerance=1)  # M + f = 3
        await store.create(EXP, ["a", "b", "c", "d"], config)
        x, y, z, _ = [await store.enroll(EXP) for _ in range(4)]
        for agent in (x, y):
            assert (await store.settle(EXP, agent.token, 0)).added
        state = await store.get_with_status(EXP)
        assert state.counters.settled_agents == 2
        # believed, the 2 claims would leave 2 agents that can vote: under 3, tied; f = 1 of
        # them may lie, so every arm can still reach 3
        assert state.status == "exploring"
        assert (await store.settle(EXP, z.token, 0)).added  # 3 claims: at most 1 lies
        assert (await store.get_with_status(EXP)).status == "tied"
        # z votes after saying it settled: its claim is withdrawn, the tie reopens
        assert (await store.vote(EXP, z.token, 0, 0)).counted
        state = await store.get_with_status(EXP, voters=True)
        assert sorted(state.live.settled) == sorted([x.agent_id, y.agent_id])
        assert state.status == "exploring"


def test_with_a_tolerance_one_agent_cannot_reset_a_dser4_experiment_alone(
    clean_redis: str,
) -> None:
    """The hardened-edge audit: one agent's resets were accepted at t = 0, 10.1 and 20.2 s, each
    clearing every vote, and the experiment never ended. With f = 0 any agent's request resets
    (the papers' DSER4); with a tolerance f, f + 1 distinct agents must ask within the window:
    one agent asking again and again stays pending and clears nothing."""

    async def body(store: ExperimentStore) -> None:
        config = dataclasses.replace(
            config_for_threshold(2, subroutine="ser4", phi=0.1), tolerance=1
        )
        await store.create(EXP, ["a", "b", "c"], config)
        x, y, z = [await store.enroll(EXP) for _ in range(3)]
        assert (await store.vote(EXP, z.token, 2, 0)).counted
        for _ in range(3):  # the same agent, again and again: one request
            outcome = await store.reset(EXP, 0, x.agent_id, quorum=2)
            assert (outcome.reset, outcome.pending, outcome.requests) == (False, True, 1)
        state = await store.get(EXP)
        assert (state.epoch, state.votes) == (0, [0, 0, 1])  # nothing cleared
        outcome = await store.reset(EXP, 0, y.agent_id, quorum=2)  # a second agent: f + 1
        assert (outcome.reset, outcome.epoch, outcome.requests) == (True, 1, 2)
        state = await store.get(EXP)
        assert (state.epoch, state.votes) == (1, [0, 0, 0])
        # the requests were cleared with the epoch: the next reset needs two agents again
        assert (await store.reset(EXP, 1, y.agent_id, quorum=2)).pending
        # without a tolerance (quorum 1) one agent's request resets at once
        assert (await store.reset(EXP, 1, x.agent_id, quorum=1)).reset

    run(clean_redis, body)


def test_reset_requests_count_only_within_their_window(clean_redis: str) -> None:
    async def body(store: ExperimentStore) -> None:
        config = dataclasses.replace(
            config_for_threshold(2, subroutine="ser4", phi=0.1), tolerance=1
        )
        await store.create(EXP, ["a", "b"], config)
        x, y = [await store.enroll(EXP) for _ in range(2)]
        await store.reset(EXP, 0, x.agent_id, quorum=2)
        # the window is 60 s in the settings; here it is 1 ms, and more than 1 ms goes by:
        # x's request has expired when y asks, so y alone makes no reset
        store.limits = dataclasses.replace(store.limits, reset_quorum_seconds=0.001)
        await asyncio.sleep(0.01)
        outcome = await store.reset(EXP, 0, y.agent_id, quorum=2)
        assert (outcome.reset, outcome.pending, outcome.requests) == (False, True, 1)

    run(clean_redis, body)


def test_a_vote_that_names_another_start_of_its_epoch_is_stale(clean_redis: str) -> None:
    """An epoch is its number and its start (epoch_started_at): a failover that loses a reset lets
    a later reset take the lost epoch's number, never its start. A vote naming another start is
    stale_epoch (counted as a message and ignored); one naming none is matched by number, as
    before; one naming the start counts."""

    async def body(store: ExperimentStore) -> None:
        a, b = await setup(store, threshold=3, n_agents=2)
        started = (await store.get(EXP)).counters.epoch_started_at
        stale = await store.vote(EXP, a.token, 1, 0, epoch_started_at=started - 1)
        assert (stale.outcome, stale.counted) == ("stale_epoch", False)
        assert (await store.vote(EXP, a.token, 1, 0, epoch_started_at=started)).counted
        assert (await store.vote(EXP, b.token, 1, 0)).counted
        state = await store.get(EXP)
        assert (state.votes[1], state.counters.messages, state.counters.ignored_messages) == (
            2,
            3,
            1,
        )

    run(clean_redis, body)
