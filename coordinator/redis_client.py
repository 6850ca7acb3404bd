"""Connect to Redis with a retrying ping: containers start in any order.

With DEXP_REDIS_CLUSTER the client is redis-py's cluster client, built from DEXP_REDIS_URL (any
node's URL: it discovers the others with CLUSTER SLOTS). It sends each command to the master of
its key's slot, follows MOVED and ASK redirections, and on a connection error (a master killed)
reads the topology again and retries, so that after a failover the promoted replica serves the
slots. Everything the coordinator sends keeps to one slot per script or transaction
(coordinator/store.py), which is what a cluster requires.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

AnyRedis = Redis | RedisCluster  # a single Redis, or a cluster (DEXP_REDIS_CLUSTER)


def client(url: str, cluster: bool = False, name: str | None = None) -> AnyRedis:
    """The client of DEXP_REDIS_URL, not connected yet; `name`: its connections' CLIENT SETNAME
    (what CLIENT LIST shows them as).

    A connection Redis dropped (restart, CLIENT KILL, idle timeout) is reconnected and the command
    sent again, a few times, instead of failing the request with a 500. Every script is safe to
    repeat: a vote applied twice is a duplicate, and an enrollment whose reply was lost leaves at
    worst one agent nobody holds the token of (its id is then taken: a new one is drawn). On a
    cluster the same Retry bounds the attempts, each after the topology is read again."""
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.02), 3)
    errors: list[type[Exception]] = [RedisConnectionError, RedisTimeoutError]
    if cluster:
        redis = RedisCluster.from_url(
            url, health_check_interval=30, retry=retry, retry_on_error=errors, client_name=name
        )
        _drop_keys_option(redis)
        return redis
    return Redis.from_url(
        url, health_check_interval=30, retry=retry, retry_on_error=errors, client_name=name
    )


def _drop_keys_option(redis: RedisCluster) -> None:
    """redis-py's async cluster transaction (8.1) hands each command's `keys` option, a hint for
    its client-side cache that every other path removes first, to the command's response callback,
    and most callbacks take no such option: SMEMBERS or HGETALL inside MULTI/EXEC raised TypeError
    (coordinator/store.py's reads of an experiment are such transactions). Each callback now
    drops it first; elsewhere it is already gone, so nothing else changes."""
    callbacks = redis.response_callbacks
    for name, callback in list(callbacks.items()):
        callbacks[name] = functools.partial(_without_keys, callback)


def _without_keys(callback: Callable[..., Any], response: Any, **options: Any) -> Any:
    options.pop("keys", None)
    return callback(response, **options)


async def connect(
    url: str, attempts: int = 60, delay: float = 0.5, cluster: bool = False
) -> AnyRedis:
    redis = client(url, cluster)
    for attempt in range(1, attempts + 1):
        try:
            await redis.ping()
            return redis
        except (ConnectionError, OSError, Exception) as exc:  # redis raises its own ConnectionError
            if attempt == attempts:
                raise
            log.warning("redis not ready (%s), retrying in %.1fs", exc, delay)
            await asyncio.sleep(delay)
    raise RuntimeError("unreachable")
