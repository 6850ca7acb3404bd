"""The experiment store: every read and write of an experiment's state in Redis.

Votes, enrollments, resets and creations are Lua scripts (lua/ beside this file) registered once and
run with EVALSHA, so each one is atomic; no state lives in the coordinator process. A vote is one
round trip: the script checks the agent's token digest (kept in the experiment's hash slot) and the
agent's rate limit itself. Rate limits are GCRA token buckets in Redis (lua/gcra.lua, prepended to
the scripts that use it), so every coordinator replica enforces the same ones.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.errors import ParameterError
from common.votes import VoteOutcome
from coordinator.errors import (
    Conflict,
    CoordinatorError,
    Forbidden,
    Invalid,
    NotFound,
    RateLimited,
    Unauthorized,
)

_LUA = Path(__file__).with_name("lua")
SERVICE_ALGORITHMS = ("de", "ce", "dp-mase")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _script(name: str, rate_limited: bool = False) -> str:
    text = (_LUA / name).read_text()
    return (_LUA / "gcra.lua").read_text() + "\n" + text if rate_limited else text


@dataclass(frozen=True)
class Limits:
    """Abuse limits (0: none). Rates are per second, bursts the requests allowed at once."""

    vote_rate: float = 0.0  # per agent
    vote_burst: int = 1
    enroll_rate: float = 0.0  # per client address and experiment
    enroll_burst: int = 1
    max_agents: int = 0  # per experiment
    max_agents_per_client: int = 0  # per client address and experiment

    @classmethod
    def of(cls, settings: Any) -> Limits:
        """The limits a coordinator.settings.Settings sets."""
        return cls(
            vote_rate=settings.vote_rate,
            vote_burst=settings.vote_burst,
            enroll_rate=settings.enroll_rate,
            enroll_burst=settings.enroll_burst,
            max_agents=settings.max_agents,
            max_agents_per_client=settings.max_agents_per_client,
        )


@dataclass(frozen=True)
class VoteResult:
    outcome: VoteOutcome | str
    version: int
    epoch: int
    votes: int

    @property
    def counted(self) -> bool:
        return self.outcome in (VoteOutcome.COUNTED, VoteOutcome.ELIMINATED, VoteOutcome.LAST_ARM)

    @property
    def eliminated(self) -> bool:
        return self.outcome == VoteOutcome.ELIMINATED


@dataclass(frozen=True)
class Enrollment:
    agent_id: str
    token: str
    index: int


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _agent_of(token: str) -> str:
    """The agent id a token names: tokens are '<agent id>.<secret>' (neither part has a dot)."""
    agent, dot, secret = token.partition(".")
    return agent if dot and secret else ""


def _experiment_of(agent: str) -> str:
    """The experiment an agent id names: ids are '<experiment>-<hex>'."""
    return agent.rsplit("-", 1)[0] if "-" in agent else ""


class ExperimentStore:
    def __init__(self, redis: Redis, limits: Limits | None = None) -> None:
        self.redis = redis
        self.limits = limits or Limits()
        self._vote = redis.register_script(_script("vote.lua", rate_limited=True))
        self._reset = redis.register_script(_script("reset.lua"))
        self._create = redis.register_script(_script("create.lua"))
        self._enroll = redis.register_script(_script("enroll.lua", rate_limited=True))

    @property
    def limits(self) -> Limits:
        return self._limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self._limits = limits
        self._vote_limit = (repr(float(limits.vote_rate)), limits.vote_burst)  # the script's ARGV

    # -- experiments --------------------------------------------------------------------
    async def create(
        self, exp: str, arms: list[str], config: AlgorithmConfig, sigma: float | None = None
    ) -> dict[str, Any]:
        if config.algorithm not in SERVICE_ALGORITHMS:
            raise Invalid(
                f"algorithm={config.algorithm!r} is invalid: the services run the voting "
                f"algorithms {', '.join(SERVICE_ALGORITHMS)}"
            )
        try:
            threshold = config.threshold(len(arms))
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        if config.algorithm == "dp-mase" and sigma is not None:
            raise Invalid("sigma: DP-MASE needs rewards in [0, 1]")
        document = {"arms": arms, "params": asdict(config), "sigma": sigma}
        created = await self._create(
            keys=[keys.meta(exp), keys.remaining(exp)],
            args=[json.dumps(document), threshold, len(arms), _now_ms()],
        )
        if not created:
            raise Conflict(f"experiment {exp!r} already exists")
        await self.redis.sadd(keys.EXPERIMENTS, exp)
        return await self.get(exp)

    async def exists(self, exp: str) -> bool:
        return bool(await self.redis.exists(keys.meta(exp)))

    async def ids(self) -> list[str]:
        return sorted(
            m.decode() if isinstance(m, bytes) else m
            for m in await self.redis.smembers(keys.EXPERIMENTS)
        )

    async def delete(self, exp: str) -> None:
        meta = await self._meta(exp)
        n_arms = int(meta["n_arms"])
        streams = [k async for k in self.redis.scan_iter(match=keys.activations(exp, "*"))]
        await self.redis.delete(
            keys.meta(exp),
            keys.remaining(exp),
            keys.eliminations(exp),
            keys.agents(exp),
            keys.agent_seq(exp),
            keys.credentials(exp),  # every agent's token stops working with the experiment
            keys.vote_rate(exp),
            keys.enroll_rate(exp),
            keys.enrollers(exp),
            *[keys.voters(exp, arm) for arm in range(n_arms)],
            *streams,
        )
        await self.redis.srem(keys.EXPERIMENTS, exp)

    async def _meta(self, exp: str) -> dict[str, str]:
        raw = await self.redis.hgetall(keys.meta(exp))
        if not raw:
            raise NotFound(f"experiment {exp!r} does not exist")
        return {_s(k): _s(v) for k, v in raw.items()}

    async def config(self, exp: str) -> tuple[list[str], AlgorithmConfig]:
        document = json.loads((await self._meta(exp))["config"])
        return document["arms"], AlgorithmConfig(**document["params"])

    async def get(self, exp: str) -> dict[str, Any]:
        """The full state: config, threshold, global set, voters, eliminations, counters."""
        meta = await self._meta(exp)
        document = json.loads(meta["config"])
        arms: list[str] = document["arms"]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.smembers(keys.remaining(exp))
            for arm in range(len(arms)):
                pipe.smembers(keys.voters(exp, arm))
            pipe.lrange(keys.eliminations(exp), 0, -1)
            pipe.zcard(keys.agents(exp))
            pipe.hgetall(keys.meta(exp))
            replies = await pipe.execute()
        remaining = sorted(int(_s(a)) for a in replies[0])
        voters = [sorted(_s(v) for v in replies[1 + arm]) for arm in range(len(arms))]
        eliminations = [json.loads(_s(e)) for e in replies[1 + len(arms)]]
        n_agents = int(replies[2 + len(arms)])
        meta = {_s(k): _s(v) for k, v in replies[3 + len(arms)].items()} or meta
        threshold = int(meta["threshold"])
        for e in eliminations:
            e["name"] = arms[e["arm"]]
        return {
            "id": exp,
            "arms": arms,
            "params": document["params"],
            "sigma": document.get("sigma"),
            "threshold": threshold,
            "remaining_arms": remaining,
            "votes": [len(v) for v in voters],
            "voters": voters,
            "eliminations": eliminations,
            "messages": int(meta["messages"]),
            "ignored_messages": int(meta["ignored"]),
            "version": int(meta["version"]),
            "epoch": int(meta["epoch"]),
            "agents": n_agents,
            "created_at": int(meta["created_at"]),
        }

    # -- agents ---------------------------------------------------------------------------
    async def enroll(self, exp: str, client: str = "") -> Enrollment:
        """A new agent id and token; the token is returned once and only its digest is kept.
        `client` is the caller's address: the limits on enrollments apply per client."""
        limits = self.limits
        for _ in range(8):  # the id's random part is 40 bits: a clash is rare, and retried
            agent_id = f"{exp}-{secrets.token_hex(5)}"
            token = f"{agent_id}.{secrets.token_urlsafe(24)}"  # a 192-bit secret
            code, value = await self._enroll(
                keys=[
                    keys.meta(exp),
                    keys.agent_seq(exp),
                    keys.agents(exp),
                    keys.credentials(exp),
                    keys.enroll_rate(exp),
                    keys.enrollers(exp),
                ],
                args=[
                    agent_id,
                    _digest(token),
                    client,
                    limits.max_agents,
                    limits.max_agents_per_client,
                    repr(float(limits.enroll_rate)),
                    limits.enroll_burst,
                ],
            )
            index, value = int(code), int(value)
            if index > 0:
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
        raise RuntimeError("could not draw a free agent id")

    async def authenticate(self, token: str, exp: str) -> str:
        """The agent id a bearer token belongs to, if it is enrolled in `exp`."""
        agent = _agent_of(token)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.meta(exp))
            pipe.hget(keys.credentials(exp), agent)
            exists, stored = await pipe.execute()
        if not exists:
            raise NotFound(f"experiment {exp!r} does not exist")
        if not agent or stored is None or not hmac.compare_digest(_s(stored), _digest(token)):
            raise await self._refusal(token, exp)
        return agent

    async def _refusal(self, token: str, exp: str) -> CoordinatorError:
        """Why a token is not good for `exp`: a valid token of another experiment's agent is 403
        (the caller is who it says, but not enrolled here); anything else is 401."""
        agent = _agent_of(token)
        digest = _digest(token)
        other = _experiment_of(agent)
        if other and other != exp:
            stored = await self.redis.hget(keys.credentials(other), agent)
            if stored is not None and hmac.compare_digest(_s(stored), digest):
                return Forbidden(f"this agent is not enrolled in experiment {exp!r}")
        return Unauthorized("invalid agent token")

    async def agent_ids(self, exp: str) -> list[str]:
        return [_s(a) for a in await self.redis.zrange(keys.agents(exp), 0, -1)]

    # -- votes ------------------------------------------------------------------------------
    async def vote(self, exp: str, token: str, arm: int, epoch: int) -> VoteResult:
        """Apply the vote of the agent whose bearer token is `token`: one round trip to Redis."""
        agent = _agent_of(token)
        rate, burst = self._vote_limit
        reply = await self._vote(
            keys=[
                keys.meta(exp),
                keys.remaining(exp),
                keys.voters(exp, arm),
                keys.eliminations(exp),
                keys.credentials(exp),
                keys.vote_rate(exp),
            ],
            args=[agent, arm, epoch, _now_ms(), _digest(token), rate, burst],
        )
        outcome = _s(reply[0])
        if outcome == "no_experiment":
            raise NotFound(f"experiment {exp!r} does not exist")
        if outcome == "unauthorized":
            raise await self._refusal(token, exp)
        if outcome == "bad_arm":
            raise Invalid(f"arm={arm} is invalid: must be in [0, {int(reply[1]) - 1}]")
        if outcome == "rate_limited":
            wait = int(reply[1]) / 1000
            raise RateLimited(
                f"agent {agent} votes too fast: at most {self.limits.vote_rate:g} votes per second "
                f"(burst {self.limits.vote_burst}); retry in {wait:.2f} s",
                wait,
            )
        result = VoteResult(
            VoteOutcome(outcome) if outcome in VoteOutcome._value2member_map_ else outcome,
            int(reply[1]),
            int(reply[2]),
            int(reply[3]),
        )
        if result.eliminated:
            await self.redis.publish(keys.events(exp), result.version)
        return result

    async def reset(self, exp: str, epoch: int | None) -> tuple[bool, int, int]:
        meta = await self._meta(exp)
        n_arms = int(meta["n_arms"])
        reply = await self._reset(
            keys=[
                keys.meta(exp),
                keys.remaining(exp),
                keys.eliminations(exp),
                *[keys.voters(exp, arm) for arm in range(n_arms)],
            ],
            args=["" if epoch is None else epoch],
        )
        if int(reply[0]) < 0:
            raise NotFound(f"experiment {exp!r} does not exist")
        if int(reply[0]) == 1:
            await self.redis.publish(keys.events(exp), int(reply[1]))
        return bool(int(reply[0])), int(reply[1]), int(reply[2])


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
