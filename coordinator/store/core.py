"""What every part of the store shares: its Redis client, its scripts, the abuse limits, who to tell
of a change, and the small types and token rules the parts and the routes use."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.votes import ReportOutcome, VoteOutcome
from coordinator.errors import NotFound, StoreUnavailable
from coordinator.redis_client import AnyRedis
from coordinator.store.scripts import Scripts

SERVICE_ALGORITHMS = ("de", "ce", "dp-mase", "cde", "ldp")
Status = Literal["exploring", "identified", "tied"]
TICKET_PREFIX = "ticket"
# A script that changes an experiment must start within this share of the Redis timeout after it
# was sent (lua/deadline.lua): later, the coordinator may have answered 503, and it changes
# nothing; sooner, its reply has the rest of the timeout to come back.
DEADLINE_SHARE = 0.5
CLOCK_SECONDS = 60.0  # how often a process measures again Redis's clock against its own


def now_ms() -> int:
    return int(time.time() * 1000)


def text(value: bytes | str) -> str:
    """A Redis reply as text (the clients may answer bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def digest(token: str) -> str:
    """What the store keeps of a token or a ticket: its SHA-256 hex digest."""
    return hashlib.sha256(token.encode()).hexdigest()


def agent_of(token: str) -> str:
    """The agent id a token names: tokens are '<agent id>.<secret>' (neither part has a dot)."""
    agent, dot, secret = token.partition(".")
    return agent if dot and secret else ""


def ticket_experiment(ticket: str) -> str:
    """The experiment a ticket names: tickets are 'ticket.<experiment>.<secret>' ('' if not)."""
    prefix, _, rest = ticket.partition(".")
    exp, dot, secret = rest.partition(".")
    return exp if prefix == TICKET_PREFIX and dot and exp and secret and "." not in secret else ""


def experiment_of(agent: str) -> str:
    """The experiment an agent id names: ids are '<experiment>-<hex>'."""
    return agent.rsplit("-", 1)[0] if "-" in agent else ""


@dataclass(frozen=True)
class Limits:
    """Abuse limits (0: none). Rates are per second, bursts the requests allowed at once."""

    vote_rate: float = 0.0  # per agent
    vote_burst: int = 1
    enroll_rate: float = 0.0  # per client address and experiment
    enroll_burst: int = 1
    max_agents: int = 0  # per experiment
    max_agents_per_client: int = 0  # per client address and experiment (open enrollment)
    reset_rate: float = 0.0  # agents' DSER4 resets, per agent
    reset_burst: int = 1
    experiment_reset_rate: float = 0.0  # agents' DSER4 resets, per experiment
    experiment_reset_burst: int = 1
    # with a tolerance f, f + 1 distinct agents' reset requests within this window make a reset
    reset_quorum_seconds: float = 60.0
    # votes are published in batches of this many counted messages, and an elimination or a newly
    # settled agent at the next tick of this cadence (lua/publish.lua); 1 and 0: every vote at once
    publish_batch: int = 1
    publish_cadence_seconds: float = 0.0
    # the coordinator's Redis timeout: the scripts that change an experiment carry a deadline
    # (DEADLINE_SHARE of it, lua/deadline.lua), so that one run after a 503 changes nothing; 0: none
    redis_timeout_seconds: float = 0.0
    # an agent enrolled with a lease leaves once this long passed without a renewal of its host's
    agent_lease_seconds: float = 60.0

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
            reset_rate=settings.reset_rate,
            reset_burst=settings.reset_burst,
            experiment_reset_rate=settings.experiment_reset_rate,
            experiment_reset_burst=settings.experiment_reset_burst,
            reset_quorum_seconds=settings.reset_quorum_seconds,
            publish_batch=settings.publish_batch,
            publish_cadence_seconds=settings.publish_cadence_seconds,
            redis_timeout_seconds=settings.redis_timeout_seconds,
            agent_lease_seconds=settings.agent_lease_seconds,
        )


def cadence_ms(limits: Limits) -> int:
    return max(0, round(limits.publish_cadence_seconds * 1000))


class ResetOutcome(NamedTuple):
    """What a reset request did: `reset` (a new epoch began), the version and epoch now, and
    under a tolerance f whether it is `pending` (fewer than f + 1 agents asked in the window) with
    the `requests` counted so far."""

    reset: bool
    version: int
    epoch: int
    pending: bool = False
    requests: int = 0


@dataclass(frozen=True)
class VoteResult:
    outcome: VoteOutcome | str
    version: int
    epoch: int
    votes: int

    @property
    def counted(self) -> bool:
        return self.outcome in (VoteOutcome.COUNTED, VoteOutcome.ELIMINATED)

    @property
    def eliminated(self) -> bool:
        return self.outcome == VoteOutcome.ELIMINATED


@dataclass(frozen=True)
class ReportResult:
    """What a CDE report did (lua/report.lua): nothing else, so that the reply to a repeated
    report does not change with the reports of others."""

    outcome: ReportOutcome

    @property
    def counted(self) -> bool:
        return self.outcome in (ReportOutcome.COUNTED, ReportOutcome.ACCEPTED)

    @property
    def accepted(self) -> bool:
        return self.outcome == ReportOutcome.ACCEPTED


@dataclass(frozen=True)
class CrowdReport:
    """What an LDP report did (lua/ldp_report.lua): counted or duplicate, the agent's reports
    counted so far (`sent`) of its `budget` B, and whether its batch was published now (then the
    coordinator decides on it). Nothing of the others' reports."""

    outcome: str
    sent: int
    budget: int
    published: bool = False

    @property
    def counted(self) -> bool:
        return self.outcome == "counted"


@dataclass(frozen=True)
class SettleResult:
    outcome: str  # settled | stale_epoch
    added: bool  # the agent was not settled yet in this epoch
    version: int
    epoch: int
    remaining: list[int]  # the global set as published when the message was applied


@dataclass(frozen=True)
class Enrollment:
    agent_id: str
    token: str
    index: int


class StoreCore:
    """The parts' common ground: one client, its scripts, the limits (with what the scripts take of
    them, computed once), and `on_change`, called with an experiment's id after this process
    changed it (caching.RevisionCache forgets its revision)."""

    def __init__(self, redis: AnyRedis, limits: Limits | None = None) -> None:
        self.redis = redis
        self.scripts = Scripts(redis)
        self.limits = limits or Limits()
        self.on_change: Callable[[str], None] = _nothing
        self._clock_offset: float | None = None  # Redis's clock minus this process's (s)
        self._clock_read_at = 0.0  # time.monotonic() of that measure
        self._clock_lock = asyncio.Lock()

    @property
    def limits(self) -> Limits:
        return self._limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self._limits = limits
        self.vote_rate = repr(float(limits.vote_rate))  # the scripts' vote_rate
        self.publish_batch = max(1, limits.publish_batch)
        self.publish_cadence_ms = cadence_ms(limits)

    async def deadline_ms(self) -> int:
        """The deadline of a script sent now, in ms of Redis's clock (0: none): DEADLINE_SHARE of
        the Redis timeout from now. Redis's clock is measured against this process's (one TIME,
        its round trip halved) once a CLOCK_SECONDS, so that a skew between the hosts does not
        move the deadline; lua/deadline.lua checks it before any write."""
        timeout = self.limits.redis_timeout_seconds
        if timeout <= 0:
            return 0
        stale = time.monotonic() - self._clock_read_at > CLOCK_SECONDS
        if self._clock_offset is None or (stale and not self._clock_lock.locked()):
            async with self._clock_lock:  # one measure at a time; the others wait for the first
                if self._clock_offset is None or time.monotonic() - self._clock_read_at > (
                    CLOCK_SECONDS
                ):
                    await self._measure_clock()
        assert self._clock_offset is not None
        return int((time.time() + self._clock_offset + DEADLINE_SHARE * timeout) * 1000)

    async def _measure_clock(self) -> None:
        sent = time.time()
        reply: Any = await self.redis.time()
        came = time.time()
        if isinstance(reply, dict):  # a cluster may answer per node: any node's clock
            reply = next(iter(reply.values()))
        seconds, micros = reply
        self._clock_offset = int(seconds) + int(micros) / 1e6 - (sent + came) / 2
        self._clock_read_at = time.monotonic()

    async def meta(self, exp: str) -> dict[str, str]:
        """The experiment's meta hash; NotFound if it does not exist."""
        raw = await self.redis.hgetall(keys.meta(exp))
        if not raw:
            raise NotFound(f"experiment {exp!r} does not exist")
        return {text(k): text(v) for k, v in raw.items()}

    async def config(self, exp: str) -> tuple[list[str], AlgorithmConfig]:
        document = json.loads((await self.meta(exp))["config"])
        return document["arms"], AlgorithmConfig(**document["params"])


def _nothing(exp: str) -> None:
    pass


def too_late() -> StoreUnavailable:
    """A script Redis ran after its deadline (lua/deadline.lua): it changed nothing, and the call
    gets the 503 a timeout would have given it."""
    return StoreUnavailable(
        "the store (Redis) ran this request after its deadline (DEXP_REDIS_TIMEOUT_SECONDS): "
        "nothing changed; retry later"
    )
