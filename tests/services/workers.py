"""A vote worker for OS threads and spawned processes: light imports (no FastAPI, no uvicorn)."""

from __future__ import annotations

import asyncio

from redis.asyncio import BlockingConnectionPool, Redis

from coordinator.store import ExperimentStore


def send_votes(url: str, exp: str, votes: list[tuple[str, int]], connections: int) -> list[str]:
    """Send (agent token, arm) votes in epoch 0 through ExperimentStore, `connections` at a time,
    in a fresh event loop with its own connection pool; return the outcomes in order."""

    async def main() -> list[str]:
        pool = BlockingConnectionPool.from_url(url, max_connections=connections, timeout=30)
        client = Redis.from_pool(pool)
        try:
            store = ExperimentStore(client)
            sem = asyncio.Semaphore(connections)

            async def one(token: str, arm: int) -> str:
                async with sem:
                    return str((await store.vote(exp, token, arm, 0)).outcome)

            return list(await asyncio.gather(*(one(a, arm) for a, arm in votes)))
        finally:
            await client.aclose()

    return asyncio.run(main())
