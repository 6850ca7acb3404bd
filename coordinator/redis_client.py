"""Connect to Redis with a retrying ping: containers start in any order."""

from __future__ import annotations

import asyncio
import logging

from redis.asyncio import Redis

log = logging.getLogger(__name__)


async def connect(url: str, attempts: int = 60, delay: float = 0.5) -> Redis:
    redis = Redis.from_url(url, health_check_interval=30)
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
