"""The agent service on a Redis Cluster, in this process (its loop in a thread): reads grouped by
hash tag over the masters, a consumer group lost (as a failover can lose a group created just
before it): its experiment dropped and hosted again with new agents, a deleted experiment dropped
without bringing its streams back."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import numpy as np
import pytest
from redis.cluster import RedisCluster

from agent.host import AgentService
from agent.settings import AgentSettings
from common import redis_keys as keys
from common.wire import encode_rewards
from dexp.redis_cluster import LocalCluster
from load_generator.streams import trim_acknowledged
from tests.services.helpers import (
    ENROLLMENT_SECRET,
    activation_streams,
    admin_headers,
    create_experiment,
)

from .helpers import keys_on

ARMS = ["A", "B", "C"]
MEANS = np.array([0.9, 0.5, 0.1])
M2 = {"delta": 0.5**1.5, "eta": 0.5}  # DE: M = 2
PER_EXPERIMENT = 6
# Every wait is for a condition; this deadline only keeps a hang from blocking the suite (a loaded
# machine runs the service and the coordinator several times slower).
DEADLINE = 120.0


@contextmanager
def running(service: AgentService) -> Iterator[AgentService]:
    """The service's loop in a thread; an exception in it fails the test."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield service
        assert thread.is_alive() and not errors, errors
    finally:
        service.stop()
        thread.join(timeout=DEADLINE)
    assert not thread.is_alive() and not errors, errors


def until(check: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not after {timeout:g} s"
        time.sleep(0.05)


def feed(
    redis: RedisCluster,
    client: httpx.Client,
    experiment: str,
    timeout: float = DEADLINE,
    read: set[str] | None = None,
) -> None:
    """Activations for every agent of `experiment` (Bernoulli rewards, MEANS), as the load
    generator writes them, until it is identified; the best arm must be arm 0. `read`: only the
    agents of these streams (those the service reads)."""
    rng = np.random.default_rng(3)
    deadline = time.monotonic() + timeout
    streams = activation_streams(redis, experiment)
    streams = [s for s in streams if read is None or s in read]
    while client.get(f"/v1/experiments/{experiment}/best-arm").json()["status"] == "exploring":
        assert time.monotonic() < deadline, f"{experiment} not identified in {timeout:g} s"
        if sum(trim_acknowledged(redis, streams)) < 100 * len(streams):
            rows = encode_rewards((rng.random((50 * len(streams), 3)) < MEANS) * 1.0, bounded=True)
            pipe = redis.pipeline(transaction=False)
            for i, row in enumerate(rows):
                pipe.xadd(streams[i % len(streams)], {"t": i, "r": row})
            pipe.execute()
        time.sleep(0.05)
    best = client.get(f"/v1/experiments/{experiment}/best-arm").json()
    assert best["status"] == "identified" and best["best_arm"]["index"] == 0, best


def settings(cluster: LocalCluster, coordinator_url: str, **extra: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "coordinator_url": coordinator_url,
        "redis_url": cluster.url,
        "redis_cluster": True,
        "experiment": "*",
        "AGENTS_PER_REPLICA": PER_EXPERIMENT,
        "enrollment_secret": ENROLLMENT_SECRET,
        "seed": 5,
        "poll_seconds": 0.5,
        "discover_seconds": 0.2,
        "redis_retry_max_seconds": 0.2,
        **extra,
    }
    return AgentSettings(**values)


def test_agents_on_the_cluster_recover_a_lost_group_and_drop_a_deleted_experiment(
    client: httpx.Client,
    healthy_cluster: LocalCluster,
    cluster_client: RedisCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="dexp")
    for experiment in ("svc-red", "svc-blue"):
        create_experiment(client, id=experiment, arms=ARMS, **M2)
    service = AgentService(settings(healthy_cluster, str(client.base_url)))
    with running(service):
        until(lambda: set(service.discovery.hosted) == {"svc-red", "svc-blue"}, "both hosted")
        assert service.reader.cluster
        streams = set(service.discovery.streams)
        assert len({keys.hash_tag(s) for s in streams}) > 2  # read in several slot groups
        feed(cluster_client, client, "svc-red")

        # A consumer group lost (a failover right after its creation can lose it): the next read
        # fails with NOGROUP, the service finds the experiment alive but cannot recreate the
        # group (its Redis user creates nothing: the coordinator does, at enrollment), so that
        # agent leaves and its next discovery round enrolls another in its place.
        lost = sorted(s for s in streams if s.startswith("dexp:{svc-blue~"))[0]
        cluster_client.xgroup_destroy(lost, keys.ACTIVATION_GROUP)
        until(lambda: "have no activation stream" in caplog.text, "the lost agent replaced")
        until(
            lambda: (
                lost not in service.discovery.streams
                and len(service.discovery.hosted["svc-blue"].agents) == PER_EXPERIMENT
            ),
            "svc-blue has all its agents again",
        )
        feed(cluster_client, client, "svc-blue", read=set(service.discovery.streams))

        assert client.delete("/v1/experiments/svc-red", headers=admin_headers()).status_code == 204
        until(
            lambda: set(service.discovery.hosted) == {"svc-blue"}, "the deleted experiment dropped"
        )
        # A few more rounds of discovery (each in a turn of the loop, with its reads): none
        # brings the deleted experiment's streams back.
        dropped = service.discovery.rounds
        until(lambda: service.discovery.rounds >= dropped + 3, "3 discovery rounds after the drop")
        assert not set().union(*keys_on(healthy_cluster, "dexp:{svc-red*").values())
    log = caplog.text
    assert "consumer group missing" in log
    assert "experiment svc-blue: 1 agent(s) have no activation stream" in log
    assert "experiment svc-red was deleted" in log
    assert "Traceback" not in log
