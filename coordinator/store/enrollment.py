"""Agents: enrollment (open, or with one-time tickets), authentication of their tokens, and what
an agent or the admin may read of them."""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from redis.exceptions import ResponseError

from common import redis_keys as keys
from coordinator.errors import CoordinatorError, Forbidden, NotFound, RateLimited, Unauthorized
from coordinator.metrics import ENROLLMENTS, TICKETS
from coordinator.store.core import (
    TICKET_PREFIX,
    Enrollment,
    StoreCore,
    agent_of,
    digest,
    experiment_of,
    now_ms,
    text,
    ticket_experiment,
    too_late,
)
from coordinator.store.state import epoch_started_at


class Enrollments:
    """Tickets, enrollments, tokens and the views of agents."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core
        self.redis = core.redis

    async def issue_tickets(self, exp: str, count: int, ttl_seconds: int) -> tuple[list[str], int]:
        """`count` one-time enrollment tickets for `exp`, valid `ttl_seconds`, and their expiry
        (unix ms). Each ticket is shown once: only its digest is kept. Expired tickets are purged."""
        await self.core.meta(exp)  # 404 for an experiment that does not exist
        expires_at = now_ms() + ttl_seconds * 1000
        tickets = [f"{TICKET_PREFIX}.{exp}.{secrets.token_urlsafe(32)}" for _ in range(count)]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(keys.tickets(exp), "-inf", now_ms())
            pipe.zadd(keys.tickets(exp), {digest(t): expires_at for t in tickets})
            pipe.exists(keys.meta(exp))
            *_, exists = await pipe.execute()
        if not exists:  # deleted meanwhile: the tickets must not outlive it
            await self.redis.delete(keys.tickets(exp))
            raise NotFound(f"experiment {exp!r} does not exist")
        TICKETS.inc(count)
        return tickets, expires_at

    async def unused_tickets(self, exp: str, digests: list[str]) -> list[str]:
        """Of these ticket digests, those of unused, unexpired tickets of `exp`, in order (one
        pipelined ZSCORE each, on one key). NotFound for an experiment that does not exist."""
        await self.core.meta(exp)
        async with self.redis.pipeline(transaction=False) as pipe:
            for d in digests:
                pipe.zscore(keys.tickets(exp), d)
            expiries = await pipe.execute()
        now = now_ms()
        return [d for d, e in zip(digests, expiries, strict=True) if e is not None and e > now]

    async def ticket_usable(self, ticket: str) -> bool:
        """Whether `ticket` is an unused, unexpired ticket of the experiment it names (a check
        before the request body is read; the enrollment script decides, atomically)."""
        exp = ticket_experiment(ticket)
        if not exp:
            return False
        expiry = await self.redis.zscore(keys.tickets(exp), digest(ticket))
        return expiry is not None and expiry > now_ms()

    async def enroll(
        self,
        exp: str,
        client: str = "",
        ticket: str | None = None,
        simulated: bool = False,
        lease: bool = False,
    ) -> Enrollment:
        """A new agent id and token; the token is returned once and only its digest is kept.
        With a `ticket` (one of `exp`'s), the enrollment consumes it; without, it is open
        enrollment, limited per `client` (the caller's address) in rate and number. A
        `simulated` agent is counted as such (keys.simulated). With a `lease`, the agent leaves
        unless its host renews it (coordinator/store/leases.py)."""
        limits = self.core.limits
        lease_ms = max(1, round(limits.agent_lease_seconds * 1000)) if lease else 0
        if ticket is not None and ticket_experiment(ticket) != exp:
            raise Unauthorized(f"invalid ticket: not a ticket of experiment {exp!r}")
        for _ in range(8):  # the id's random part is 40 bits: a clash is rare, and retried
            agent_id = f"{exp}-{secrets.token_hex(5)}"
            token = f"{agent_id}.{secrets.token_urlsafe(24)}"  # a 192-bit secret
            code, value = await self.core.scripts.enroll(
                meta_key=keys.meta(exp),
                agent_seq_key=keys.agent_seq(exp),
                agents_key=keys.agents(exp),
                credentials_key=keys.credentials(exp),
                enroll_rate_key=keys.enroll_rate(exp),
                enrollers_key=keys.enrollers(exp),
                tickets_key=keys.tickets(exp),
                simulated_key=keys.simulated(exp),
                agent_id=agent_id,
                token_digest=digest(token),
                client=client,
                max_agents=limits.max_agents,
                max_agents_per_client=limits.max_agents_per_client,
                enroll_rate=repr(float(limits.enroll_rate)),
                enroll_burst=limits.enroll_burst,
                ticket_digest="" if ticket is None else digest(ticket),
                changes_channel=keys.changes(exp),
                deadline_ms=await self.core.deadline_ms(),
                simulated="1" if simulated else "0",
                leases_key=keys.leases(exp),
                lease_ms=lease_ms,
                stream_secrets_key=keys.stream_secrets(exp),
                stream_secret=keys.stream_secret(token),
            )
            index, value = int(code), int(value)
            if index == -7:
                raise too_late()
            if index > 0:
                await self._create_stream(
                    keys.activations(exp, agent_id, keys.stream_secret(token))
                )
                if lease:  # after the script (coordinator/store/leases.py says why)
                    await self.redis.sadd(keys.LEASE_INDEX, exp)
                self.core.on_change(exp)
                ENROLLMENTS.labels("open" if ticket is None else "ticket").inc()
                return Enrollment(agent_id, token, index)
            if index == 0:
                raise NotFound(f"experiment {exp!r} does not exist")
            if index == -2:
                raise Forbidden(
                    f"experiment {exp!r} is full: it has its maximum of {value} agents "
                    "(DEXP_MAX_AGENTS)"
                )
            if index == -3:
                raise Forbidden(
                    f"this client enrolled its maximum of {value} agents in experiment {exp!r} "
                    "(DEXP_MAX_AGENTS_PER_CLIENT)"
                )
            if index == -4:
                raise RateLimited(
                    f"too many enrollments from this client: at most {limits.enroll_rate:g} per "
                    f"second (burst {limits.enroll_burst}); retry in {value / 1000:.2f} s",
                    value / 1000,
                )
            if index == -5:
                raise Unauthorized("invalid ticket: unknown or already used")
            if index == -6:
                raise Unauthorized("invalid ticket: expired")
        raise RuntimeError("could not draw a free agent id")

    async def _create_stream(self, stream: str) -> None:
        """The agent's activation stream and its consumer group, created here rather than by the
        agent host, whose Redis user may then only read and acknowledge streams that exist: with
        XGROUP CREATE ... MKSTREAM it could create keys under any name its pattern matches, as
        many as it liked (common/redis_acl.py). Not in the enrollment script: on a Redis Cluster
        the stream lives in another slot (common.redis_keys.activations). Its name carries the
        agent's stream secret, which the script wrote first (keys.stream_secrets)."""
        try:
            await self.redis.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def authenticate(self, token: str, exp: str) -> str:
        """The agent id a bearer token belongs to, if it is enrolled in `exp`."""
        agent = agent_of(token)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.meta(exp))
            pipe.hget(keys.credentials(exp), agent)
            exists, stored = await pipe.execute()
        if not exists:
            raise NotFound(f"experiment {exp!r} does not exist")
        if not agent or stored is None or not hmac.compare_digest(text(stored), digest(token)):
            raise await self.refusal(token, exp)
        return agent

    async def refusal(self, token: str, exp: str) -> CoordinatorError:
        """Why a token is not good for `exp`: a valid token of another experiment's agent is 403
        (the caller is who it says, but not enrolled here); anything else is 401."""
        agent = agent_of(token)
        other = experiment_of(agent)
        if other and other != exp:
            stored = await self.redis.hget(keys.credentials(other), agent)
            if stored is not None and hmac.compare_digest(text(stored), digest(token)):
                return Forbidden(f"this agent is not enrolled in experiment {exp!r}")
        return Unauthorized("invalid agent token")

    async def revoke(self, exp: str, agent: str) -> tuple[bool, int]:
        """Revoke `agent`'s token (lua/revoke.lua): every route answers it 401 from then on.
        (revoked now, the unix ms of its revocation); a second revocation changes nothing.
        NotFound for an unknown experiment, or an agent never enrolled in it."""
        code, at = await self.core.scripts.revoke(
            meta_key=keys.meta(exp),
            agents_key=keys.agents(exp),
            credentials_key=keys.credentials(exp),
            agent_id=agent,
            now_ms=now_ms(),
        )
        if int(code) == 0:
            raise NotFound(f"experiment {exp!r} does not exist")
        if int(code) == -1:
            raise NotFound(f"agent {agent!r} is not enrolled in experiment {exp!r}")
        return int(code) == 1, int(at)

    async def agent_ids(self, exp: str) -> list[str]:
        members: list[bytes] = await self.redis.zrange(keys.agents(exp), 0, -1)  # type: ignore[assignment]
        return [text(a) for a in members]

    async def own_votes(self, token: str) -> dict[str, Any]:
        """What the agent holding `token` may read of itself: its enrollment index and the arms
        whose voter set holds it in the current epoch (so it can re-send a vote the store lost)."""
        agent = agent_of(token)
        exp = experiment_of(agent)
        if not exp:
            raise Unauthorized("invalid agent token")
        await self.authenticate(token, exp)
        n_arms = int((await self.core.meta(exp))["n_arms"])
        fields = ("p_version", "epoch", "version", "epoch_started_at", "created_at")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hmget(keys.meta(exp), *fields)
            pipe.zscore(keys.agents(exp), agent)
            for arm in range(n_arms):
                pipe.sismember(keys.voters(exp, arm), agent)
            values, index, *member = await pipe.execute()
        meta = dict(zip(fields, values, strict=True))
        # the version as published
        version = meta["version"] if meta["p_version"] is None else meta["p_version"]
        now = {"epoch": text(meta["epoch"]), "created_at": text(meta["created_at"])}
        if meta["epoch_started_at"] is not None:
            now["epoch_started_at"] = text(meta["epoch_started_at"])
        return {
            "agent_id": agent,
            "experiment": exp,
            "index": int(index or 0),
            "epoch": int(meta["epoch"]),
            "epoch_started_at": epoch_started_at(now),  # the epoch's identity, with its number
            "version": int(version),
            "voted_against": [arm for arm in range(n_arms) if member[arm]],
        }

    async def agents_page(self, exp: str, after: int, limit: int) -> list[dict[str, Any]]:
        """The admin's view of agents, in enrollment order after index `after`: each one's id,
        index, the arms it voted against this epoch and the resets it made."""
        n_arms = int((await self.core.meta(exp))["n_arms"])
        page: list[tuple[bytes, float]] = await self.redis.zrangebyscore(  # type: ignore[assignment]
            keys.agents(exp), f"({after}", "+inf", start=0, num=limit, withscores=True
        )
        ids = [text(a) for a, _ in page]
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.resets(exp), *ids, *[f"{a}:last" for a in ids])
            pipe.hmget(keys.credentials(exp), *ids)
            for arm in range(n_arms):
                pipe.smismember(keys.voters(exp, arm), ids)
            resets, credentials, *membership = await pipe.execute()
        counts, last = resets[: len(ids)], resets[len(ids) :]
        return [
            {
                "agent_id": agent,
                "index": int(score),
                "voted_against": [arm for arm in range(n_arms) if membership[arm][i]],
                "resets": int(counts[i] or 0),
                "last_reset_at": None if last[i] is None else int(last[i]),
                "revoked_at": revoked_at(credentials[i]),
            }
            for i, (agent, (_, score)) in enumerate(zip(ids, page, strict=True))
        ]


REVOKED = b"revoked:"  # lua/revoke.lua's credential: no token's digest


def revoked_at(credential: bytes | None) -> int | None:
    """When a stored credential was revoked (unix ms); None for a live one."""
    if credential is None or not credential.startswith(REVOKED):
        return None
    return int(credential[len(REVOKED) :])
