"""Agents that leave: an agent whose host stops says so with its own token (DELETE
/v1/agents/me), and lua/leave.lua takes it out of the experiment at once: no longer enrolled (the
load generator stops feeding it, the enrollment limit frees its place), its token dead, its
activation stream deleted. What it said this epoch stands, and it stays counted in N for it (the
script says why); docs/SCALING.md, "Agents that come and go"."""

from __future__ import annotations

from dataclasses import dataclass

from common import redis_keys as keys
from coordinator.errors import NotFound, Unauthorized
from coordinator.store.core import StoreCore, agent_of, digest, experiment_of, too_late


@dataclass(frozen=True)
class Departure:
    agent_id: str
    experiment: str
    counted: bool  # its votes of this epoch stand, so it still counts in N until a reset


class Departures:
    """The leave operation (its own script: the admin's revocation of a token is another)."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core
        self.redis = core.redis

    async def leave(self, token: str) -> Departure:
        """The agent holding `token` leaves its experiment (Unauthorized if the token is not an
        enrolled agent's: unknown, wrong, or the agent left already)."""
        agent = agent_of(token)
        exp = experiment_of(agent)
        if not exp:
            raise Unauthorized("invalid agent token")
        n_arms = int((await self.core.meta(exp))["n_arms"])  # NotFound: no such experiment
        code, counted = await self.core.scripts.leave(
            meta_key=keys.meta(exp),
            agents_key=keys.agents(exp),
            credentials_key=keys.credentials(exp),
            settled_key=keys.settled(exp),
            reporters_key=keys.reporters(exp),
            simulated_key=keys.simulated(exp),
            voters_keys=[keys.voters(exp, arm) for arm in range(n_arms)],
            agent_id=agent,
            token_digest=digest(token),
            changes_channel=keys.changes(exp),
            deadline_ms=await self.core.deadline_ms(),
        )
        code = int(code)
        if code == -7:
            raise too_late()
        if code == 0:
            raise NotFound(f"experiment {exp!r} does not exist")
        if code < 0:
            raise Unauthorized("invalid agent token (or the agent has left its experiment)")
        self.core.on_change(exp)
        # Its stream, in another slot on a cluster (as enrollment creates it): nobody reads it now.
        await self.redis.delete(keys.activations(exp, agent), keys.legacy_activations(exp, agent))
        return Departure(agent, exp, bool(int(counted)))
