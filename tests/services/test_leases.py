"""Leases (issue 37, point 4): an agent enrolled with a lease stays while its host renews it (POST
/v1/agents/leases, each token its own agent's) and leaves once the lease lapses, as DELETE
/v1/agents/me makes it leave: a host killed with SIGKILL leaves no agent enrolled; a host restarted
after its agents lapsed enrolls new ones. Two real coordinators with a short lease
(DEXP_AGENT_LEASE_SECONDS) on one real Redis, over real HTTP; agent hosts as processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import redis

from agent.host import AgentService
from agent.leases import Renewal
from clients.coordinator import CoordinatorClient
from common import redis_keys as keys

from .helpers import (
    ENROLLMENT_SECRET,
    Agent,
    ThreadedCoordinator,
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
)
from .test_agent_experiments import PER_EXPERIMENT, make_experiment, running, settings, until
from .test_departures import M3, counts

LEASE = 2.0  # seconds: a lapse is waited for, so short


@pytest.fixture(scope="module")
def leasing(redis_url: str) -> Iterator[ThreadedCoordinator]:
    with coordinator(coordinator_settings(redis_url, agent_lease_seconds=LEASE)) as server:
        yield server


@pytest.fixture(scope="module")
def second(redis_url: str) -> Iterator[ThreadedCoordinator]:
    """Another coordinator on the same Redis: both sweep, an agent leaves once."""
    with coordinator(coordinator_settings(redis_url, agent_lease_seconds=LEASE)) as server:
        yield server


@pytest.fixture
def http(leasing: ThreadedCoordinator, clean_redis: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=leasing.url, timeout=10.0, trust_env=False) as client:
        yield client


def enroll(client: httpx.Client, **body: Any) -> tuple[Agent, dict[str, Any]]:
    reply = client.post(
        "/v1/agents", json={"experiment": "fleet", **body}, headers=bearer(ENROLLMENT_SECRET)
    )
    assert reply.status_code == 201, reply.text
    doc = reply.json()
    return Agent(doc["agent_id"], doc["token"], doc["index"]), doc


def renew(client: httpx.Client, *tokens: str) -> list[str]:
    reply = client.post("/v1/agents/leases", json={"tokens": list(tokens)})
    assert reply.status_code == 200, reply.text
    assert reply.json()["lease_seconds"] == LEASE
    outcomes: list[str] = reply.json()["outcomes"]
    return outcomes


def redis_ms(store: redis.Redis) -> int:
    """Redis's clock, which the leases are on (unix ms)."""
    seconds, micros = store.time()
    return int(seconds * 1000 + micros // 1000)


def enrolled(store: redis.Redis) -> set[str]:
    return {a.decode() for a in store.zrange(keys.agents("fleet"), 0, -1)}


def test_a_token_renews_its_own_agent_only_and_a_lapsed_agent_leaves_as_if_it_left(
    http: httpx.Client, leasing: ThreadedCoordinator, store: redis.Redis
) -> None:
    create_experiment(http, id="fleet", arms=["A", "B", "C"], **M3)
    (voter, doc), (quiet, _), (kept, _) = (enroll(http, simulated=True, lease=True) for _ in "vqk")
    device, device_doc = enroll(http)  # a device: no lease, it may visit once
    assert (doc["lease_seconds"], device_doc["lease_seconds"]) == (LEASE, None)
    vote = http.post(
        "/v1/experiments/fleet/votes", json={"arm": 2, "epoch": 0}, headers=voter.headers
    )
    assert vote.status_code == 200, vote.text
    assert counts(http, "fleet") == (4, 0, 3, 4)

    # a token renews its own agent, never another: a wrong secret for the voter renews nothing
    stranger = f"{voter.agent_id}.{'x' * 32}"
    unknown = f"fleet-0123456789.{'y' * 32}"
    assert renew(http, kept.token, device.token, stranger, unknown) == [
        "renewed", "no_lease", "gone", "gone",
    ]  # fmt: skip
    leases = store.zrange(keys.leases("fleet"), 0, -1, withscores=True)
    for body in (
        {"tokens": []},
        {"tokens": [kept.token] * 501},
        {"tokens": [f"{kept.agent_id},{voter.agent_id}.{'z' * 32}"]},  # the script's separator
        {"tokens": [kept.token], "lease_seconds": 3600},
    ):
        refused = http.post("/v1/agents/leases", json=body)
        assert refused.status_code == 422 and refused.json()["detail"], refused.text
    assert store.zrange(keys.leases("fleet"), 0, -1, withscores=True) == leases  # nothing changed

    # the host of `voter` and `quiet` is gone: only `kept` is renewed, and they leave
    until(lambda: renew(http, kept.token) == ["renewed"] and len(enrolled(store)) == 2, "lapsed")
    assert enrolled(store) == {kept.agent_id, device.agent_id}  # what the load generator feeds
    # as DELETE /v1/agents/me: the voter's vote stands, so it counts in N until a reset
    assert counts(http, "fleet") == (3, 1, 1, 3)
    assert http.get("/v1/experiments/fleet").json()["votes"][2] == 1
    for gone in (voter, quiet):
        assert not store.exists(gone.stream("fleet"))
        assert store.hget(keys.stream_secrets("fleet"), gone.agent_id) is None
        assert http.delete("/v1/agents/me", headers=gone.headers).status_code == 401
    again = http.post(
        "/v1/experiments/fleet/votes", json={"arm": 1, "epoch": 0}, headers=voter.headers
    )
    assert again.status_code == 401, again.text
    assert renew(http, voter.token, kept.token) == ["gone", "renewed"]
    metrics = http.get("/metrics").text  # the sweeps of this process: at least these two
    (line,) = [m for m in metrics.splitlines() if m.startswith("dexp_agents_lapsed_total ")]
    assert float(line.split()[1]) >= 2

    # no lease left: the sweep sleeps (a coordinator without leases sends Redis nothing)
    assert http.delete("/v1/agents/me", headers=kept.headers).status_code == 200
    sweep = leasing.server.config.app.state.lease_sweep  # coordinator/leases.py
    until(lambda: not store.exists(keys.LEASE_INDEX) and not sweep.awake.is_set(), "it sleeps")
    assert enrolled(store) == {device.agent_id}  # a device without a lease stays


def test_a_host_restarted_after_its_lease_lapsed_enrolls_new_agents(
    http: httpx.Client, leasing: ThreadedCoordinator, clean_redis: str, tmp_path: Path
) -> None:
    make_experiment(http, "fleet")
    store = redis.Redis.from_url(clean_redis)
    extra = {"state_dir": str(tmp_path / "state"), "leave_on_stop": False}  # a restart keeps them
    with running(AgentService(settings(leasing.url, clean_redis, "fleet", **extra))) as first:
        until(lambda: len(enrolled(store)) == PER_EXPERIMENT, "enrolled")
        old = {a.agent_id for a in first.discovery.hosted["fleet"].agents.values()}
        assert set(store.zrange(keys.leases("fleet"), 0, -1)) == {a.encode() for a in old}
    until(lambda: not enrolled(store), "their lease lapsed while the host was down")
    restarted = AgentService(settings(leasing.url, clean_redis, "fleet", **extra))
    hosted = restarted.discovery.hosted["fleet"]
    assert hosted.restored == PER_EXPERIMENT  # restored from the state directory, dead
    with running(restarted):

        def replaced() -> bool:
            ids = {a.agent_id for a in list(hosted.agents.values())}
            return len(ids) == PER_EXPERIMENT and not ids & old and enrolled(store) == ids

        until(replaced, "new agents in the place of the lapsed ones")
        assert {p.name for p in (tmp_path / "state").glob("agent-*.json")} == {
            f"agent-{a}.json" for a in enrolled(store)
        }
    store.close()


def test_a_host_killed_without_a_word_leaves_no_agent_enrolled(
    http: httpx.Client,
    leasing: ThreadedCoordinator,
    second: ThreadedCoordinator,
    store: redis.Redis,
    clean_redis: str,
) -> None:
    """kill -9 (a crashed container, a lost machine): no SIGTERM, so no DELETE /v1/agents/me;
    the counts and the load generator's list (ZRANGE of the agents) shrink once the lease lapses,
    and the host still running keeps its agents."""
    make_experiment(http, "fleet")
    env = {
        **os.environ,
        "DEXP_COORDINATOR_URL": f"{leasing.url},{second.url}",
        "DEXP_REDIS_URL": clean_redis,
        "DEXP_EXPERIMENT": "fleet",
        "DEXP_ENROLLMENT_SECRET": ENROLLMENT_SECRET,
        "AGENTS_PER_REPLICA": str(PER_EXPERIMENT),
    }
    io = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    hosts = [subprocess.Popen([sys.executable, "-m", "agent"], env=env, **io) for _ in range(2)]
    try:
        until(lambda: len(enrolled(store)) == 2 * PER_EXPERIMENT, "both hosts' agents enrolled")
        before = enrolled(store)
        hosts[0].send_signal(signal.SIGKILL)
        hosts[0].wait()
        lapse_at = redis_ms(store) + LEASE * 1000  # every lease granted before the kill ends
        until(lambda: len(enrolled(store)) == PER_EXPERIMENT, "the killed host's agents gone")
        assert counts(http, "fleet")[:3] == (PER_EXPERIMENT, 0, PER_EXPERIMENT)
        for gone in before - enrolled(store):
            # no stream under any name (its secret went with it)
            assert not store.keys(f"dexp:{{fleet~s*}}:activations:{gone}*")
            assert store.hget(keys.stream_secrets("fleet"), gone) is None
        # past the end of every lease of before the kill: the survivors were renewed
        until(lambda: redis_ms(store) > lapse_at, "every lease of before the kill over")
        survivors = enrolled(store)
        assert len(survivors) == PER_EXPERIMENT and hosts[1].poll() is None
        assert {a.decode() for a in store.zrange(keys.leases("fleet"), 0, -1)} == survivors
    finally:
        for host in hosts:
            host.kill()
            host.wait()


def test_no_lease_lapses_before_renewals_had_a_whole_lease_to_come_through(
    http: httpx.Client,
    leasing: ThreadedCoordinator,
    second: ThreadedCoordinator,
    store: redis.Redis,
) -> None:
    """While Redis fails renewals or sweeps (an outage), the hosts that are alive may not get
    through, so no lease lapses, and none before a whole lease has passed since; then it does."""
    create_experiment(http, id="fleet", arms=["A", "B", "C"], **M3)
    agent, _ = enroll(http, simulated=True, lease=True)
    sweep, other = (c.server.config.app.state.lease_sweep for c in (leasing, second))
    (lapses_at,) = [s for _, s in store.zrange(keys.leases("fleet"), 0, -1, withscores=True)]
    passes: int | None = None  # the sweep's passes at the lease's end

    def outage_past_the_lease() -> bool:
        nonlocal passes
        for each in (sweep, other):  # as a RedisError in a renewal or a sweep does, again
            each.interrupted()
        if redis_ms(store) <= lapses_at:
            passes = sweep.passes
        return passes is not None and sweep.passes >= passes + 2  # two sweeps after its end

    until(outage_past_the_lease, "two sweeps past the lease's end during the outage")
    assert enrolled(store) == {agent.agent_id}  # not lapsed: its renewals could not get through
    until(lambda: not enrolled(store), "lapsed a lease after the outage")


class _RateLimitingFront(BaseHTTPRequestHandler):
    """A front that answers every request 429 with Retry-After: 30, as the production proxy does
    past its per-address rate (deploy/proxy)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"detail": "rate limited"}'
        self.send_response(429)
        self.send_header("Retry-After", "30")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_rate_limited_renewal_never_holds_the_hosts_loop() -> None:
    """A 429 on the renewal comes back at once and the next renewal waits for its Retry-After:
    the agent host's loop, which feeds its agents, never sleeps on it (on main's code the client
    slept the 30 s inside the loop, and a load generator calls 30 s without consumption a stall)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RateLimitingFront)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = CoordinatorClient(f"http://127.0.0.1:{server.server_address[1]}")
        agent = SimpleNamespace(token="agent.token")
        discovery = SimpleNamespace(hosted={"demo": SimpleNamespace(agents={"a1": agent})})
        renewal = Renewal(client, discovery)  # type: ignore[arg-type]
        began = time.monotonic()
        # the condition: the renewal returns before the Retry-After it was given (30 s) ends
        worker = threading.Thread(target=renewal.renew_if_due, args=(began,), daemon=True)
        worker.start()
        worker.join(timeout=25.0)
        assert not worker.is_alive(), "the renewal slept on the 429"
        assert renewal.next_at >= began + 29.0 and renewal.renewals == 0
    finally:
        server.shutdown()
        server.server_close()
