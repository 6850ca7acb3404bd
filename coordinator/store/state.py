"""An experiment's state as the store reads it: ExperimentState, typed, built from the replies of
one pipeline by name (`state_of`), read by attribute by the routes, the event streams and the
caches. `document()` is what GET /v1/experiments/{id} shows of it; the rest (`tags`, `live`) is
what the ETags, the event streams, the kept result and the admin's views are made of.

Also the meta hash's fields that make the documents' revision, and the defensive reading of the
load generator's lease (written by a process without admin rights)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.algorithms import AlgorithmConfig
from common.params import BOUNDED_REWARDS
from coordinator import results
from coordinator.store.core import Status, text

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
# What publication_due needs, and whether an LDP publication waits for its decision
# (store/decisions.py, `pending`): read with the revision by coordinator/caching.py.
PUBLICATION_FIELDS = (
    "pending_votes",
    "settled_at",
    "messages",
    "p_messages",
    "version",
    "p_version",
    "changed_at",
    "p_votes",
    "decided",
    "published",
    "p_remaining",
)


@dataclass(frozen=True)
class Design:
    """What the experiment was created with: none of it changes afterwards."""

    arms: list[str]
    params: dict[str, Any]  # AlgorithmConfig's fields, as stored (shown as they are)
    sigma: float | None
    rewards: str
    pulls_per_arm: int | None  # CDE's T
    expected_agents: int | None  # CDE's N
    threshold: int

    @property
    def config(self) -> AlgorithmConfig:
        return AlgorithmConfig(**self.params)

    @property
    def reporting(self) -> bool:
        """CDE: its agents report once each; nobody votes."""
        return self.params.get("algorithm") == "cde"

    @property
    def crowd(self) -> bool:
        """LDP: devices send private one-bit reports, the coordinator decides (common/ldp.py)."""
        return self.params.get("algorithm") == "ldp"

    @property
    def tolerance(self) -> int:
        return int(self.params.get("tolerance", 0))


@dataclass(frozen=True)
class Counters:
    """The experiment's counters: of every epoch (messages, ignored_messages) and of this one."""

    messages: int
    ignored_messages: int
    epoch_messages: int
    version: int
    epoch: int
    epoch_started_at: int | None
    agents: int  # N: enrolled, and departed_of(meta)
    settled_agents: int
    created_at: int
    agents_departed: int = 0  # of `agents`, those that left this epoch and still count
    agents_simulated: int = 0  # of the enrolled, those that said they are simulated


@dataclass(frozen=True)
class Elimination:
    """An arm that left: with the votes (CDE: reports) it had, when (unix ms) and in what order."""

    arm: int
    name: str
    votes: int
    time: int
    order: int

    def document(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "name": self.name,
            "votes": self.votes,
            "time": self.time,
            "order": self.order,
        }


@dataclass(frozen=True)
class Tags:
    """Not in the documents: what their ETags, the event streams and the kept result are made of."""

    revision: tuple[str, ...]  # REVISION_FIELDS' values
    lease: bytes  # the load generator's lease as read (lease_bytes)
    event_id: str  # the public state's last event id (lua/changes.lua)
    announced_tied: bool  # the tie status last announced (lua/announce.lua)
    publication_due_at: int | None  # when a publication waits (ms), if one does
    published_ms: int | None  # when the last publication was taken
    kept_result: str | None  # the result kept in the meta hash (lua/result.lua), as read


@dataclass(frozen=True)
class LiveVoters:
    """The admin's view only: the agent ids that voted against each arm, and the settled ones."""

    voters: list[list[str]]
    settled: list[str]


@dataclass(frozen=True)
class ExperimentState:
    """One read of an experiment. Public (store.get without voters): the votes, global set,
    eliminations and counters of the last publication, and the votes over time. Live (with
    voters, the admin's): the voter sets as they are. `status` and `result` are set by
    store.get_with_status (None from store.get)."""

    id: str
    design: Design
    remaining_arms: list[int]
    votes: list[int]  # distinct voters against each arm (CDE: zeros)
    reports: list[int] | None  # CDE, LDP: reports per arm; None for the voting algorithms
    eliminations: list[Elimination]
    counters: Counters
    load_generator: dict[str, Any] | None  # the lease's figures (load_generator_figures)
    tags: Tags
    votes_history: list[list[int]] | None = None  # the public view's: [[unix ms, votes], ...]
    live: LiveVoters | None = None  # the admin's view's
    ones: list[int] | None = None  # LDP: the reports of each arm whose bit is 1; None otherwise
    status: Status | None = None
    result: dict[str, Any] | None = None

    @property
    def arms(self) -> list[str]:
        return self.design.arms

    @property
    def threshold(self) -> int:
        return self.design.threshold

    @property
    def agents(self) -> int:
        return self.counters.agents

    @property
    def epoch(self) -> int:
        return self.counters.epoch

    @property
    def version(self) -> int:
        return self.counters.version

    @property
    def created_at(self) -> int:
        return self.counters.created_at

    def document(self) -> dict[str, Any]:
        """The fields of GET /v1/experiments/{id} this state has (the API adds the warnings and
        the certificate's): the design, the votes and the counters, flat (written out: asdict
        copies deeply, and this is every full read's)."""
        design, counters = self.design, self.counters
        document: dict[str, Any] = {
            "id": self.id,
            "arms": design.arms,
            "params": design.params,
            "sigma": design.sigma,
            "rewards": design.rewards,
            "pulls_per_arm": design.pulls_per_arm,
            "threshold": design.threshold,
            "remaining_arms": self.remaining_arms,
            "votes": self.votes,
            "reports": self.reports,
            "expected_agents": design.expected_agents,
            "eliminations": [e.document() for e in self.eliminations],
            "messages": counters.messages,
            "ignored_messages": counters.ignored_messages,
            "epoch_messages": counters.epoch_messages,
            "version": counters.version,
            "epoch": counters.epoch,
            "epoch_started_at": counters.epoch_started_at,
            "agents": counters.agents,
            "agents_departed": counters.agents_departed,
            "agents_simulated": counters.agents_simulated,
            "settled_agents": counters.settled_agents,
            "created_at": counters.created_at,
            "status": self.status,
            "load_generator": self.load_generator,
            "result": self.result,
        }
        if self.votes_history is not None:
            document["votes_history"] = self.votes_history
        return document


def state_of(
    exp: str,
    document: Mapping[str, Any],
    meta: dict[str, str],
    replies: Mapping[str, Any],
    cadence: int,
) -> ExperimentState:
    """The state from the experiment's configuration `document`, its `meta` hash and the named
    replies of store.get's pipeline: `agents` (ZCARD), `lease` (GET), then either the public
    view's `settled` (SCARD) and `eliminations` (LRANGE), or the live view's `settled`,
    `remaining` and `voters` (SMEMBERS), `eliminations` and, for CDE and LDP, `report_counts`
    (HGETALL), and for LDP `report_ones` (HGETALL)."""
    arms: list[str] = document["arms"]
    design = Design(
        arms=arms,
        params=document["params"],
        sigma=document.get("sigma"),
        rewards=document.get("rewards", BOUNDED_REWARDS),
        pulls_per_arm=document.get("pulls_per_arm"),
        expected_agents=document.get("expected_agents"),
        threshold=int(meta["threshold"]),
    )
    live = "voters" in replies
    voters: list[Any] = replies.get("voters", [])
    if live:
        remaining = sorted(int(text(a)) for a in replies["remaining"])
        listed = replies["eliminations"]
        votes = [len(v) for v in voters]
        counted = (meta["messages"], meta["ignored"], meta.get("epoch_messages"))
        version = meta["version"]
        settled_agents = len(replies["settled"])
    else:
        remaining = json.loads(meta["p_remaining"])
        listed = replies["eliminations"][: int(meta["p_eliminations"])]
        votes = json.loads(meta["p_votes"])
        counted = (meta["p_messages"], meta["p_ignored"], meta.get("p_epoch_messages"))
        version = meta["p_version"]
        settled_agents = int(replies["settled"])
    eliminations = []
    for raw in listed:
        e = json.loads(text(raw))
        eliminations.append(
            Elimination(e["arm"], arms[e["arm"]], e["votes"], e["time"], e["order"])
        )
    reports: list[int] | None = None
    ones: list[int] | None = None
    if design.reporting or design.crowd:  # the counters count reports (lua/report.lua,
        # lua/ldp_report.lua); nobody votes
        reports = per_arm(replies["report_counts"], len(arms)) if live else votes
        votes = [0] * len(arms)
    if design.crowd:  # LDP: and the ones among them (published beside them, p_ones)
        ones = per_arm(replies["report_ones"], len(arms)) if live else json.loads(meta["p_ones"])
    lease = replies["lease"]
    departed = departed_of(meta)
    return ExperimentState(
        id=exp,
        design=design,
        remaining_arms=remaining,
        votes=votes,
        reports=reports,
        eliminations=eliminations,
        counters=Counters(
            messages=int(counted[0]),
            ignored_messages=int(counted[1]),
            epoch_messages=int(counted[2] or 0),  # older experiments: 0
            version=int(version),
            epoch=int(meta["epoch"]),
            epoch_started_at=epoch_started_at(meta),
            agents=int(replies["agents"]) + departed,
            settled_agents=settled_agents,
            created_at=int(meta["created_at"]),
            agents_departed=departed,
            agents_simulated=int(replies.get("simulated") or 0),
        ),
        load_generator=load_generator_figures(lease),
        tags=Tags(
            revision=revision_of(meta),
            lease=lease_bytes(lease),
            event_id=meta.get("event_id") or "0-0",
            announced_tied=meta.get("tied") == "1",
            publication_due_at=publication_due_at(meta, cadence),
            published_ms=results.redis_ms(meta.get("published_at")),
            kept_result=meta.get("result"),
        ),
        votes_history=None
        if live
        else results.history_of(meta.get("p_history"), int(meta["epoch"])),
        live=LiveVoters(
            voters=[sorted(text(v) for v in ids) for ids in voters],
            settled=sorted(text(a) for a in replies["settled"]),
        )
        if live
        else None,
        ones=ones,
    )


def departed_of(meta: Mapping[str, Any]) -> int:
    """The agents that left this epoch and still count in N (lua/leave.lua's `departed`,
    '<epoch>:<agents>'; another epoch's: 0, a reset emptied their voter sets)."""
    raw, epoch = meta.get("departed"), meta.get("epoch")
    if raw is None or epoch is None:
        return 0
    at, _, count = text(raw).partition(":")
    return int(count) if at == text(epoch) and count.isdigit() else 0


def per_arm(counts: Mapping[Any, Any], n_arms: int) -> list[int]:
    """A hash of arm index -> count as read (HGETALL), as a list over every arm."""
    got = {int(text(a)): int(n) for a, n in counts.items()}
    return [got.get(a, 0) for a in range(n_arms)]


def epoch_started_at(meta: Mapping[str, str]) -> int | None:
    """When the current epoch began (unix ms): the creation or the last reset. Experiments created
    before the field existed have it only in epoch 0 (their creation); else None."""
    started = meta.get("epoch_started_at")
    if started is not None:
        return int(started)
    return int(meta["created_at"]) if int(meta["epoch"]) == 0 else None


def waiting(raw: str | None) -> int:
    """The counted messages (votes, reports) waiting for the next publication, from the meta
    hash's `pending_votes` (lua/publish.lua's `waiting`): what a batch counts. Ignored messages
    are not there: they move no count, and so no publication."""
    return sum(int(n) for n in json.loads(raw).values()) if raw else 0


def publication_due(meta: dict[str, str], now: int, batch: int, cadence: int) -> bool:
    """Whether a publication is due (the twin of lua/publish.lua's `due`, which decides): `batch`
    counted messages came since the last one (with `batch` 1, any message), or the global set
    changed or an agent newly settled and the tick of the `cadence` (ms) after the change has
    come. An experiment never published has one due."""
    if "p_votes" not in meta or meta["p_votes"] is None:
        return True
    if waiting(meta.get("pending_votes")) >= batch:
        return True
    if batch <= 1 and meta.get("messages") != meta.get("p_messages"):
        return True  # no batches: every message at once, ignored ones too
    due_at = publication_due_at(meta, cadence)
    return due_at is not None and now >= due_at


def publication_due_at(meta: Mapping[str, str | None], cadence: int) -> int | None:
    """When the publication of a change of the global set, or of a newly settled agent, is due
    (ms), if one waits: the first tick of the cadence after the first such change
    (lua/publish.lua)."""
    since: list[int] = []
    if meta.get("version") != meta.get("p_version"):
        since.append(int(meta.get("changed_at") or 0))
    if meta.get("settled_at") is not None:
        since.append(int(meta["settled_at"] or 0))
    if not since:
        return None
    if cadence <= 0:
        return 0
    return (min(since) // cadence + 1) * cadence


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
        value = document.get(name)
        ok = isinstance(value, str) and 0 < len(value) <= LEASE_MAX_TEXT and value.isprintable()
        figures[name] = value if ok else None
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
