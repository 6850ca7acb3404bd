"""The lease sweep: each coordinator makes the agents whose lease lapsed leave their experiments
(coordinator/store/leases.py, lua/lapse.lua), so that a host killed without SIGTERM (kill -9, a
crashed container, a lost machine) leaves no agent enrolled, fed and counted that nobody runs.

When it runs. A coordinator with no lease to watch sends Redis nothing periodically (as its
webhook dispatcher with no webhook): its sweep wakes when it learns of leases (at start, one SCARD
of the index; when it enrolls an agent with a lease; when it renews one) and sleeps again once a
pass finds no lease left. Awake, it visits the experiments of the index every 1/SWEEPS_PER_LEASE
of a lease (DEXP_AGENT_LEASE_SECONDS), so an agent leaves between one lease and 1.25 leases after
its host's last renewal. Every coordinator on one Redis that knows of leases sweeps: lapse.lua is
atomic and idempotent, so an agent leaves once, whichever comes first; and the coordinators that
got a dead host's renewals are still awake when its leases lapse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.exceptions import RedisError

from common import redis_keys as keys
from coordinator.store import ExperimentStore

log = logging.getLogger("dexp.coordinator")
SWEEPS_PER_LEASE = 4


class LeaseSweep:
    """One coordinator's sweep: a task that sleeps while no lease is known."""

    def __init__(self, store: ExperimentStore, lease_seconds: float) -> None:
        self.leases = store.leases
        self.redis = store.redis
        self.period = lease_seconds / SWEEPS_PER_LEASE
        self.awake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.passes = 0  # sweeps made (what a test waits for)

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    def wake(self) -> None:
        """This coordinator granted or renewed a lease: sweep until none is left."""
        self.awake.set()

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def run(self) -> None:
        try:
            if await self.redis.scard(keys.LEASE_INDEX):  # type: ignore[misc]
                self.wake()
        except (RedisError, OSError):
            self.wake()  # not known: look at the next pass
        while True:
            await self.awake.wait()
            await asyncio.sleep(self.period)
            self.awake.clear()  # a wake() during the pass sets it again
            try:
                if await self.sweep():
                    self.wake()
            except (RedisError, OSError) as exc:
                log.warning("lease sweep: Redis failed (%s); retrying", exc)
                self.wake()

    async def sweep(self) -> bool:
        """One pass over the experiments with leases; whether any lease is left."""
        left = False
        for exp in await self.leases.experiments():
            lapse = await self.leases.lapse(exp)
            left = left or lapse.leases > 0
            if lapse.left:
                log.info(
                    "experiment %s: %d agent(s) left, their lease lapsed (no renewal of their "
                    "host for DEXP_AGENT_LEASE_SECONDS=%g)",
                    exp,
                    len(lapse.left),
                    self.period * SWEEPS_PER_LEASE,
                )
        self.passes += 1
        return left
