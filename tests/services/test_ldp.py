"""LDP in the services, over real HTTP and real Redis (common/ldp.py): an experiment created with
`algorithm: ldp` publishes an allocation; devices play an arm drawn from it and send private
reports (POST .../reports: the arm and one privatized bit, numbered 1 to B), counted atomically
by lua/ldp_report.lua and published with their batch; at each publication the coordinator decides
on the published counts (coordinator/store/decisions.py, lua/ldp_decide.lua). A refused report,
a duplicate and a replay change nothing in Redis; B is enforced; the documents carry the
allocation, the estimates and the lift; and enough simulated devices identify the best arm."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import httpx
import pytest

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.ldp import DEFAULT_DP_EPSILON, Mechanism, decide
from coordinator.app import InvalidDefaultExperiment, ensure_default_experiment
from coordinator.errors import Conflict, Invalid
from coordinator.store import ExperimentStore, Limits

from .helpers import (
    DEFAULT_EXPERIMENT,
    RedisState,
    admin_headers,
    bearer,
    coordinator_settings,
    create_experiment,
    open_store,
)

ARMS = ["A", "B", "C"]
CDE = {"algorithm": "cde", "eta": 0.1, "delta": 0.05, "privacy": 0.8, "epsilon": 0.5}


def send(
    client: httpx.Client, exp: str, token: str, arm: int, bit: int, seq: int
) -> httpx.Response:
    return client.post(
        f"/v1/experiments/{exp}/reports",
        json={"arm": arm, "bit": bit, "seq": seq},
        headers=bearer(token),
    )


def document(client: httpx.Client, exp: str) -> dict[str, Any]:
    reply = client.get(f"/v1/experiments/{exp}")
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def test_an_ldp_experiment_is_created_with_its_defaults_and_they_round_trip(
    client: httpx.Client, clean_redis: str
) -> None:
    created = create_experiment(client, id="l", arms=ARMS, algorithm="ldp")
    params = created["params"]
    assert params["algorithm"] == "ldp"
    assert params["dp_epsilon"] == DEFAULT_DP_EPSILON == 1.0  # LDP's, not DP-MASE's 0.1
    assert params["reports_per_agent"] == 1 and params["tolerance"] == 0
    assert created["dp_epsilon"] == 1.0 and created["reports_per_agent"] == 1
    assert created["user_privacy"] == 1.0 == created["certified_epsilon"]
    assert created["certified_failure"] == params["delta"] == 0.05
    assert created["status"] == "exploring" and created["remaining_arms"] == [0, 1, 2]
    assert created["reports"] == [0, 0, 0] and created["ones"] == [0, 0, 0]
    assert created["reports_total"] == 0 and created["warnings"] == []
    # before any report: no mean, the whole interval, and an allocation over every arm
    assert [e["mean"] for e in created["estimates"]] == [None, None, None]
    assert [e["ci"] for e in created["estimates"]] == [[0.0, 1.0]] * 3
    assert [e["name"] for e in created["estimates"]] == ARMS
    assert sum(created["allocation"]) == pytest.approx(1.0)
    assert all(w > 0 for w in created["allocation"])
    assert [lift["vs"] for lift in created["lift"]] == [1, 2]
    assert all(lift["mean"] is None for lift in created["lift"])
    assert document(client, "l") == created

    custom = create_experiment(
        client,
        id="l2",
        arms=ARMS,
        algorithm="ldp",
        dp_epsilon=2.0,
        reports_per_agent=3,
        tolerance=1,
        rewards="bernoulli",
    )
    assert custom["user_privacy"] == 6.0 and custom["reports_per_agent"] == 3
    assert custom["rewards"] == "bernoulli"

    async def stored() -> AlgorithmConfig:
        async with open_store(clean_redis) as store:
            return (await store.get_with_status("l2")).design.config

    assert asyncio.run(stored()) == AlgorithmConfig(
        algorithm="ldp", dp_epsilon=2.0, reports_per_agent=3, tolerance=1
    )
    # the other algorithms' documents carry the LDP fields as null
    other = create_experiment(client, id="d", arms=ARMS)
    assert other["allocation"] is None and other["estimates"] is None and other["ones"] is None
    best = client.get("/v1/experiments/l2/best-arm").json()
    assert best["user_privacy"] == 6.0 and best["best_arm"] is None
    assert best["allocation"] == custom["allocation"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"reports_per_agent": 2}, "reports_per_agent"),  # DE's agents vote
        ({"algorithm": "cde", "agents": 10, "reports_per_agent": 1}, "reports_per_agent"),
        ({"algorithm": "ldp", "reports_per_agent": 0}, "reports_per_agent"),
        ({"algorithm": "ldp", "dp_epsilon": 0.0}, "dp_epsilon"),
        ({"algorithm": "ldp", "dp_epsilon": 11.0}, "dp_epsilon"),
        ({"algorithm": "ldp", "sigma": 0.5}, "sigma"),
        ({"algorithm": "ldp", "subroutine": "lucb"}, "subroutine"),
        ({"algorithm": "ldp", "agents": 10}, "agents"),
        ({"algorithm": "ldp", "reports_per_agent": 1.5}, "reports_per_agent"),
    ],
)
def test_a_bad_ldp_creation_is_422_and_changes_nothing(
    client: httpx.Client, redis_state: RedisState, body: dict[str, Any], named: str
) -> None:
    before = redis_state()
    reply = client.post(
        "/v1/experiments", json={"id": "bad", "arms": ARMS, **body}, headers=admin_headers()
    )
    assert reply.status_code == 422, reply.text
    assert named in json.dumps(reply.json()["detail"])
    assert redis_state() == before


def test_the_default_experiment_may_be_ldp_with_its_own_defaults(clean_redis: str) -> None:
    """DEXP_ALGORITHM=ldp: dp_epsilon 1 unless DEXP_DP_EPSILON is set, B from
    DEXP_REPORTS_PER_AGENT; B is refused for a voting default experiment, as the API refuses it."""

    async def start(**overrides: Any) -> dict[str, Any]:
        async with open_store(clean_redis) as store:
            await store.redis.flushall()
            await ensure_default_experiment(store, coordinator_settings(clean_redis, **overrides))
            return (await store.get(DEFAULT_EXPERIMENT)).design.params

    params = asyncio.run(start(algorithm="ldp", reports_per_agent=2))
    assert params["dp_epsilon"] == 1.0 and params["reports_per_agent"] == 2
    assert asyncio.run(start(algorithm="ldp", dp_epsilon=0.5))["dp_epsilon"] == 0.5
    assert asyncio.run(start())["reports_per_agent"] == 1  # DE, as before
    with pytest.raises(InvalidDefaultExperiment, match="reports_per_agent"):
        asyncio.run(start(reports_per_agent=2))


def test_store_refusals_of_the_script_change_nothing(
    clean_redis: str, redis_state: RedisState
) -> None:
    """What the HTTP schema refuses first, the script refuses too (another client of the store)."""

    async def body() -> None:
        async with open_store(clean_redis) as store:
            await store.create("s", ARMS, AlgorithmConfig(algorithm="ldp"))
            device = await store.enroll("s")
            await store.get("s")  # the first publication's decision is taken
            before = redis_state()
            for bit, seq in ((2, 1), (-1, 1), (1, 0), (1, -3)):
                with pytest.raises(Invalid):
                    await store.crowd_report("s", device.token, 0, bit, seq)
            with pytest.raises(Conflict):
                await store.crowd_report("s", device.token, 0, 1, 2)
            assert redis_state() == before

    asyncio.run(body())


def test_counts_move_only_at_a_publication_and_the_decision_applies_there(
    clean_redis: str,
) -> None:
    """Batch 10: nine reports show nothing; the tenth publishes them, and the decision on that
    publication removes the arm its interval rules out, once, whichever coordinator applies it;
    a decided experiment refuses reports and decisions."""
    config = AlgorithmConfig(algorithm="ldp", dp_epsilon=4.0, epsilon=0.05)
    mechanism = Mechanism(4.0)
    rng = random.Random(7)

    async def body() -> None:
        async with open_store(clean_redis) as store:
            store.limits = Limits(publish_batch=10, publish_cadence_seconds=3600)
            other = ExperimentStore(store.redis, store.limits)  # a second coordinator
            await store.create("dec", ARMS, config)
            devices = [await store.enroll("dec") for _ in range(400)]
            means = [0.95, 0.9, 0.05]
            for sent, device in enumerate(devices, start=1):
                arm = sent % 3
                bit = mechanism.privatize(
                    float(rng.random() < means[arm]), rng.random(), rng.random()
                )
                result = await store.crowd_report("dec", device.token, arm, bit, 1)
                state = await store.get("dec")
                assert sum(state.reports or []) == sent - sent % 10  # only whole batches show
                assert result.published == (sent % 10 == 0)
                if 2 not in state.remaining_arms:
                    break
            state = await store.get_with_status("dec")
            assert state.remaining_arms == [0, 1] and state.status == "exploring"
            (out,) = state.eliminations
            assert (out.arm, out.votes) == (2, (state.reports or [])[2])
            expected = decide(
                state.reports or [],
                state.ones or [],
                [0, 1, 2],
                epsilon=0.05,
                delta=0.05,
                dp_epsilon=4.0,
            )
            assert expected.eliminate == (2,) and not expected.identified
            # the same publication decided again, by either coordinator: nothing more happens
            assert (await other.reads.decisions.apply("dec")).outcome == "known"
            assert (await store.reads.decisions.apply("dec")).outcome == "known"
            assert (await store.get("dec")).eliminations == state.eliminations
            # identify by hand: the script ends it, after which it refuses every decision
            meta = await store.redis.hgetall(keys.meta("dec"))
            published = int(meta[b"published"])
            applied = await store.core.scripts.ldp_decide(
                meta_key=keys.meta("dec"),
                remaining_key=keys.remaining("dec"),
                eliminations_key=keys.eliminations("dec"),
                created_at=int(meta[b"created_at"]),
                publication=published + 1,
                eliminate="[]",
                leader=0,
                now_ms=0,
                changes_channel=keys.changes("dec"),
            )
            assert applied[0] == b"applied"
            decided = await store.get_with_status("dec")
            assert decided.status == "identified" and decided.remaining_arms == [0]
            assert [e.arm for e in decided.eliminations] == [2, 1]
            again = await store.core.scripts.ldp_decide(
                meta_key=keys.meta("dec"),
                remaining_key=keys.remaining("dec"),
                eliminations_key=keys.eliminations("dec"),
                created_at=int(meta[b"created_at"]),
                publication=published + 2,
                eliminate="[0]",
                leader=-1,
                now_ms=0,
                changes_channel=keys.changes("dec"),
            )
            assert again == [b"decided"]
            fresh = await store.enroll("dec")
            with pytest.raises(Conflict, match="decided"):
                await store.crowd_report("dec", fresh.token, 0, 1, 1)
            assert (await store.get_with_status("dec")).remaining_arms == [0]

    asyncio.run(body())
