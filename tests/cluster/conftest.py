"""Fixtures of the Redis Cluster tests: one real local cluster for the session (3 masters, each
with a replica, a password; dexp/redis_cluster.py) and the coordinator on it over real HTTP.

Each test uses experiment ids of its own. A test that kills a master starts the node again
afterwards: it rejoins as a replica, and the cluster is back to 3 masters with a replica each.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from redis.cluster import RedisCluster

from dexp.redis_cluster import LocalCluster, start_cluster
from tests.services.helpers import ThreadedCoordinator, coordinator, coordinator_settings

from .helpers import PASSWORD


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    nodes = start_cluster(3, 1, directory=tmp_path_factory.mktemp("cluster"), password=PASSWORD)
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
def healthy_cluster(cluster: LocalCluster) -> LocalCluster:
    """The session's cluster, healthy (every slot served, replicas in sync) before the test."""
    cluster.wait_healthy()
    return cluster


@pytest.fixture(scope="session")
def coordinator_server(cluster: LocalCluster) -> Iterator[ThreadedCoordinator]:
    """The coordinator on the cluster (DEXP_REDIS_CLUSTER), no default experiment."""
    settings = coordinator_settings(cluster.url, redis_cluster=True, experiment="")
    with coordinator(settings) as server:
        yield server


@pytest.fixture
def client(
    coordinator_server: ThreadedCoordinator, healthy_cluster: LocalCluster
) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=coordinator_server.url, timeout=30.0, trust_env=False) as http:
        yield http


@pytest.fixture
def cluster_client(healthy_cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(healthy_cluster.url)
    try:
        yield client
    finally:
        client.close()
