"""The lease sweep: each coordinator makes the agents whose lease lapsed leave their experiments
(coordinator/store/leases.py, lua/lapse.lua), so that a host killed without SIGTERM (kill -9, a
crashed container, a lost machine) leaves no agent enrolled, fed and counted that nobody runs.

When it runs. A coordinator with no lease to watch sends Redis nothing periodically (as its
webhook dispatcher with no webhook): its sweep wakes when it learns of leases (at start, one SCARD
of the index; when it enrolls an agent with a lease; when it renews one) and sleeps again once a
pass finds no lease left. Awake, it visits the experiments of the index every 1/SWEEPS_PER_LEASE
of a lease (DEXP_AGENT_LEASE_SECONDS), at most every SWEEP_MAX_SECONDS, so an agent leaves between
one lease and a lease plus that after its host's last renewal; and once the last lease is gone,
the sweep asks Redis once more at most that much later, then sleeps. Every coordinator on one Redis that knows of leases sweeps: lapse.lua is
atomic and idempotent, so an agent leaves once, whichever comes first; and the coordinators that
got a dead host's renewals are still awake when its leases lapse.

A lapse is evidence of a dead host only if its renewals could have come through: so a sweep makes
no agent leave until the path has been open for a whole lease, since this coordinator started and
since Redis last failed it (a sweep's or a renewal's command). After an outage of the
coordinators or of Redis longer than a lease, the hosts that are alive renew first, and only the
agents of the dead ones leave.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from redis.exceptions import RedisError

from common import redis_keys as keys
from coordinator.metrics import LAPSED
from coordinator.store import ExperimentStore

log = logging.getLogger("dexp.coordinator")
SWEEPS_PER_LEASE = 4
SWEEP_MAX_SECONDS = 2.0  # one script per experiment with leases and coordinator, every 2 s at most


class LeaseSweep:
    """One coordinator's sweep: a task that sleeps while no lease is known."""

    def __init__(self, store: ExperimentStore, lease_seconds: float) -> None:
        self.leases = store.leases
        self.redis = store.redis
        self.lease_seconds = lease_seconds
        self.period = min(lease_seconds / SWEEPS_PER_LEASE, SWEEP_MAX_SECONDS)
        self.open_since = time.monotonic()  # renewals could come through since then
        self.awake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.passes = 0  # sweeps made (what a test waits for)

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    def wake(self) -> None:
        """This coordinator granted or renewed a lease: sweep until none is left."""
        self.awake.set()

    def interrupted(self) -> None:
        """Redis failed a renewal or a sweep: renewals may have been lost, so no lease lapses
        before a whole lease has passed from now."""
        self.open_since = time.monotonic()

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
                self.interrupted()
                self.wake()

    async def sweep(self) -> bool:
        """One pass over the experiments with leases; whether any lease is left."""
        self.passes += 1
        if time.monotonic() - self.open_since < self.lease_seconds:
            return True  # renewals may have been lost: none lapses yet (module docstring)
        left = False
        for exp in await self.leases.experiments():
            lapse = await self.leases.lapse(exp)
            left = left or lapse.leases > 0
            if lapse.left:
                LAPSED.inc(len(lapse.left))
                log.info(
                    "experiment %s: %d agent(s) left, their lease lapsed (no renewal of their "
                    "host for DEXP_AGENT_LEASE_SECONDS=%g)",
                    exp,
                    len(lapse.left),
                    self.lease_seconds,
                )
        return left
