"""The experiment store: every read and write of an experiment's state in Redis.

Votes, enrollments, resets and creations are Lua scripts (lua/ beside this file) registered once and
run with EVALSHA, so each one is atomic; no state lives in the coordinator process. A vote is one
round trip: the script checks the agent's token digest (kept in the experiment's hash slot) and the
agent's rate limit itself. Rate limits are GCRA token buckets in Redis (lua/gcra.lua, prepended to
the scripts that use it), so every coordinator replica enforces the same ones. The same scripts
revise the experiment's document and announce changes of its public state (lua/changes.lua, also
prepended): what the ETags (coordinator/caching.py) and the event streams (coordinator/events.py)
are built on.

On a Redis Cluster (DEXP_REDIS_CLUSTER) every script and every transaction here keeps to one
experiment's keys, hence to its hash slot (common/redis_keys.py); the index of experiments and the
agents' activation streams, in other slots, are never in a script or transaction with them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.errors import ParameterError
from common.params import BOUNDED_REWARDS, check_reward_family
from common.votes import ReportOutcome, VoteOutcome, is_tied, reports_exhausted
from coordinator import results
from coordinator.errors import (
    Conflict,
    CoordinatorError,
    Forbidden,
    Invalid,
    NotFound,
    RateLimited,
    Unauthorized,
)
from coordinator.metrics import ENROLLMENTS, TICKETS
from coordinator.redis_client import AnyRedis

_LUA = Path(__file__).with_name("lua")
SERVICE_ALGORITHMS = ("de", "ce", "dp-mase", "cde")
Status = Literal["exploring", "identified", "tied"]
# A vote where agents report (CDE), or a report where they vote: refused (403), nothing changed.
WRONG_MESSAGE = {
    "not_voting": "experiment {exp!r} is CDE: its agents do not vote, each sends one report "
    "(POST /v1/experiments/{exp}/report)",
    "not_reporting": "experiment {exp!r} is not CDE: its agents vote (POST "
    "/v1/experiments/{exp}/votes); reports are CDE's one message per agent",
}
TIE_CACHE_SIZE = 4096  # experiments whose last tie verdict a coordinator process remembers
DELETE_CHUNK = 1000  # activation streams per DEL when an experiment is deleted


def _now_ms() -> int:
    return int(time.time() * 1000)


def _script(name: str, *helpers: str) -> str:
    """The script `name`, after the helper files it uses (their local functions)."""
    return "\n".join((_LUA / part).read_text() for part in (*helpers, name))


# The fields of the meta hash that, with the experiment's other keys, determine its public
# documents: any change of a document moves one of them (lua/changes.lua, lua/publish.lua: the
# votes show only through publications). coordinator/caching.py makes the ETag of them (and of the
# load generator's lease, part of GET /v1/experiments/{id}).
REVISION_FIELDS = (
    "created_at",
    "revision",
    "revised_at",
    "epoch",
    "published",
    "published_at",
)
# What a listing shows (summaries): the live counters, then the published ones.
SUMMARY_FIELDS = (
    "n_arms",
    "threshold",
    "version",
    "messages",
    "ignored",
    "created_at",
    "epoch",
    "p_remaining",
    "p_version",
    "p_messages",
    "p_ignored",
)
# What publication_due needs: read with the revision by coordinator/caching.py.
PUBLICATION_FIELDS = ("messages", "p_messages", "version", "p_version", "changed_at", "p_votes")


def cadence_ms(limits: Limits) -> int:
    return max(0, round(limits.publish_cadence_seconds * 1000))


def publication_due(meta: dict[str, str], now: int, batch: int, cadence: int) -> bool:
    """Whether a publication is due (the twin of lua/publish.lua's `due`, which decides): `batch`
    messages came since the last one, or the global set changed and the tick of the `cadence`
    (ms) after the change has come. An experiment never published has one due."""
    if "p_votes" not in meta or meta["p_votes"] is None:
        return True
    if int(meta["messages"]) - int(meta.get("p_messages") or 0) >= batch:
        return True
    due_at = publication_due_at(meta, cadence)
    return due_at is not None and now >= due_at


def publication_due_at(meta: Mapping[str, str | None], cadence: int) -> int | None:
    """When the publication of a change of the global set is due (ms), if one waits: the first
    tick of the cadence after the change (lua/publish.lua)."""
    if meta.get("version") == meta.get("p_version"):
        return None
    if cadence <= 0:
        return 0
    return (int(meta.get("changed_at") or 0) // cadence + 1) * cadence


def revision_of(meta: dict[str, str]) -> tuple[str, ...]:
    return tuple(meta.get(name, "") for name in REVISION_FIELDS)


def lease_bytes(raw: object) -> bytes:
    """The load generator's lease as read, for the ETag: b"" when absent, b"!" when unreadable (an
    error: a key of another type), else its bytes."""
    if raw is None:
        return b""
    if isinstance(raw, str):
        return raw.encode()
    return bytes(raw) if isinstance(raw, bytes | bytearray) else b"!"


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
    # votes are published in batches of this many messages, and an elimination at the next tick
    # of this cadence (lua/publish.lua); 1 and 0: every vote at once
    publish_batch: int = 1
    publish_cadence_seconds: float = 0.0

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
        )


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
class SettleResult:
    outcome: str  # settled | stale_epoch
    added: bool  # the agent was not settled yet in this epoch
    version: int
    epoch: int
    remaining: list[int]  # the global set when the message was applied


@dataclass(frozen=True)
class Enrollment:
    agent_id: str
    token: str
    index: int


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def agent_of(token: str) -> str:
    """The agent id a token names: tokens are '<agent id>.<secret>' (neither part has a dot)."""
    agent, dot, secret = token.partition(".")
    return agent if dot and secret else ""


TICKET_PREFIX = "ticket"


def ticket_experiment(ticket: str) -> str:
    """The experiment a ticket names: tickets are 'ticket.<experiment>.<secret>' ('' if not)."""
    prefix, _, rest = ticket.partition(".")
    exp, dot, secret = rest.partition(".")
    return exp if prefix == TICKET_PREFIX and dot and exp and secret and "." not in secret else ""


def experiment_of(agent: str) -> str:
    """The experiment an agent id names: ids are '<experiment>-<hex>'."""
    return agent.rsplit("-", 1)[0] if "-" in agent else ""


class ExperimentStore:
    def __init__(self, redis: AnyRedis, limits: Limits | None = None) -> None:
        self.redis = redis
        self.limits = limits or Limits()
        limited = ("gcra.lua", "changes.lua")
        published = ("changes.lua", "publish.lua")
        self._vote = redis.register_script(_script("vote.lua", "gcra.lua", *published))
        self._report = redis.register_script(_script("report.lua", "gcra.lua", *published))
        self._settle = redis.register_script(_script("settled.lua", *limited))
        self._reset = redis.register_script(_script("reset.lua", "gcra.lua", *published))
        self._create = redis.register_script(_script("create.lua", *published))
        self._publish = redis.register_script(_script("published.lua", *published))
        self._enroll = redis.register_script(_script("enroll.lua", *limited))
        self._announce = redis.register_script(_script("announce.lua", "changes.lua"))
        self._keep_result = redis.register_script(_script("result.lua"))
        # exp -> (what the verdict depends on, tied): see get_with_status
        self._ties: OrderedDict[str, tuple[tuple[int, ...], bool]] = OrderedDict()
        # called with an experiment's id after this process changed it (caching.RevisionCache)
        self.on_change: Callable[[str], None] = _nothing

    @property
    def limits(self) -> Limits:
        return self._limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self._limits = limits
        self._vote_limit = (repr(float(limits.vote_rate)), limits.vote_burst)  # the script's ARGV
        self._publication = (max(1, limits.publish_batch), cadence_ms(limits))

    # -- experiments --------------------------------------------------------------------
    async def create(
        self,
        exp: str,
        arms: list[str],
        config: AlgorithmConfig,
        sigma: float | None = None,
        agents: int | None = None,
        rewards: str = BOUNDED_REWARDS,
    ) -> dict[str, Any]:
        """`agents`: CDE's expected fleet N, from which its threshold is chosen (required for
        CDE, refused for the others). `rewards`: bounded or bernoulli (with sigma None). CDE's T,
        computed here once (a search of up to a few seconds for a tiny eps, in a thread), is
        stored with the experiment: the agents play the T it was created with."""
        if config.algorithm not in SERVICE_ALGORITHMS:
            raise Invalid(
                f"algorithm={config.algorithm!r} is invalid: the services run "
                f"{', '.join(SERVICE_ALGORITHMS)}"
            )
        if (agents is not None) != config.reports:
            raise Invalid(
                "agents: CDE chooses its threshold from the agents expected, and only CDE does"
            )
        try:  # CDE's is a search: off the event loop (the API's check already cached it)
            threshold = await asyncio.to_thread(config.threshold, len(arms), agents)
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        if config.algorithm == "dp-mase" and sigma is not None:
            raise Invalid("sigma: DP-MASE needs rewards in [0, 1]")
        try:
            bernoulli = check_reward_family(rewards, sigma)
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        document: dict[str, Any] = {"arms": arms, "params": asdict(config), "sigma": sigma}
        if bernoulli:
            document["rewards"] = rewards
        if agents is not None:
            document["expected_agents"] = agents
        if config.reports:
            document["pulls_per_arm"] = await asyncio.to_thread(
                config.pulls_per_arm, len(arms), sigma, bernoulli
            )
        created = await self._create(
            keys=[keys.meta(exp), keys.remaining(exp), keys.eliminations(exp)],
            args=[
                json.dumps(document),
                int(threshold or 0),
                len(arms),
                _now_ms(),
                keys.changes(exp),
                config.algorithm,
            ],
        )
        if not created:
            raise Conflict(f"experiment {exp!r} already exists")
        self.on_change(exp)
        await self.redis.zadd(keys.EXPERIMENT_INDEX, {exp: 0})
        return await self.get_with_status(exp)

    async def exists(self, exp: str) -> bool:
        return bool(await self.redis.exists(keys.meta(exp)))

    async def created_at(self, exp: str) -> int | None:
        """When `exp` was created (unix ms; an experiment deleted and created again under the
        same id is another one), or None if it does not exist."""
        value = await self.redis.hget(keys.meta(exp), "created_at")
        return None if value is None else int(value)

    async def ids(self, after: str = "", limit: int = 50) -> list[str]:
        """Experiment ids in order, after `after`: one page of at most `limit`."""
        low = f"({after}" if after else "-"
        return [
            _s(m) for m in await self.redis.zrangebylex(keys.EXPERIMENT_INDEX, low, "+", 0, limit)
        ]

    async def summaries(self, ids: list[str]) -> list[dict[str, Any]]:
        """A few aggregates of each experiment, in one pipeline (ids deleted meanwhile are left
        out): what a listing shows, never voters or agent ids. The status of an experiment whose
        tie verdict is not known for its counters costs one more read (see get_with_status)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for exp in ids:
                pipe.hmget(keys.meta(exp), *SUMMARY_FIELDS, "result")
                pipe.smembers(keys.remaining(exp))
                pipe.zcard(keys.agents(exp))
            replies = await pipe.execute()
        result = []
        for i, exp in enumerate(ids):
            meta, live_remaining, agents = replies[3 * i : 3 * i + 3]
            if meta[0] is None:
                continue
            raw_result = meta.pop()
            # the last publication; the live counters for an experiment never published
            if meta[7] is not None:
                remaining = json.loads(meta[7])
                meta = meta[:2] + meta[8:11] + meta[5:7]
            else:
                remaining = [int(_s(a)) for a in live_remaining]
            n_arms, threshold, version, messages, ignored, created, epoch = (
                int(v) for v in meta[:7]
            )
            counters = {
                "remaining_arms": remaining,
                "threshold": threshold,
                "agents": int(agents),
                "version": version,
                "epoch": epoch,
                "created_at": created,
                "messages": messages,
                "ignored_messages": ignored,
            }
            status = self._known_status(exp, counters)
            key = results.decision(status or "", epoch, version, int(agents))
            outcome = results.kept(raw_result, key) if status != "exploring" else None
            if status is None or (status != "exploring" and outcome is None):
                # the tie verdict, or a decision no reader has kept the result of yet
                try:
                    state = await self.get_with_status(exp)
                except NotFound:  # deleted meanwhile
                    continue
                status, outcome = state["status"], state["result"]
            result.append(
                {
                    "id": exp,
                    "status": status,
                    "n_arms": n_arms,
                    "remaining": len(remaining),
                    "threshold": threshold,
                    "agents": int(agents),
                    "version": version,
                    "epoch": epoch,
                    "created_at": created,
                    "result": outcome,
                }
            )
        return result

    async def delete(self, exp: str) -> None:
        """Delete the experiment: its keys (one slot) at once, with the read of its agents, then
        its agents' activation streams, then its entry in the index. The streams are named from
        the agents (each agent's stream, and the name it had before the shard tag): on a cluster
        they live in other slots, on other nodes, and a read of the agents in the same transaction
        as the deletion misses no agent (an enrollment after it finds no experiment)."""
        meta = await self._meta(exp)
        n_arms = int(meta["n_arms"])
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrange(keys.agents(exp), 0, -1)
            pipe.delete(*self._experiment_keys(exp, n_arms))
            members = (await pipe.execute())[0]
        agents = [_s(a) for a in members]
        streams = [keys.activations(exp, a) for a in agents]
        streams += [keys.legacy_activations(exp, a) for a in agents]
        self.on_change(exp)
        await self.redis.publish(keys.changes(exp), "d")  # the event streams end
        for start in range(0, len(streams), DELETE_CHUNK):
            # On a cluster redis-py splits a DEL per slot: one per shard of the chunk.
            await self.redis.delete(*streams[start : start + DELETE_CHUNK])
        await self.redis.zrem(keys.EXPERIMENT_INDEX, exp)

    @staticmethod
    def _experiment_keys(exp: str, n_arms: int) -> list[str]:
        """Every key of the experiment, all in its hash slot (the streams are not: see delete)."""
        return [
            keys.meta(exp),
            keys.remaining(exp),
            keys.eliminations(exp),
            keys.agents(exp),
            keys.agent_seq(exp),
            keys.credentials(exp),  # every agent's token stops working with the experiment
            keys.vote_rate(exp),
            keys.enroll_rate(exp),
            keys.enrollers(exp),
            keys.tickets(exp),
            keys.reset_rate(exp),
            keys.resets(exp),
            keys.settled(exp),
            keys.load_generator(exp),
            keys.reporters(exp),
            keys.report_counts(exp),
            *[keys.voters(exp, arm) for arm in range(n_arms)],
        ]

    async def _meta(self, exp: str) -> dict[str, str]:
        raw = await self.redis.hgetall(keys.meta(exp))
        if not raw:
            raise NotFound(f"experiment {exp!r} does not exist")
        return {_s(k): _s(v) for k, v in raw.items()}

    async def config(self, exp: str) -> tuple[list[str], AlgorithmConfig]:
        document = json.loads((await self._meta(exp))["config"])
        return document["arms"], AlgorithmConfig(**document["params"])

    async def get(self, exp: str, voters: bool = False) -> dict[str, Any]:
        """The state: config, threshold, global set, votes per arm, eliminations, counters (of
        every epoch, and of this one: epoch_messages, epoch_started_at), and the live figures of
        the load generator feeding it (None if none: see load_generator_figures), in one round
        trip (two when a publication is due; with `voters`, one more first: the arms). Without `voters`, the votes, global set,
        eliminations and counters are the last publication (lua/publish.lua), as anyone may
        read them; with `voters` (the admin's view only), they are live, with the agent ids that
        voted against each arm."""
        if voters:  # the voter sets: one SMEMBERS per arm, so the arms first
            meta = await self._meta(exp)
            replies = await self._read(exp, json.loads(meta["config"]))
        else:  # the public read: its own meta tells whether a publication is due
            replies = await self._read(exp)
            meta = self._read_meta(exp, replies[0])
            if await self._publish_if_due(exp, meta):  # the read may predate the publication
                replies = await self._read(exp)
                meta = self._read_meta(exp, replies[0])
        document = json.loads(meta["config"])
        arms: list[str] = document["arms"]
        reporting = document["params"].get("algorithm") == "cde"
        lease = replies.pop()
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        live_reports = replies.pop(2) if voters and reporting else {}
        if voters:
            meta = {_s(k): _s(v) for k, v in replies[0].items()} or meta
        n_agents, settled = int(replies[1]), replies[2]
        if voters:
            remaining = sorted(int(_s(a)) for a in replies[3])
            listed = replies[4]
            per_arm = replies[5:]
            votes = [len(v) for v in per_arm]
            counters = (meta["messages"], meta["ignored"], meta.get("epoch_messages"))
            version = meta["version"]
        else:
            remaining = json.loads(meta["p_remaining"])
            listed = replies[3][: int(meta["p_eliminations"])]
            votes = json.loads(meta["p_votes"])
            counters = (meta["p_messages"], meta["p_ignored"], meta.get("p_epoch_messages"))
            version = meta["p_version"]
        eliminations = [json.loads(_s(e)) for e in listed]
        for e in eliminations:
            e["name"] = arms[e["arm"]]
        reports = None
        if reporting:  # CDE: the counters count reports (lua/report.lua); nobody votes
            live = {int(_s(a)): int(n) for a, n in live_reports.items()}
            reports = [live.get(a, 0) for a in range(len(arms))] if voters else votes
            votes = [0] * len(arms)
        state: dict[str, Any] = {
            "id": exp,
            "arms": arms,
            "params": document["params"],
            "sigma": document.get("sigma"),
            "rewards": document.get("rewards", BOUNDED_REWARDS),
            "pulls_per_arm": document.get("pulls_per_arm"),
            "threshold": int(meta["threshold"]),
            "remaining_arms": remaining,
            "votes": votes,
            "reports": reports,
            "expected_agents": document.get("expected_agents"),
            "eliminations": eliminations,
            "messages": int(counters[0]),
            "ignored_messages": int(counters[1]),
            "epoch_messages": int(counters[2] or 0),  # older experiments: 0
            "version": int(version),
            "epoch": int(meta["epoch"]),
            "epoch_started_at": _epoch_started_at(meta),
            "agents": n_agents,
            "settled_agents": len(settled) if voters else int(settled),
            "created_at": int(meta["created_at"]),
            "load_generator": load_generator_figures(lease),
            # not in the documents: what their ETags and the event streams are made of
            "revision": revision_of(meta),
            "lease": lease_bytes(lease),
            "event_id": meta.get("event_id") or "0-0",
            "announced_tied": meta.get("tied") == "1",
            "publication_due_at": publication_due_at(meta, self._publication[1]),
            "published_ms": results.redis_ms(meta.get("published_at")),
            "kept_result": meta.get("result"),
        }
        if not voters:  # the votes over time, as published
            state["votes_history"] = results.history_of(meta.get("p_history"), int(meta["epoch"]))
        if voters:
            state["voters"] = [sorted(_s(v) for v in ids) for ids in per_arm]
            state["settled"] = sorted(_s(a) for a in settled)
        return state

    @staticmethod
    def _read_meta(exp: str, reply: Any) -> dict[str, str]:
        """The meta hash as `_read` read it; NotFound if the experiment does not exist."""
        if isinstance(reply, Exception):
            raise reply
        if not reply:
            raise NotFound(f"experiment {exp!r} does not exist")
        return {_s(k): _s(v) for k, v in reply.items()}

    async def _read(self, exp: str, document: dict[str, Any] | None = None) -> list[Any]:
        """The replies `get` makes the state of, in one transaction (the lease last, as read):
        given the config `document`, the live voter sets (the admin's view) too."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(keys.meta(exp))
            pipe.zcard(keys.agents(exp))
            if document is not None and document["params"].get("algorithm") == "cde":
                pipe.hgetall(keys.report_counts(exp))
            if document is not None:
                pipe.smembers(keys.settled(exp))
                pipe.smembers(keys.remaining(exp))
                pipe.lrange(keys.eliminations(exp), 0, -1)
                for arm in range(len(document["arms"])):
                    pipe.smembers(keys.voters(exp, arm))
            else:
                pipe.scard(keys.settled(exp))
                # the published eliminations: the first p_eliminations of the list (read in get;
                # the list holds at most one per arm)
                pipe.lrange(keys.eliminations(exp), 0, -1)
            pipe.get(keys.load_generator(exp))
            # The lease is written by a process without admin rights: it may be anything, even a
            # key of another type (WRONGTYPE), which must not fail the read of the experiment.
            return list(await pipe.execute(raise_on_error=False))

    async def _publish_if_due(self, exp: str, meta: dict[str, str]) -> bool:
        """Take the publication that is due, if one is (lua/published.lua decides again, atomically):
        before a public read, so that an elimination shows at its cadence's tick even when no vote
        comes after it. An experiment never published (created before publications) gets its
        first one, from its voter sets."""
        batch, cadence = self._publication
        now = _now_ms()
        if "p_votes" in meta and not publication_due(meta, now, batch, cadence):
            return False
        experiment_keys = [keys.meta(exp), keys.remaining(exp), keys.eliminations(exp)]
        if "p_votes" not in meta:
            experiment_keys += [keys.voters(exp, arm) for arm in range(int(meta["n_arms"]))]
        taken = await self._publish(
            keys=experiment_keys, args=[now, batch, cadence, keys.changes(exp)]
        )
        if int(taken) == 1:
            self.on_change(exp)
        return True

    async def revision(
        self, exp: str, lease: bool
    ) -> tuple[tuple[str, ...], bytes, int | None] | None:
        """What the ETag of the experiment's documents is made of (REVISION_FIELDS, and with
        `lease` the load generator's lease), and when a publication is due (`due_at`), in one
        round trip; None if it does not exist."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.meta(exp), *REVISION_FIELDS, *PUBLICATION_FIELDS)
            if lease:
                pipe.get(keys.load_generator(exp))
            replies = await pipe.execute(raise_on_error=False)
        fields = replies[0]
        if isinstance(fields, Exception):
            raise fields
        if fields[0] is None:
            return None
        values = tuple("" if v is None else _s(v) for v in fields)
        return (
            values[: len(REVISION_FIELDS)],
            lease_bytes(replies[1]) if lease else b"",
            self.due_at(fields[len(REVISION_FIELDS) :]),
        )

    def due_at(self, fields: Sequence[bytes | str | None]) -> int | None:
        """When a publication is due (ms; 0: now), given PUBLICATION_FIELDS' values as read;
        None if none waits: until then the public documents, and their tags, stay as they are."""
        meta = {
            name: None if value is None else _s(value)
            for name, value in zip(PUBLICATION_FIELDS, fields, strict=True)
        }
        batch, cadence = self._publication
        if meta["p_votes"] is None:
            return 0
        if int(meta["messages"] or 0) - int(meta["p_messages"] or 0) >= batch:
            return 0
        return publication_due_at(meta, cadence)

    async def announce_status(self, exp: str, tied: bool, created_at: int) -> tuple[int, str]:
        """Announce that `exp` (created at `created_at`) is tied, or no longer tied, unless that
        is the status already announced (lua/announce.lua): (1 announced, 0 already, -1 gone; the
        event id of the public state now)."""
        code, event_id = await self._announce(
            keys=[keys.meta(exp)], args=[int(tied), keys.changes(exp), created_at]
        )
        return int(code), _s(event_id)

    # -- status: exploring, identified or tied ------------------------------------------------
    async def get_with_status(self, exp: str, voters: bool = False) -> dict[str, Any]:
        """`get(exp, voters)` and its "status": identified (one arm left), tied (several left and
        none can reach the threshold any more: common.votes.is_tied over the voter sets, the
        settled agents and the enrolled agents) or exploring.

        Deciding a tie needs every voter set, and the load generator asks every 0.2 s. So a cheap
        bound rules most states out (`_surely_not_tied`), and the verdict is kept per process,
        keyed by every counter that a vote, a settled message, an enrollment or a reset moves
        (`_tie_key`): the voter sets are read only when one of them moved. An enrollment can end
        a tie (one more agent that can still vote): the key has the number of agents. With fewer
        agents than the threshold the status is exploring: no arm can leave before more enroll."""
        state = await self.get(exp, voters=voters)
        if state["reports"] is not None:
            state["status"] = self._report_status(exp, state)
            state["result"] = await self._result(exp, state)
            return state
        status = self._known_status(exp, state)
        if status is None:
            full = state if voters else await self.get(exp, voters=True)
            # The verdict comes from the live voter sets, and is kept under the counters of the
            # state it answers for: a public state's status changes with its publications only.
            # The second read may come after an elimination that left one arm: identified.
            status = self._known_status(exp, full) or (
                "tied" if self._decide_tie(exp, full, state) else "exploring"
            )
            if not voters and status == "identified":
                status = "exploring"  # the publication of that elimination is still to come
        state["status"] = status
        state["result"] = await self._result(exp, state)
        return state

    async def _result(self, exp: str, state: dict[str, Any]) -> dict[str, Any] | None:
        """The result of a decided state (None while exploring): the one kept for this decision,
        else composed now and kept, unless another coordinator kept one first (lua/result.lua)."""
        if state["status"] == "exploring":
            return None
        key = results.decision_of(state)
        args: list[Any] = [state["created_at"], key]
        result = results.kept(state["kept_result"], key)
        if result is not None:
            newer = results.refreshed(result, state)  # the run that fed it, still running
            if newer is None:
                return result
            args += [json.dumps(newer), state["kept_result"]]
        else:
            result = results.result_of(state, key, _now_ms())
            args.append(json.dumps(result))
        raw = await self._keep_result(keys=[keys.meta(exp)], args=args)
        return results.kept(raw, key) or result

    def _report_status(self, exp: str, state: dict[str, Any]) -> Status:
        """CDE's status, from the state alone: identified (an arm accepted), tied (several arms
        left and none can reach the threshold with the reports the agents enrolled can still
        send: common.votes.reports_exhausted; an agent reports once, and all counted reports are
        in the counts), else exploring (so with fewer agents than the threshold). Remembered as
        a tie verdict is, so that a listing reads no state for it."""
        remaining, counts = state["remaining_arms"], state["reports"]
        tied = state["agents"] >= state["threshold"] and reports_exhausted(
            remaining,
            {arm: counts[arm] for arm in remaining},
            sum(counts),
            state["agents"],
            state["threshold"],
        )
        self._remember(exp, state, tied)
        return "identified" if len(remaining) < 2 else "tied" if tied else "exploring"

    def _known_status(self, exp: str, state: dict[str, Any]) -> Status | None:
        """The status if it shows without the voter sets (None: they must be read)."""
        if len(state["remaining_arms"]) < 2:
            return "identified"
        if state["agents"] < state["threshold"]:
            # Fewer agents than the threshold: no arm can leave yet, and the experiment waits for
            # agents (its warnings say so); a tie is a verdict on the agents that are there.
            return "exploring"
        if _surely_not_tied(state):
            # Remembered too: a listing reads only counters, which cannot show it (without this,
            # every listing read every experiment's state again, 1,000 reads for 1,000 of them).
            self._remember(exp, state, tied=False)
            return "exploring"
        known = self._ties.get(exp)
        if known is not None and known[0] == _tie_key(state):
            self._ties.move_to_end(exp)
            return "tied" if known[1] else "exploring"
        return None

    def _decide_tie(self, exp: str, full: dict[str, Any], answered: dict[str, Any]) -> bool:
        """is_tied over a state read with its voters; remembered under the counters of the state
        it `answered` for."""
        tied = is_tied(
            full["remaining_arms"],
            dict(enumerate(full["voters"])),
            full["settled"],
            full["agents"],
            full["threshold"],
            tolerance=int(full["params"].get("tolerance", 0)),
        )
        self._remember(exp, answered, tied)
        return tied

    def _remember(self, exp: str, state: dict[str, Any], tied: bool) -> None:
        self._ties[exp] = (_tie_key(state), tied)
        self._ties.move_to_end(exp)
        while len(self._ties) > TIE_CACHE_SIZE:
            self._ties.popitem(last=False)

    # -- agents ---------------------------------------------------------------------------
    async def issue_tickets(self, exp: str, count: int, ttl_seconds: int) -> tuple[list[str], int]:
        """`count` one-time enrollment tickets for `exp`, valid `ttl_seconds`, and their expiry
        (unix ms). Each ticket is shown once: only its digest is kept. Expired tickets are purged."""
        await self._meta(exp)  # 404 for an experiment that does not exist
        expires_at = _now_ms() + ttl_seconds * 1000
        tickets = [f"{TICKET_PREFIX}.{exp}.{secrets.token_urlsafe(32)}" for _ in range(count)]
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(keys.tickets(exp), "-inf", _now_ms())
            pipe.zadd(keys.tickets(exp), {_digest(t): expires_at for t in tickets})
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
        await self._meta(exp)
        async with self.redis.pipeline(transaction=False) as pipe:
            for digest in digests:
                pipe.zscore(keys.tickets(exp), digest)
            expiries = await pipe.execute()
        now = _now_ms()
        return [d for d, e in zip(digests, expiries, strict=True) if e is not None and e > now]

    async def ticket_usable(self, ticket: str) -> bool:
        """Whether `ticket` is an unused, unexpired ticket of the experiment it names (a check
        before the request body is read; the enrollment script decides, atomically)."""
        exp = ticket_experiment(ticket)
        if not exp:
            return False
        expiry = await self.redis.zscore(keys.tickets(exp), _digest(ticket))
        return expiry is not None and expiry > _now_ms()

    async def enroll(self, exp: str, client: str = "", ticket: str | None = None) -> Enrollment:
        """A new agent id and token; the token is returned once and only its digest is kept.
        With a `ticket` (one of `exp`'s), the enrollment consumes it; without, it is open
        enrollment, limited per `client` (the caller's address) in rate and number."""
        limits = self.limits
        if ticket is not None and ticket_experiment(ticket) != exp:
            raise Unauthorized(f"invalid ticket: not a ticket of experiment {exp!r}")
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
                    keys.tickets(exp),
                ],
                args=[
                    agent_id,
                    _digest(token),
                    client,
                    limits.max_agents,
                    limits.max_agents_per_client,
                    repr(float(limits.enroll_rate)),
                    limits.enroll_burst,
                    "" if ticket is None else _digest(ticket),
                    keys.changes(exp),
                ],
            )
            index, value = int(code), int(value)
            if index > 0:
                self.on_change(exp)
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

    async def authenticate(self, token: str, exp: str) -> str:
        """The agent id a bearer token belongs to, if it is enrolled in `exp`."""
        agent = agent_of(token)
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
        agent = agent_of(token)
        digest = _digest(token)
        other = experiment_of(agent)
        if other and other != exp:
            stored = await self.redis.hget(keys.credentials(other), agent)
            if stored is not None and hmac.compare_digest(_s(stored), digest):
                return Forbidden(f"this agent is not enrolled in experiment {exp!r}")
        return Unauthorized("invalid agent token")

    async def agent_ids(self, exp: str) -> list[str]:
        members: list[bytes] = await self.redis.zrange(keys.agents(exp), 0, -1)  # type: ignore[assignment]
        return [_s(a) for a in members]

    async def own_votes(self, token: str) -> dict[str, Any]:
        """What the agent holding `token` may read of itself: its enrollment index and the arms
        whose voter set holds it in the current epoch (so it can re-send a vote the store lost)."""
        agent = agent_of(token)
        exp = experiment_of(agent)
        if not exp:
            raise Unauthorized("invalid agent token")
        await self.authenticate(token, exp)
        meta = await self._meta(exp)
        n_arms = int(meta["n_arms"])
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hmget(
                keys.meta(exp), "p_version", "epoch", "version", "epoch_started_at", "created_at"
            )
            pipe.zscore(keys.agents(exp), agent)
            for arm in range(n_arms):
                pipe.sismember(keys.voters(exp, arm), agent)
            replies = await pipe.execute()
        (published, epoch, live, started, created), index, member = (
            replies[0],
            replies[1],
            replies[2:],
        )
        version = live if published is None else published  # the version as published
        now = {"epoch": _s(epoch), "created_at": _s(created)}
        if started is not None:
            now["epoch_started_at"] = _s(started)
        return {
            "agent_id": agent,
            "experiment": exp,
            "index": int(index or 0),
            "epoch": int(epoch),
            "epoch_started_at": _epoch_started_at(now),  # the epoch's identity, with its number
            "version": int(version),
            "voted_against": [arm for arm in range(n_arms) if member[arm]],
        }

    async def agents_page(self, exp: str, after: int, limit: int) -> list[dict[str, Any]]:
        """The admin's view of agents, in enrollment order after index `after`: each one's id,
        index, the arms it voted against this epoch and the resets it made."""
        meta = await self._meta(exp)
        n_arms = int(meta["n_arms"])
        page: list[tuple[bytes, float]] = await self.redis.zrangebyscore(  # type: ignore[assignment]
            keys.agents(exp), f"({after}", "+inf", start=0, num=limit, withscores=True
        )
        ids = [_s(a) for a, _ in page]
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(keys.resets(exp), *ids, *[f"{a}:last" for a in ids])
            for arm in range(n_arms):
                pipe.smismember(keys.voters(exp, arm), ids)
            replies = await pipe.execute()
        resets, membership = replies[0], replies[1:]
        return [
            {
                "agent_id": agent,
                "index": int(score),
                "voted_against": [arm for arm in range(n_arms) if membership[arm][i]],
                "resets": int(resets[i] or 0),
                "last_reset_at": None
                if resets[len(ids) + i] is None
                else int(resets[len(ids) + i]),
            }
            for i, (agent, (_, score)) in enumerate(zip(ids, page, strict=True))
        ]

    # -- votes ------------------------------------------------------------------------------
    async def vote(
        self, exp: str, token: str, arm: int, epoch: int, epoch_started_at: int | None = None
    ) -> VoteResult:
        """Apply the vote of the agent whose bearer token is `token`: one round trip to Redis.
        `epoch_started_at` (if given) must be the epoch's start too: else stale_epoch."""
        agent = agent_of(token)
        rate, burst = self._vote_limit
        reply = await self._vote(
            keys=[
                keys.meta(exp),
                keys.remaining(exp),
                keys.voters(exp, arm),
                keys.eliminations(exp),
                keys.credentials(exp),
                keys.vote_rate(exp),
                keys.settled(exp),
            ],
            args=[
                agent,
                arm,
                epoch,
                _now_ms(),
                _digest(token),
                rate,
                burst,
                keys.changes(exp),
                "" if epoch_started_at is None else epoch_started_at,
                *self._publication,
            ],
        )
        outcome = _s(reply[0])
        await self._refuse(outcome, reply, exp, token, arm, "votes too fast: at most {} votes")
        self.on_change(exp)  # a message: at least its counters moved
        result = VoteResult(
            VoteOutcome(outcome) if outcome in VoteOutcome._value2member_map_ else outcome,
            int(reply[1]),
            int(reply[2]),
            int(reply[3]),
        )
        if result.eliminated:
            await self.redis.publish(keys.events(exp), result.version)
        return result

    async def report(self, exp: str, token: str, arm: int) -> ReportResult:
        """Apply the CDE report of the agent whose bearer token is `token`: one round trip to
        Redis (lua/report.lua). Its first report counts; any later one is a duplicate."""
        agent = agent_of(token)
        rate, burst = self._vote_limit
        reply = await self._report(
            keys=[
                keys.meta(exp),
                keys.remaining(exp),
                keys.reporters(exp),
                keys.report_counts(exp),
                keys.eliminations(exp),
                keys.credentials(exp),
                keys.vote_rate(exp),
            ],
            args=[
                agent,
                arm,
                _now_ms(),
                _digest(token),
                rate,
                burst,
                keys.changes(exp),
                *self._publication,
            ],
        )
        outcome = _s(reply[0])
        await self._refuse(
            outcome, reply, exp, token, arm, "sends too fast: at most {} votes and reports"
        )
        self.on_change(exp)
        result = ReportResult(ReportOutcome(outcome))
        if result.accepted:
            await self.redis.publish(keys.events(exp), int(reply[1]))
        return result

    async def _refuse(
        self, outcome: str, reply: Sequence[Any], exp: str, token: str, arm: int, fast: str
    ) -> None:
        """Raise the refusal a vote's or a report's script answered (it changed nothing), if it
        did: `fast` says what a rate-limited agent does, its `{}` the rate."""
        if outcome == "no_experiment":
            raise NotFound(f"experiment {exp!r} does not exist")
        if outcome == "unauthorized":
            raise await self._refusal(token, exp)
        if outcome in WRONG_MESSAGE:
            raise Forbidden(WRONG_MESSAGE[outcome].format(exp=exp))
        if outcome == "bad_arm":
            raise Invalid(f"arm={arm} is invalid: must be in [0, {int(reply[1]) - 1}]")
        if outcome == "rate_limited":
            wait = int(reply[1]) / 1000
            raise RateLimited(
                f"agent {agent_of(token)} {fast.format(f'{self.limits.vote_rate:g}')} per second "
                f"(burst {self.limits.vote_burst}); retry in {wait:.2f} s",
                wait,
            )

    async def settle(self, exp: str, token: str, epoch: int) -> SettleResult:
        """Apply the "settled" message of the agent whose bearer token is `token` (CE): one round
        trip to Redis (lua/settled.lua). A message of another epoch is counted and ignored."""
        agent = agent_of(token)
        rate, burst = self._vote_limit
        reply = await self._settle(
            keys=[
                keys.meta(exp),
                keys.settled(exp),
                keys.remaining(exp),
                keys.credentials(exp),
                keys.vote_rate(exp),
            ],
            args=[agent, epoch, _digest(token), rate, burst, keys.changes(exp)],
        )
        outcome = _s(reply[0])
        if outcome == "no_experiment":
            raise NotFound(f"experiment {exp!r} does not exist")
        if outcome == "unauthorized":
            raise await self._refusal(token, exp)
        if outcome == "not_ce":
            raise Forbidden(
                f"experiment {exp!r} is not CE: settled messages are for CE, which drops votes; "
                "under the other algorithms every vote is sent and an agent's settling shows in them"
            )
        if outcome == "rate_limited":
            wait = int(reply[1]) / 1000
            raise RateLimited(
                f"agent {agent} sends too fast: at most {self.limits.vote_rate:g} votes and settled "
                f"messages per second (burst {self.limits.vote_burst}); retry in {wait:.2f} s",
                wait,
            )
        self.on_change(exp)
        return SettleResult(
            outcome,
            bool(int(reply[3])),
            int(reply[1]),
            int(reply[2]),
            sorted(int(_s(a)) for a in reply[4]),
        )

    async def reset(
        self, exp: str, epoch: int | None, agent: str = "", quorum: int = 1
    ) -> ResetOutcome:
        """A new epoch. By an agent (DSER4): only if still in `epoch`, rate-limited per agent and
        per experiment (RateLimited), and with a tolerance f (`quorum` f + 1) only once f + 1
        distinct agents asked within DEXP_RESET_QUORUM_SECONDS (else `pending`); by the admin
        (`agent` ''): unconditional, unlimited."""
        meta = await self._meta(exp)
        n_arms = int(meta["n_arms"])
        limits = self.limits
        reply = await self._reset(
            keys=[
                keys.meta(exp),
                keys.remaining(exp),
                keys.eliminations(exp),
                keys.reset_rate(exp),
                keys.resets(exp),
                keys.settled(exp),
                keys.reset_requests(exp),
                *[keys.voters(exp, arm) for arm in range(n_arms)],
            ],
            args=[
                "" if epoch is None else epoch,
                agent,
                repr(float(limits.reset_rate)),
                limits.reset_burst,
                repr(float(limits.experiment_reset_rate)),
                limits.experiment_reset_burst,
                keys.changes(exp),
                quorum,
                int(limits.reset_quorum_seconds * 1000),
            ],
        )
        code = int(reply[0])
        if code == -1:
            raise NotFound(f"experiment {exp!r} does not exist")
        if code == -3:
            raise Forbidden(
                f"experiment {exp!r} is CDE, which is never reset: each agent reports once per "
                "experiment, and a new epoch would let it report again (two reports are only "
                "2 e0-private, not e0: its certified epsilon); delete it and create a new one"
            )
        if code == -2:
            wait = int(reply[1]) / 1000
            raise RateLimited(
                f"resets too fast: at most {limits.reset_rate:g} per second per agent (burst "
                f"{limits.reset_burst}) and {limits.experiment_reset_rate:g} per second per "
                f"experiment (burst {limits.experiment_reset_burst}); retry in {wait:.2f} s",
                wait,
            )
        if code == 1:
            self.on_change(exp)
            await self.redis.publish(keys.events(exp), int(reply[1]))
        return ResetOutcome(code == 1, int(reply[1]), int(reply[2]), code == 2, int(reply[3]))


def _tie_key(state: dict[str, Any]) -> tuple[int, ...]:
    """Every counter that moves when the inputs of is_tied can change: a vote or a settled message
    (messages, ignored), an elimination (version), a reset (epoch, version), an enrollment
    (agents), the experiment deleted and created again (created_at)."""
    return (
        state["created_at"],
        state["epoch"],
        state["version"],
        state["messages"],
        state["ignored_messages"],
        state["agents"],
    )


def _surely_not_tied(state: dict[str, Any]) -> bool:
    """True when a state cannot be tied, from its counts alone (False: maybe tied). An agent that
    cannot vote any more ("done", see common.votes.reachable_votes) said it settled or voted
    against all the remaining arms but one, so at most settled + (votes on remaining arms) //
    (remaining - 1) agents are done; the others can still vote against every arm. When they are
    at least the threshold, every remaining arm can still reach it."""
    if "votes" not in state or "settled_agents" not in state:
        return False
    remaining = state["remaining_arms"]
    votes = sum(state["votes"][arm] for arm in remaining)
    done_at_most = state["settled_agents"] + votes // (len(remaining) - 1)
    return bool(state["agents"] - done_at_most >= state["threshold"])


def _epoch_started_at(meta: dict[str, str]) -> int | None:
    """When the current epoch began (unix ms): the creation or the last reset. Experiments created
    before the field existed have it only in epoch 0 (their creation); else None."""
    started = meta.get("epoch_started_at")
    if started is not None:
        return int(started)
    return int(meta["created_at"]) if int(meta["epoch"]) == 0 else None


LEASE_MAX_BYTES = 4096  # a load generator's lease is ~300 bytes; anything longer is not one
LEASE_MAX_INT = 2**53  # exact in a JSON number read by any client
LEASE_MAX_TEXT = 200
LEASE_TEXT_FIELDS = ("run", "host")
LEASE_INT_FIELDS = ("started_at", "updated_at", "epoch", "activations", "delivered", "backlog")


def load_generator_figures(raw: object) -> dict[str, Any] | None:
    """The live figures of the load generator's lease (common.redis_keys.load_generator), read
    defensively: the lease is written by a process that holds no admin credentials, so anything
    may be there. None when there is no lease or it is not a JSON object; otherwise every field of
    the public view, each None when missing or malformed (text: printable, at most 200 characters;
    counts and times: integers in [0, 2^53]; the rate: a finite number >= 0). The pid and any other
    field are left out."""
    if not isinstance(raw, bytes | str) or len(raw) > LEASE_MAX_BYTES:
        return None  # no lease (None), a key of another type (an error), or too long
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(document, dict):
        return None
    figures: dict[str, Any] = {}
    for name in LEASE_TEXT_FIELDS:
        text = document.get(name)
        ok = isinstance(text, str) and 0 < len(text) <= LEASE_MAX_TEXT and text.isprintable()
        figures[name] = text if ok else None
    for name in LEASE_INT_FIELDS:
        number = document.get(name)
        ok = type(number) is int and 0 <= number <= LEASE_MAX_INT
        figures[name] = number if ok else None
    rate = document.get("activations_per_second")
    figures["activations_per_second"] = (
        float(rate)
        if isinstance(rate, int | float)
        and not isinstance(rate, bool)
        and math.isfinite(rate)
        and 0 <= rate <= LEASE_MAX_INT
        else None
    )
    return figures


def _nothing(exp: str) -> None:
    pass


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
