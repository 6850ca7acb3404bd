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
from concurrent.futures import ThreadPoolExecutor
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
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    open_store,
)
from .sse import Stream

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


# -- creation -------------------------------------------------------------------------------------
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


# -- reports: refusals, duplicates, B -------------------------------------------------------------
def test_refused_reports_change_nothing(client: httpx.Client, redis_state: RedisState) -> None:
    create_experiment(client, id="p", arms=ARMS, algorithm="ldp", reports_per_agent=2)
    create_experiment(client, id="v", arms=ARMS, delta=0.2, eta=0.5)
    create_experiment(client, id="c", arms=ARMS, agents=10, **CDE)
    (device,) = enroll_agents(client, "p", 1)
    (voter,) = enroll_agents(client, "v", 1)
    (reporter,) = enroll_agents(client, "c", 1)
    post = client.post
    before = redis_state()
    refusals = [
        (send(client, "p", "p-0000000000.forged", 0, 1, 1), 401),
        (send(client, "p", voter.token, 0, 1, 1), 403),  # another experiment's agent
        (send(client, "v", voter.token, 0, 1, 1), 403),  # a private report where agents vote
        (send(client, "c", reporter.token, 0, 1, 1), 403),  # ... and where they report once
        (send(client, "nowhere", device.token, 0, 1, 1), 404),
        (send(client, "p", device.token, 3, 1, 1), 422),  # no arm 3
        (send(client, "p", device.token, 0, 2, 1), 422),  # a bit is 0 or 1
        (send(client, "p", device.token, 0, 1, 0), 422),  # numbered from 1
        (send(client, "p", device.token, 0, 1, 2), 409),  # out of order: 1 comes first
        (send(client, "p", device.token, 0, 1, 3), 409),  # beyond B = 2
        (post("/v1/experiments/p/reports", json={"arm": 0, "bit": True, "seq": 1}), 401),
        (
            post(
                "/v1/experiments/p/reports",
                json={"arm": 0, "bit": 1, "seq": 1, "reward": 1.0},
                headers=device.headers,
            ),
            422,
        ),
        (
            post(
                "/v1/experiments/p/reports",
                json={"arm": 0, "bit": "1", "seq": 1},
                headers=device.headers,
            ),
            422,
        ),
        # votes, CDE's report and resets where devices send private reports
        (post("/v1/experiments/p/votes", json={"arm": 1}, headers=device.headers), 403),
        (
            post("/v1/experiments/p/votes", json={"arm": 1, "epoch": 0}, headers=device.headers),
            403,
        ),
        (post("/v1/experiments/p/report", json={"arm": 1}, headers=device.headers), 403),
        (post("/v1/experiments/p/reset", headers=admin_headers()), 403),
    ]
    for response, status in refusals:
        assert response.status_code == status, response.text
        assert response.json()["detail"], response.text
    details = [r.json()["detail"] for r, _ in refusals]
    assert "is not LDP" in details[2] and "is not LDP" in details[3]
    assert "out of order" in details[8] and "next one is seq=1" in details[8]
    assert "reports spent" in details[9]
    assert "is LDP" in details[13] and "POST /v1/experiments/p/reports" in details[14]
    assert "never reset" in details[16]
    assert redis_state() == before  # a refusal changes nothing


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


def test_duplicates_and_replays_change_nothing_and_b_is_enforced(
    client: httpx.Client, redis_state: RedisState
) -> None:
    create_experiment(client, id="b", arms=ARMS, algorithm="ldp", reports_per_agent=2)
    device, other = enroll_agents(client, "b", 2)
    first = send(client, "b", device.token, 1, 1, 1)
    assert first.json() == {"outcome": "counted", "counted": True, "sent": 1, "reports_left": 1}
    document(client, "b")  # a read, so that nothing waits for a decision
    before = redis_state()
    for arm, bit in ((1, 1), (0, 0), (2, 1)):  # a retry, or a replay of another report: seq 1
        again = send(client, "b", device.token, arm, bit, 1)
        assert again.json() == {
            "outcome": "duplicate",
            "counted": False,
            "sent": 1,
            "reports_left": 1,
        }
    assert redis_state() == before
    second = send(client, "b", device.token, 2, 0, 2)
    assert second.json() == {"outcome": "counted", "counted": True, "sent": 2, "reports_left": 0}
    assert send(client, "b", other.token, 1, 0, 1).json()["counted"]
    doc = document(client, "b")  # DEXP_PUBLISH_BATCH = 1 here: every report at once
    assert doc["reports"] == [0, 2, 1] and doc["ones"] == [0, 1, 0]
    assert doc["reports_total"] == 3 and doc["messages"] == 3 and doc["votes"] == [0, 0, 0]
    before = redis_state()
    spent = send(client, "b", device.token, 0, 1, 3)
    assert spent.status_code == 409 and "reports spent" in spent.json()["detail"]
    replay = send(client, "b", device.token, 1, 1, 1)
    assert replay.json()["outcome"] == "duplicate" and replay.json()["reports_left"] == 0
    assert redis_state() == before
    # the admin sees the live counts, and which agent sent how many reports is all that is kept
    live = client.get("/v1/experiments/b/voters", headers=admin_headers())
    assert live.status_code == 200


def test_devices_at_the_cap_that_spent_their_reports_end_tied(
    redis_url: str, clean_redis: str
) -> None:
    """Three arms, B = 1, DEXP_MAX_AGENTS 3: while a device may still enroll, or an enrolled one
    still report, the experiment explores (one-visit devices enroll just before their report);
    once three devices hold the cap and each has reported, no report can come: the experiment
    is tied, every arm still in the set a candidate and delta its certificate (the best arm is
    among them on the intervals' event); the listing and the event stream agree."""
    settings = coordinator_settings(
        redis_url, max_agents=3, max_agents_per_client=0, algorithm="ldp"
    )
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as http,
    ):
        create_experiment(http, id="tie", arms=ARMS, algorithm="ldp")
        devices = enroll_agents(http, "tie", 2)
        for arm, device in enumerate(devices):
            assert send(http, "tie", device.token, arm, 1, 1).json()["counted"]
        assert document(http, "tie")["status"] == "exploring"  # a third device may come
        (last,) = enroll_agents(http, "tie", 1)
        assert document(http, "tie")["status"] == "exploring"  # and report
        assert send(http, "tie", last.token, 2, 0, 1).json()["counted"]
        doc = document(http, "tie")
        best = http.get("/v1/experiments/tie/best-arm").json()
        assert doc["status"] == best["status"] == "tied", doc
        assert doc["remaining_arms"] == [0, 1, 2] and doc["reports_total"] == 3
        assert doc["result"]["candidates"] == [
            {"index": i, "name": name} for i, name in enumerate(ARMS)
        ]
        assert doc["result"]["best_arm"] is None and doc["certified_failure"] == 0.05
        assert "the best arm is not among the candidates" in doc["certificate"]
        listed = http.get("/v1/experiments").json()["experiments"]
        assert [e["status"] for e in listed if e["id"] == "tie"] == ["tied"]
        with Stream(server.url, "/v1/experiments/tie/events") as stream:
            assert stream.next_event().json()["status"] == "tied"


def test_concurrent_replays_of_one_device_count_once(client: httpx.Client) -> None:
    create_experiment(client, id="race", arms=ARMS, algorithm="ldp")
    (device,) = enroll_agents(client, "race", 1)
    with ThreadPoolExecutor(8) as pool:
        replies = list(
            pool.map(lambda i: send(client, "race", device.token, i % 3, i % 2, 1), range(32))
        )
    outcomes = [r.json()["outcome"] for r in replies]
    assert outcomes.count("counted") == 1 and outcomes.count("duplicate") == 31
    assert document(client, "race")["reports_total"] == 1


# -- the decision -----------------------------------------------------------------------------------
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


def test_a_publication_left_undecided_is_decided_by_the_next_read(clean_redis: str) -> None:
    """A coordinator that published a batch and stopped before deciding: the publication waits
    for its decision (no 304 is answered from the revision meanwhile: a publication is due), and
    the next read, on any coordinator, decides it."""
    config = AlgorithmConfig(algorithm="ldp", dp_epsilon=4.0, epsilon=0.05)
    mechanism = Mechanism(4.0)
    rng = random.Random(11)

    async def undecided(exp: str) -> Any:
        class Gone:  # what a coordinator that stops after the publication decides: nothing
            outcome = "gone"

        return Gone()

    async def body() -> None:
        async with open_store(clean_redis) as store:
            store.limits = Limits(publish_batch=30, publish_cadence_seconds=3600)
            await store.create("late", ARMS, config)
            other = ExperimentStore(store.redis, store.limits)
            await other.get("late")  # the creation's publication decided (nothing to decide)
            store.writes.decisions.apply = undecided  # type: ignore[method-assign]
            for i in range(300):
                device = await store.enroll("late")
                arm = i % 3
                reward = float(rng.random() < (0.95, 0.9, 0.05)[arm])
                bit = mechanism.privatize(reward, rng.random(), rng.random())
                await store.crowd_report("late", device.token, arm, bit, 1)
            meta = await store.redis.hgetall(keys.meta("late"))
            assert meta[b"published"] != meta[b"decided"] and meta[b"p_remaining"] == b"[0,1,2]"
            known = await other.revision("late", lease=False)
            assert known is not None and known[2] == 0  # due now: no 304 from this revision
            state = await other.get_with_status("late")
            assert [e.arm for e in state.eliminations] == [2] and state.remaining_arms == [0, 1]
            known = await other.revision("late", lease=False)
            assert known is not None and known[2] is None

    asyncio.run(body())


# -- end to end -----------------------------------------------------------------------------------
MEANS = (0.8, 0.5, 0.3)


def test_devices_reporting_once_identify_the_best_arm(redis_url: str, clean_redis: str) -> None:
    """Devices enrolled one by one, each reading the published allocation, playing an arm drawn
    from it (Bernoulli rewards 0.8, 0.5, 0.3), privatizing its reward and sending one report,
    until the coordinator identifies an arm: arm 0, with intervals that contain the true means;
    the documents' tags move with the publications and the event stream ends identified."""
    settings = coordinator_settings(
        redis_url, publish_batch=5, enroll_rate=0, max_agents_per_client=0
    )
    rng = random.Random(2026)
    mechanism = Mechanism(DEFAULT_DP_EPSILON)
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as http,
    ):
        created = create_experiment(http, id="e2e", arms=ARMS, algorithm="ldp", rewards="bernoulli")
        assert created["dp_epsilon"] == DEFAULT_DP_EPSILON
        tags = [http.get("/v1/experiments/e2e").headers["etag"]]
        with Stream(server.url, "/v1/experiments/e2e/events") as stream:
            assert stream.next_event().json()["status"] == "exploring"
            doc = created
            devices = 0
            while doc["status"] == "exploring":
                assert devices < 5000, "no decision after 5,000 devices"
                (device,) = enroll_agents(http, "e2e", 1)
                page = http.get("/v1/experiments/e2e")
                doc = page.json()
                if doc["status"] != "exploring":
                    break
                if page.headers["etag"] != tags[-1]:
                    tags.append(page.headers["etag"])
                arm = rng.choices(range(3), weights=doc["allocation"])[0]
                reward = float(rng.random() < MEANS[arm])
                bit = mechanism.privatize(reward, rng.random(), rng.random())
                reply = send(http, "e2e", device.token, arm, bit, 1)
                devices += 1
                if reply.status_code == 409:  # decided between its read and its report
                    assert "decided" in reply.json()["detail"]
                    break
                assert reply.json()["outcome"] == "counted", reply.text
            doc = document(http, "e2e")
            best = http.get("/v1/experiments/e2e/best-arm").json()
            assert doc["status"] == best["status"] == "identified"
            assert best["best_arm"] == {"index": 0, "name": "A"} and doc["remaining_arms"] == [0]
            assert best["certified_failure"] == 0.05
            for estimate, mean in zip(doc["estimates"], MEANS, strict=True):
                low, high = estimate["ci"]
                assert low <= mean <= high, (estimate, mean)
            assert doc["estimates"] == best["estimates"] and doc["lift"] == best["lift"]
            assert all(
                lift["ci"][0] <= 0.8 - MEANS[lift["vs"]] <= lift["ci"][1] for lift in doc["lift"]
            )
            assert doc["allocation"] == [1.0, 0.0, 0.0]
            assert doc["reports_total"] == sum(doc["reports"]) <= devices
            assert len(tags) > 2  # the tag moved with the publications
            # the event stream ends on the identification
            while (event := stream.next_event().json())["status"] != "identified":
                assert event["status"] == "exploring"
            assert event["remaining_arms"] == [0]
        late = enroll_agents(http, "e2e", 1)[0]
        refused = send(http, "e2e", late.token, 0, 1, 1)
        assert refused.status_code == 409 and "decided" in refused.json()["detail"]
        current = http.get("/v1/experiments/e2e")
        again = http.get("/v1/experiments/e2e", headers={"If-None-Match": current.headers["etag"]})
        assert again.status_code == 304
