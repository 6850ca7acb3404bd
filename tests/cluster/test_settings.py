"""DEXP_REDIS_CLUSTER in each service: any node's URL will do (a replica's too), a bad value stops
the service with status 2 and one line, and a cluster that never answers is a plain connection
error after the retries."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from clients.redis import connect_redis
from common import redis_keys as keys
from coordinator.redis_client import connect
from dexp.redis_cluster import ClusterNode, LocalCluster
from load_generator.lease import Lease

from .helpers import PASSWORD


def node_url(node: ClusterNode) -> str:
    return f"redis://:{PASSWORD}@{node.host}:{node.port}"


def test_any_nodes_url_reaches_every_slot(healthy_cluster: LocalCluster) -> None:
    """From a replica's URL, both clients find the masters: a key of every master is written."""
    (replica, *_) = healthy_cluster.replicas()
    client = connect_redis(node_url(replica), cluster=True)
    try:
        names = [f"dexp:{{settings-{k}}}:probe" for k in range(30)]
        owners = {healthy_cluster.master_of(name).port for name in names}
        assert len(owners) == 3  # the keys live on every master
        for name in names:
            client.set(name, "1", ex=60)
        assert all(client.get(name) == b"1" for name in names)
    finally:
        client.close()

    async def through_the_coordinators_client() -> list[Any]:
        redis_async = await connect(node_url(replica), cluster=True)
        try:
            return [await redis_async.get(name) for name in names]
        finally:
            await redis_async.aclose()

    assert asyncio.run(through_the_coordinators_client()) == [b"1"] * len(names)


def test_the_lease_finds_out_it_is_on_a_cluster(healthy_cluster: LocalCluster) -> None:
    """The load generator's lease (one key, in the experiment's slot) works whichever node's URL
    it gets, told or not that it is a cluster."""
    for exp, told in (("lease-told", True), ("lease-found", None)):
        lease = Lease(healthy_cluster.url, exp, ttl_seconds=5.0, cluster=told)
        try:
            lease.acquire(wait_seconds=1)
            assert lease.held
            client = RedisCluster.from_url(healthy_cluster.url)
            try:
                assert client.pttl(keys.load_generator(exp)) > 0
            finally:
                client.close()
        finally:
            lease.close()


def test_a_cluster_that_never_answers_is_a_connection_error() -> None:
    with pytest.raises(redis.ConnectionError, match="Redis Cluster at"):
        connect_redis("redis://127.0.0.1:1", attempts=2, delay=0.0, cluster=True)


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("agent", "dexp agent: invalid configuration, not starting: DEXP_REDIS_CLUSTER: "),
        (
            "coordinator",
            "dexp coordinator: invalid configuration, not starting: DEXP_REDIS_CLUSTER",
        ),
        ("load_generator", "error: invalid configuration: DEXP_REDIS_CLUSTER: "),
    ],
)
def test_a_bad_value_exits_2_with_one_line(module: str, line: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEXP_")}
    env["DEXP_REDIS_CLUSTER"] = "maybe"
    done = subprocess.run(
        [sys.executable, "-m", module], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), done.stderr
