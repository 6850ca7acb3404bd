"""Connect to Redis with a retrying ping: containers start in any order.

With DEXP_REDIS_CLUSTER the client is redis-py's cluster client, built from DEXP_REDIS_URL (any
node's URL: it discovers the others with CLUSTER SLOTS). It sends each command to the master of
its key's slot, follows MOVED and ASK redirections, and on a connection error (a master killed)
reads the topology again and retries, so that after a failover the promoted replica serves the
slots. Everything the coordinator sends keeps to one slot per script or transaction
(coordinator/store/), which is what a cluster requires.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

AnyRedis = Redis | RedisCluster  # a single Redis, or a cluster (DEXP_REDIS_CLUSTER)
MAX_CONNECTIONS = 256  # the store's Redis connections in one process (a command waits for one)


def client(
    url: str,
    cluster: bool = False,
    name: str | None = None,
    timeout: float | None = 3.0,
    bounded: bool = False,
) -> AnyRedis:
    """The client of DEXP_REDIS_URL, not connected yet; `name`: its connections' CLIENT SETNAME
    (what CLIENT LIST shows them as); `timeout` (DEXP_REDIS_TIMEOUT_SECONDS): how long a
    connection or a command may take before it fails; `bounded`: at most MAX_CONNECTIONS
    connections, a command waiting for one (the store's client, which every request uses).

    A connection Redis dropped (restart, CLIENT KILL, idle timeout) is reconnected and the command
    sent again, a few times, instead of failing the request with a 500. Every script is safe to
    repeat: a vote applied twice is a duplicate, and an enrollment whose reply was lost leaves at
    worst one agent nobody holds the token of (its id is then taken: a new one is drawn). On a
    cluster the same Retry bounds the attempts, each after the topology is read again. A command
    that times out is not sent again: a Redis that hangs (SIGSTOP, a slow disk) costs a request
    one `timeout`, then the 503 with Retry-After, instead of holding it for as long as the hang."""
    # only a lost connection is retried (Retry's default also retries timeouts)
    errors: list[type[RedisError]] = [RedisConnectionError]
    retry = Retry(ExponentialBackoff(cap=0.5, base=0.02), 3, supported_errors=tuple(errors))
    options: dict[str, Any] = {
        "health_check_interval": 30,
        "retry": retry,
        "retry_on_error": errors,
        "client_name": name,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
    }
    if cluster:
        redis = RedisCluster.from_url(url, **options)
        _drop_keys_option(redis)
        return redis
    if not bounded:
        return Redis.from_url(url, **options)
    # A bounded pool that waits (for up to `timeout`) for a free connection: redis-py's default
    # pool refuses the 101st concurrent command at once (MaxConnectionsError, a 503 for the
    # request), far below DEXP_MAX_CONCURRENCY; a burst of votes now queues for a connection.
    pool = BlockingConnectionPool.from_url(
        url, max_connections=MAX_CONNECTIONS, timeout=timeout, **options
    )
    return Redis.from_pool(pool)  # closing the client closes its pool


def _drop_keys_option(redis: RedisCluster) -> None:
    """redis-py's async cluster transaction (8.1) hands each command's `keys` option, a hint for
    its client-side cache that every other path removes first, to the command's response callback,
    and most callbacks take no such option: SMEMBERS or HGETALL inside MULTI/EXEC raised TypeError
    (coordinator/store/ reads an experiment in such transactions). Each callback now
    drops it first; elsewhere it is already gone, so nothing else changes."""
    callbacks = redis.response_callbacks
    for name, callback in list(callbacks.items()):
        callbacks[name] = functools.partial(_without_keys, callback)


def _without_keys(callback: Callable[..., Any], response: Any, **options: Any) -> Any:
    options.pop("keys", None)
    return callback(response, **options)


async def connect(
    url: str,
    attempts: int = 60,
    delay: float = 0.5,
    cluster: bool = False,
    timeout: float | None = 3.0,
) -> AnyRedis:
    redis = client(url, cluster, timeout=timeout, bounded=True)
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
