"""The report Lua script (coordinator/store/lua/report.lua) through ExperimentStore on a real Redis:
CDE's rule of common/votes.py (`decide_report`, `GlobalState.report`, `reports_exhausted`), atomic.

Random sequences of reports (repeats, several agents, reports after the answer, arms out of range,
forged tokens) go through the real script and through GlobalState, and after every message the
replies, the counts, the arms left, the eliminations, the counters, the reporters and the status
must be the same. tests/services/test_vote_script.py does the same for votes.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.votes import GlobalState, ReportOutcome
from coordinator.errors import Invalid, Unauthorized
from coordinator.store import Enrollment, ExperimentStore

from .helpers import flat, open_store

# Any CDE configuration: the threshold it chooses from the agents expected is replaced by the
# case's own (the meta hash's `threshold`, which report.lua reads), so the cases do not depend on
# how common.cde chooses it.
CDE = AlgorithmConfig(algorithm="cde", eta=0.1, delta=0.05, privacy=0.8, epsilon=0.5)
FORGED = -1  # an agent index that stands for a forged token


async def create(
    store: ExperimentStore, exp: str, n_arms: int, n_agents: int, threshold: int
) -> list[Enrollment]:
    """A CDE experiment with K = `n_arms` arms and M = `threshold`; `n_agents` enrolled."""
    await store.create(exp, [f"arm{i}" for i in range(n_arms)], CDE, agents=10)
    await store.redis.hset(keys.meta(exp), "threshold", threshold)
    return [await store.enroll(exp) for _ in range(n_agents)]


def report_case(seed: int) -> tuple[int, int, int, list[tuple[int, int]]]:
    """(arms, threshold, agents, (agent, arm) messages) of one seed: agents report arms of unequal
    popularity, some twice or more, some after the answer; now and then an arm out of range or a
    forged token."""
    rng = np.random.default_rng(2400 + seed)
    n_arms = int(rng.integers(2, 6))
    threshold = int(rng.integers(1, 6))
    n_agents = int(rng.integers(threshold, 3 * threshold + 2))
    weights = rng.dirichlet(np.ones(n_arms))
    sequence: list[tuple[int, int]] = []
    for _ in range(int(rng.integers(n_agents, 3 * n_agents + 4))):
        agent = int(rng.integers(n_agents))
        arm = int(rng.choice(n_arms, p=weights))
        draw = rng.random()
        if draw < 0.06:
            arm = int(rng.choice([-1, n_arms, n_arms + 3]))  # no such arm
        elif draw < 0.1:
            agent = FORGED
        elif draw < 0.2 and sequence:  # an earlier message, verbatim
            agent, arm = sequence[int(rng.integers(len(sequence)))]
        sequence.append((agent, arm))
    return n_arms, threshold, n_agents, sequence


SEEDS = range(30)


def status_of(reference: GlobalState, n_agents: int) -> str:
    if len(reference.remaining) == 1:
        return "identified"
    return "tied" if reference.exhausted(n_agents) else "exploring"


async def send(store: ExperimentStore, exp: str, token: str, arm: int) -> str:
    """The report's outcome, or the refusal it raised (which must change nothing)."""
    try:
        return str((await store.report(exp, token, arm)).outcome)
    except Invalid as exc:
        return f"invalid: {exc}"
    except Unauthorized:
        return "unauthorized"


@pytest.mark.parametrize("seed", SEEDS)
def test_report_script_agrees_with_global_state(clean_redis: str, seed: int) -> None:
    n_arms, threshold, n_agents, sequence = report_case(seed)
    exp = f"report-{seed}"

    async def body() -> tuple[list[str], list[dict[str, Any]]]:
        async with open_store(clean_redis) as store:
            agents = await create(store, exp, n_arms, n_agents, threshold)
            seen = []
            for a, arm in sequence:
                token = f"{agents[0].agent_id}.forged" if a == FORGED else agents[a].token
                outcome = await send(store, exp, token, arm)
                state = flat(await store.get_with_status(exp, voters=True))
                reporters = await store.redis.smembers(keys.reporters(exp))
                state["reporters"] = sorted(r.decode() for r in reporters)
                seen.append({"outcome": outcome, **state})
            return [agent.agent_id for agent in agents], seen

    ids, seen = asyncio.run(body())
    reference = GlobalState(n_arms=n_arms, threshold=threshold)
    for (a, arm), got in zip(sequence, seen, strict=True):
        if a == FORGED:
            expected = "unauthorized"
        else:
            try:
                expected = str(reference.report(ids[a], arm))
            except ValueError as exc:
                expected = f"invalid: {exc}"
        assert got["outcome"] == expected
        assert got["remaining_arms"] == sorted(reference.remaining)
        assert got["reports"] == [len(reference.voters[arm]) for arm in range(n_arms)]
        assert got["votes"] == [0] * n_arms  # nobody votes in a CDE experiment
        assert got["reporters"] == sorted(reference.reporters)
        assert [(e["arm"], e["votes"], e["order"]) for e in got["eliminations"]] == [
            (e.arm, e.votes, e.order) for e in reference.eliminations
        ]
        counters = got["messages"], got["ignored_messages"], got["version"], got["status"]
        assert counters == (
            reference.messages,
            reference.ignored,
            reference.version,
            status_of(reference, n_agents),
        )


def test_the_report_sequences_reach_every_outcome_and_status() -> None:
    """The sequences of the agreement test are not vacuous: replayed through GlobalState alone,
    they give every outcome and every refusal, and end accepted, exhausted (tied) or open."""
    outcomes: set[str] = set()
    statuses = set()
    for seed in SEEDS:
        n_arms, threshold, n_agents, sequence = report_case(seed)
        reference = GlobalState(n_arms=n_arms, threshold=threshold)
        for a, arm in sequence:
            if a == FORGED:
                outcomes.add("unauthorized")
                continue
            try:
                outcomes.add(str(reference.report(str(a), arm)))
            except ValueError:
                outcomes.add("invalid")
            statuses.add(status_of(reference, n_agents))
    assert outcomes == {*map(str, ReportOutcome), "invalid", "unauthorized"}
    assert statuses == {"exploring", "tied", "identified"}


def test_concurrent_reports_accept_one_arm_once(clean_redis: str) -> None:
    """120 agents report at once, each twice (arm 0 for half of them, arms 1 and 2 for the
    rest), through 4 clients of 8 connections, M = 25: exactly one arm is accepted, by exactly
    one report that brought it to 25; every counted report is in the counts, every agent in
    the reporters once; the others are duplicates or came after the answer."""
    threshold, n_agents = 25, 120

    async def body() -> tuple[Counter[str], dict[str, Any], int]:
        async with open_store(clean_redis) as store:
            agents = await create(store, "many", 3, n_agents, threshold)
            arms = [0 if i % 2 == 0 else 1 + (i // 2) % 2 for i in range(n_agents)]
            async with (
                open_store(clean_redis, 8) as s1,
                open_store(clean_redis, 8) as s2,
                open_store(clean_redis, 8) as s3,
                open_store(clean_redis, 8) as s4,
            ):
                stores = itertools.cycle([s1, s2, s3, s4])
                calls = [
                    next(stores).report("many", agent.token, arm)
                    for agent, arm in [*zip(agents, arms, strict=True)] * 2
                ]
                results = await asyncio.gather(*calls)
            state = flat(await store.get_with_status("many", voters=True))
            reporters = await store.redis.scard(keys.reporters("many"))
            return Counter(str(r.outcome) for r in results), state, reporters

    outcomes, state, reporters = asyncio.run(body())
    assert outcomes["accepted"] == 1
    assert sum(outcomes.values()) == 2 * n_agents
    assert outcomes["counted"] + 1 == sum(state["reports"]) == reporters
    # a reporter's other report is a duplicate; an agent that did not report came too late twice
    assert outcomes["duplicate"] == reporters
    assert outcomes["decided"] == 2 * (n_agents - reporters)
    (winner,) = state["remaining_arms"]
    assert state["reports"][winner] == threshold
    assert all(n < threshold for arm, n in enumerate(state["reports"]) if arm != winner)
    assert [e["arm"] for e in state["eliminations"]] == [a for a in range(3) if a != winner]
    assert (state["status"], state["version"]) == ("identified", 1)
    assert state["messages"] == 2 * n_agents
    assert state["ignored_messages"] == outcomes["duplicate"] + outcomes["decided"]
