"""Leases: an agent enrolled with `lease: true` (the agent service's) stays enrolled only while its
host renews it (POST /v1/agents/leases, lua/renew.lua); once a whole lease (DEXP_AGENT_LEASE_SECONDS)
passed without a renewal, its host is taken to be gone (killed, crashed, cut off: no SIGTERM, so
no DELETE /v1/agents/me) and the sweep makes it leave with the same effect (lua/lapse.lua). A
device enrolls without a lease: it may visit once and never come back, and its report must still
count (docs/SCALING.md, "Agents that come and go").

The experiments with leases are listed in keys.LEASE_INDEX, outside every slot: enrollment adds
the experiment after its script, a sweep that finds no lease left removes it and then looks
again, so that an enrollment between the two is never lost from the index; and a renewal adds it
again (one SADD per experiment and request), so that a coordinator that died between an
enrollment and its SADD loses no experiment for longer than a renewal period."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from common import redis_keys as keys
from coordinator.store.core import StoreCore, agent_of, digest, experiment_of, text
from coordinator.store.departures import delete_streams, departure_keys

LAPSE_BATCH = 100  # agents leaving per run of lapse.lua: a short script, run again while full
OUTCOMES = {1: "renewed", 0: "no_lease", -1: "gone"}


@dataclass(frozen=True)
class Lapse:
    """What one sweep of an experiment did: the agents that left, and the leases left in it."""

    left: list[str]
    leases: int


class Leases:
    """Renewals, the sweep of one experiment, and the index of experiments with leases."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core
        self.redis = core.redis

    @property
    def lease_ms(self) -> int:
        return max(1, round(self.core.limits.agent_lease_seconds * 1000))

    async def renew(self, tokens: list[str]) -> list[str]:
        """Renew the lease of each token's agent; one outcome per token, in order: renewed,
        no_lease (the token is good, its agent has no lease) or gone (not an enrolled agent's
        token: unknown, left, lapsed, revoked). One script per experiment the tokens name."""
        outcomes = ["gone"] * len(tokens)
        by_experiment: dict[str, list[int]] = defaultdict(list)
        for i, token in enumerate(tokens):
            exp = experiment_of(agent_of(token))
            if exp:
                by_experiment[exp].append(i)
        for exp, positions in by_experiment.items():
            replies = await self.core.scripts.renew(
                leases_key=keys.leases(exp),
                credentials_key=keys.credentials(exp),
                lease_ms=self.lease_ms,
                agent_ids=",".join(agent_of(tokens[i]) for i in positions),
                token_digests=",".join(digest(tokens[i]) for i in positions),
            )
            for i, reply in zip(positions, replies, strict=True):
                outcomes[i] = OUTCOMES[int(reply)]
            if 1 in (int(r) for r in replies):
                await self.granted(exp)  # listed again whatever befell the index (see above)
        return outcomes

    async def granted(self, exp: str) -> None:
        """An agent of `exp` got a lease: the sweeps visit `exp` (after the enrollment)."""
        await self.redis.sadd(keys.LEASE_INDEX, exp)

    async def experiments(self) -> list[str]:
        """The experiments whose leases the sweeps visit."""
        members = await self.redis.smembers(keys.LEASE_INDEX)  # type: ignore[misc]
        return sorted(text(m) for m in members)

    async def lapse(self, exp: str) -> Lapse:
        """Make the agents of `exp` whose lease lapsed leave (lua/lapse.lua, in batches), delete
        their streams, and drop `exp` from the index once it has no lease left."""
        left: list[str] = []
        raw = await self.redis.hget(keys.meta(exp), "n_arms")
        n_arms = int(raw) if raw is not None else 0
        while True:
            reply = await self.core.scripts.lapse(
                **departure_keys(exp, n_arms),
                batch=LAPSE_BATCH,
                changes_channel=keys.changes(exp),
            )
            leases, batch = int(reply[0]), [text(a) for a in reply[1:]]
            left += batch
            if len(batch) < LAPSE_BATCH:
                break
        if left:
            self.core.on_change(exp)
            await delete_streams(self.core, exp, left)
        if not leases:
            await self.redis.srem(keys.LEASE_INDEX, exp)
            if await self.redis.zcard(keys.leases(exp)):  # granted meanwhile: keep it listed
                await self.granted(exp)
        return Lapse(left, leases)
