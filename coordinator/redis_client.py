"""Connect to Redis with a retrying ping: containers start in any order."""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)


async def connect(url: str, attempts: int = 60, delay: float = 0.5) -> Redis:
    # A connection Redis dropped (restart, CLIENT KILL, idle timeout) is reconnected and the command
    # sent again, a few times, instead of failing the request with a 500. Every script is safe to
    # repeat: a vote applied twice is a duplicate, and an enrollment whose reply was lost leaves at
    # worst one agent nobody holds the token of (its id is then taken: a new one is drawn).
    redis = Redis.from_url(
        url,
        health_check_interval=30,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.02), 3),
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
    )
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
