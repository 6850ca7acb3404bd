"""The synchronous Redis connection of the agent service and the load generator (the activation
streams they share): connected once Redis answers, to a single Redis or a cluster.

The coordinator has its own, asynchronous one (coordinator/redis_client.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from redis.backoff import AbstractBackoff, ExponentialWithJitterBackoff, NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

# The name its log lines always had (operators filter on it), whoever connects.
log = logging.getLogger("dexp.agent.service")
# The cluster client's own attempts at a command (each after reading the topology again; a
# CLUSTERDOWN reply waits 0.25 s first) before the error reaches the caller: about 5 s of a
# failover ridden out inside one call.
CLUSTER_ATTEMPTS = 20
SyncRedis = redis.Redis | RedisCluster  # a single Redis, or a cluster (DEXP_REDIS_CLUSTER)


class NotedRetry(Retry):
    """redis-py's retry that notes when it had to retry: a read sent again after its reply was
    lost leaves the entries of the lost reply pending, and only a read of the pending entries
    finds them (agent/streams.py, StreamReader.drain_if_due). The connections of a pool share it
    (a pool copies its connections' arguments)."""

    def __init__(self, backoff: AbstractBackoff, retries: int) -> None:
        super().__init__(backoff, retries)
        self.retried = False

    def __deepcopy__(self, memo: dict[int, Any]) -> NotedRetry:
        return self

    def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        def noted(*failure: Any) -> Any:
            self.retried = True
            return fail(*failure)

        return super().call_with_retry(do, noted, *args, **kwargs)


def connect_redis(
    url: str, attempts: int = 120, delay: float = 0.5, cluster: bool = False
) -> SyncRedis:
    """A client of DEXP_REDIS_URL that answered PING, retried while Redis is not there yet. With
    `cluster` (DEXP_REDIS_CLUSTER) redis-py's cluster client, from any node's URL: it reads the
    topology at construction, which is retried the same way."""
    if not cluster:
        # redis-py's default policy (10 retries, 10 ms doubling to 1 s, jittered), noted
        client = redis.Redis.from_url(
            url, retry=NotedRetry(ExponentialWithJitterBackoff(base=0.01, cap=1), 10)
        )
        for attempt in range(attempts):
            try:
                client.ping()
                return client
            except redis.ConnectionError as exc:
                if attempt == attempts - 1:
                    raise
                log.warning("redis not ready (%s); retrying", exc)
                time.sleep(delay)
        return client
    for attempt in range(attempts):
        try:
            node = RedisCluster.from_url(url, retry=NotedRetry(NoBackoff(), CLUSTER_ATTEMPTS))
            node.ping()
            return node
        except (redis.RedisError, RedisClusterException) as exc:  # no node answers yet
            if attempt == attempts - 1:
                raise redis.ConnectionError(f"Redis Cluster at {url}: {exc}") from exc
            log.warning("redis cluster not ready (%s); retrying", exc)
            time.sleep(delay)
    raise redis.ConnectionError(f"Redis Cluster at {url}: no attempt")
