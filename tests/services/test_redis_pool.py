"""The store's Redis client queues a burst for a connection instead of refusing it.

redis-py's default pool refuses the 101st concurrent command at once (MaxConnectionsError), which
the coordinator answered with a 503, far below DEXP_MAX_CONCURRENCY (1,000): the fleet benchmark
saw votes and stream opens refused with 128 requests in flight. coordinator/redis_client.py's
bounded pool makes each command wait (up to the Redis timeout) for one of MAX_CONNECTIONS.
"""

from __future__ import annotations

import asyncio

from coordinator.redis_client import MAX_CONNECTIONS, connect


def test_a_burst_beyond_the_pool_waits_for_connections(redis_url: str, clean_redis: str) -> None:
    async def burst() -> tuple[list[object], int]:
        redis = await connect(redis_url, timeout=10.0)
        try:
            replies = await asyncio.gather(
                *[redis.incr("dexp:test:burst") for _ in range(4 * MAX_CONNECTIONS)],
                return_exceptions=True,
            )
            return replies, int(await redis.get("dexp:test:burst"))
        finally:
            await redis.aclose()

    replies, total = asyncio.run(burst())
    errors = [r for r in replies if isinstance(r, BaseException)]
    assert errors == [] and total == 4 * MAX_CONNECTIONS
