"""An experiment's `result`, over real HTTP and real Redis: null while exploring, composed and kept
once decided (identified or tied), the same for every later reader and every coordinator, after
the load generator's lease is gone, in the listing too; a new decision replaces it (a reset, an
enrollment that reopens a tie). And `votes_history`, the published votes over time, bounded.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import redis

from common import redis_keys as keys
from coordinator.results import HISTORY_POINTS

from .helpers import Agent, admin_headers, create_experiment, enroll_agents, open_store

ARMS = ["A", "B", "C"]
M3 = {"delta": 0.2, "eta": 0.5}  # DE: M = 3


def vote(client: httpx.Client, exp: str, agent: Agent, arm: int, epoch: int = 0) -> None:
    response = client.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=agent.headers
    )
    assert response.status_code == 200, response.text


def document(client: httpx.Client, exp: str) -> dict[str, Any]:
    response = client.get(f"/v1/experiments/{exp}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def listed(client: httpx.Client, exp: str) -> dict[str, Any]:
    (entry,) = [e for e in client.get("/v1/experiments").json()["experiments"] if e["id"] == exp]
    return dict(entry)


def lease(run: str, epoch: int, activations: int, rate: float, updated_at: int = 2) -> str:
    """A lease as load_generator/lease.py writes it (the figures the coordinator reads)."""
    return json.dumps(
        {
            "run": run,
            "host": "h",
            "pid": 1,
            "started_at": 1,
            "updated_at": updated_at,
            "epoch": epoch,
            "activations": activations,
            "delivered": activations,
            "backlog": 0,
            "activations_per_second": rate,
        }
    )


def test_the_result_is_kept_at_the_decision_and_outlives_the_load_generator(
    client: httpx.Client, clean_redis: str
) -> None:
    create_experiment(client, id="r", arms=ARMS, **M3)
    agents = enroll_agents(client, "r", 3)
    store = redis.Redis.from_url(clean_redis)
    store.set(keys.load_generator("r"), lease("run-1", 0, 1234, 56.5), px=60_000)
    for agent in agents:
        vote(client, "r", agent, 2)
    exploring = document(client, "r")
    assert exploring["status"] == "exploring" and exploring["result"] is None
    assert any("tied" in w for w in exploring["warnings"])  # 3 agents < 2 M - 1
    assert listed(client, "r")["result"] is None
    for agent in agents:
        vote(client, "r", agent, 0)
    decided = document(client, "r")
    result = decided["result"]
    assert decided["status"] == "identified"
    assert not any("tied" in w for w in decided["warnings"])  # it did not end tied
    last = decided["eliminations"][-1]["time"]
    assert result == {
        "status": "identified",
        "best_arm": {"index": 1, "name": "B"},
        "candidates": [],
        "decided_at": last,
        "duration_ms": last - decided["created_at"],
        "epoch": 0,
        "version": 2,
        "agents": 3,
        "messages": 6,
        "votes": [3, 0, 3],
        "reports": None,
        "load_generator": {
            "run": "run-1",
            "activations": 1234,
            "activations_per_second": 56.5,
            "updated_at": 2,
        },
        "certified_failure": decided["certified_failure"],
        "certificate": decided["certificate"],
    }
    assert decided["certified_agents"] == 3
    # the run renews its lease once more as it stops (the figures up to the decision): kept
    store.set(keys.load_generator("r"), lease("run-1", 0, 1300, 50.0, updated_at=3), px=60_000)
    figures = {"run": "run-1", "activations": 1300, "activations_per_second": 50.0}
    result["load_generator"] = {**figures, "updated_at": 3}
    assert document(client, "r")["result"] == result
    # a run started after the decision fed none of it; it ends, its lease goes: the result stays
    store.set(keys.load_generator("r"), lease("run-2", 0, 5, 1.0, updated_at=4), px=60_000)
    assert document(client, "r")["result"] == result
    store.delete(keys.load_generator("r"))
    after = document(client, "r")
    assert after["load_generator"] is None and after["result"] == result
    assert listed(client, "r")["result"] == result

    async def fresh_reader() -> dict[str, Any]:  # another coordinator: the kept result, too
        async with open_store(clean_redis) as other:
            return (await other.get_with_status("r")).document()

    assert asyncio.run(fresh_reader())["result"]["decided_at"] == last
    store.close()


def test_a_load_generator_of_another_epoch_is_not_in_the_result(
    client: httpx.Client, clean_redis: str
) -> None:
    create_experiment(client, id="e", arms=["A", "B"], **M3)
    agents = enroll_agents(client, "e", 3)
    response = client.post("/v1/experiments/e/reset", headers=admin_headers())
    assert response.json()["epoch"] == 1
    store = redis.Redis.from_url(clean_redis)
    store.set(keys.load_generator("e"), lease("old", 0, 10, 1.0), px=60_000)  # fed epoch 0
    store.close()
    for agent in agents:
        vote(client, "e", agent, 0, epoch=1)
    result = document(client, "e")["result"]
    assert result["best_arm"] == {"index": 1, "name": "B"} and result["epoch"] == 1
    assert result["load_generator"] is None


def test_a_new_decision_replaces_the_result_and_a_reopened_tie_has_none(
    client: httpx.Client,
) -> None:
    create_experiment(client, id="tie", arms=ARMS, **M3)
    a, b, c, d = enroll_agents(client, "tie", 4)  # 4 < 2 M - 1: a tie can form
    for agent in (a, b, c, d):
        vote(client, "tie", agent, 2)
    for agent, arm in ((a, 0), (b, 0), (c, 1), (d, 1)):
        vote(client, "tie", agent, arm)
    tied = document(client, "tie")
    result = tied["result"]
    assert tied["status"] == result["status"] == "tied"
    assert result["candidates"] == [{"index": 0, "name": "A"}, {"index": 1, "name": "B"}]
    assert result["best_arm"] is None and result["agents"] == 4 and result["votes"] == [2, 2, 3]
    # decided at the publication that showed the tie: after the last elimination, before now
    assert tied["eliminations"][-1]["time"] <= result["decided_at"]
    assert listed(client, "tie")["result"] == result

    (e,) = enroll_agents(client, "tie", 1)  # reopened: exploring, no result
    assert document(client, "tie")["result"] is None
    assert listed(client, "tie")["result"] is None
    vote(client, "tie", e, 0)
    identified = document(client, "tie")["result"]
    assert identified["status"] == "identified" and identified["best_arm"]["name"] == "B"
    assert (identified["agents"], identified["messages"], identified["candidates"]) == (5, 9, [])

    # a reset starts a new epoch: no result, and the history starts again
    client.post("/v1/experiments/tie/reset", headers=admin_headers())
    reset = document(client, "tie")
    assert (reset["epoch"], reset["result"]) == (1, None)
    assert [total for _, total in reset["votes_history"]] == [0]


def test_a_cde_result_counts_reports(client: httpx.Client) -> None:
    # K = 3, eta = 0.1, P = 0.8, delta = 0.05: with N = 10 agents expected, M = 4
    cde = {"algorithm": "cde", "eta": 0.1, "delta": 0.05, "privacy": 0.8, "epsilon": 0.5}
    created = create_experiment(client, id="c", arms=ARMS, agents=10, **cde)
    assert created["threshold"] == 4
    for agent in enroll_agents(client, "c", 6):
        response = client.post("/v1/experiments/c/report", json={"arm": 2}, headers=agent.headers)
        assert response.status_code == 200, response.text
    result = document(client, "c")["result"]
    assert result["status"] == "identified" and result["best_arm"] == {"index": 2, "name": "C"}
    assert result["reports"] == [0, 0, 4] and result["votes"] == [0, 0, 0]


def test_the_votes_history_is_published_this_epoch_and_bounded(client: httpx.Client) -> None:
    """Each publication that changes the total adds a point; past HISTORY_POINTS the older half is
    thinned, so a late reader gets the whole span in bounded size."""
    arms = [f"a{i}" for i in range(14)]
    # M = 12 > 10 agents: no arm leaves, 130 distinct votes
    create_experiment(client, id="h", arms=arms, delta=0.5**11.5, eta=0.5)
    agents = enroll_agents(client, "h", 10)
    totals: list[int] = []
    for arm in range(13):
        for agent in agents:
            vote(client, "h", agent, arm)
        totals.append((arm + 1) * len(agents))
    history = document(client, "h")["votes_history"]
    assert len(history) <= HISTORY_POINTS
    times, values = [t for t, _ in history], [v for _, v in history]
    assert times == sorted(times) and values == sorted(values)
    assert values[0] == 0 and values[-1] == 130  # from the creation to the last publication
    assert values[-HISTORY_POINTS // 4 :] == list(range(131 - HISTORY_POINTS // 4, 131))
    assert len(set(values)) == len(values)


def test_a_malformed_history_or_result_field_reads_as_none(
    client: httpx.Client, clean_redis: str
) -> None:
    """Only the scripts write the meta hash; still, a field left by an older version that does not
    parse must not fail the read: no history, and the result composed again."""
    create_experiment(client, id="m", arms=["A", "B"], **M3)
    agents = enroll_agents(client, "m", 3)
    store = redis.Redis.from_url(clean_redis)
    store.hset(keys.meta("m"), mapping={"p_history": "{", "result": "["})
    assert document(client, "m")["votes_history"] == []
    for agent in agents:
        vote(client, "m", agent, 0)
    assert document(client, "m")["result"]["best_arm"]["name"] == "B"
    store.close()
