"""Agents that leave: an agent whose host stops says so with its own token (DELETE
/v1/agents/me), and lua/leave.lua takes it out of the experiment at once: no longer enrolled (the
load generator stops feeding it, the enrollment limit frees its place), its token dead, its
activation stream deleted. What it said this epoch stands, and it stays counted in N for it
(lua/departure.lua says why); docs/SCALING.md, "Agents that come and go". An agent whose lease
lapsed leaves the same way (coordinator/store/leases.py, lua/lapse.lua)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common import redis_keys as keys
from coordinator.errors import NotFound, Unauthorized
from coordinator.store.core import StoreCore, agent_of, digest, experiment_of, text, too_late


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
            **departure_keys(exp, n_arms),
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
        await delete_streams(self.core, exp, [agent])
        return Departure(agent, exp, bool(int(counted)))


def departure_keys(exp: str, n_arms: int) -> dict[str, Any]:
    """The keys an agent's departure touches (lua/departure.lua), by the scripts' input names."""
    return {
        "meta_key": keys.meta(exp),
        "agents_key": keys.agents(exp),
        "credentials_key": keys.credentials(exp),
        "settled_key": keys.settled(exp),
        "reporters_key": keys.reporters(exp),
        "simulated_key": keys.simulated(exp),
        "leases_key": keys.leases(exp),
        "voters_keys": [keys.voters(exp, arm) for arm in range(n_arms)],
    }


async def delete_streams(core: StoreCore, exp: str, agents: list[str]) -> None:
    """The activation streams of agents that left: nobody reads them now. After the script: on a
    cluster they live in other slots (as enrollment creates them). Each stream is named from its
    secret (keys.stream_secrets), which goes after the stream; and the names an older version gave
    them go too."""
    if not agents:
        return
    found = await core.redis.hmget(keys.stream_secrets(exp), agents)  # type: ignore[misc]
    await core.redis.delete(*stream_names(exp, dict(zip(agents, found, strict=True))))
    await core.redis.hdel(keys.stream_secrets(exp), *agents)  # type: ignore[misc]


def stream_names(exp: str, secrets: dict[str, bytes | str | None]) -> list[str]:
    """Every name the activation streams of these agents (id -> stream secret, None if it has
    none) may have: each one's, and the names older versions gave them (without the secret,
    without the shard tag)."""
    names = [keys.activations(exp, a, text(s)) for a, s in secrets.items() if s is not None]
    names += [keys.unsecret_activations(exp, a) for a in secrets]
    return names + [keys.legacy_activations(exp, a) for a in secrets]
