"""Shared reads: concurrent reads of one key make one Redis round trip.

A reconnection storm (10,000 devices opening their event stream within a second, issue 36) made
one read per request of the same field of the same experiment; with DEXP_MAX_CONCURRENCY requests
in flight they waited for the store's MAX_CONNECTIONS Redis connections and, on a loaded machine,
failed after the pool's timeout (503, "No connection available": 985 of the storm's refusals in
benchmarks/bench_idle_sockets.py). Shared, they make one read at a time per key.

Each caller still gets a value read after it asked: a caller that comes while a read is in flight
waits for the next one, which starts when that one ends and answers every caller that came
meanwhile. So a shared read is never staler than a read of the caller's own, and a key costs at
most two reads in flight (one running, one waiting), whatever the number of callers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SharedReads(Generic[K, V]):
    """`read(key)`, shared between concurrent callers of the same key."""

    def __init__(self, read: Callable[[K], Awaitable[V]]) -> None:
        self.read = read
        self.running: dict[K, asyncio.Task[V]] = {}  # the read in flight, per key
        self.waiting: dict[K, asyncio.Task[V]] = {}  # the next one, for those who came since

    async def get(self, key: K) -> V:
        task = self.waiting.get(key)
        if task is None:
            before = self.running.get(key)
            task = asyncio.create_task(self._run(key, before))
            (self.waiting if before is not None else self.running)[key] = task
        # a caller that leaves (its client went away) does not cancel the others' read
        return await asyncio.shield(task)

    async def _run(self, key: K, before: asyncio.Task[V] | None) -> V:
        me = asyncio.current_task()
        if before is not None:
            await asyncio.wait({before})  # its outcome is its callers'
            if self.waiting.get(key) is me:
                del self.waiting[key]
            self.running[key] = me  # type: ignore[assignment]
        try:
            return await self.read(key)
        finally:
            if self.running.get(key) is me:
                del self.running[key]
