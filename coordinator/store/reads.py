"""Reads of experiments, and their status: exploring, identified or tied.

A full read is one transaction whose replies are taken by name (`Replies`) and made into an
ExperimentState (state.state_of). Deciding a tie needs every voter set; ExperimentReads keeps the
last verdict per experiment under the counters it was reached on, so that most reads never fetch
them. A decided state's result is composed once and kept in Redis (lua/result.lua)."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from common import redis_keys as keys
from common.ldp import exhausted as ldp_exhausted
from common.votes import is_tied, reports_exhausted
from coordinator import results
from coordinator.errors import NotFound
from coordinator.store.core import Status, StoreCore, now_ms, text
from coordinator.store.decisions import Decisions, pending
from coordinator.store.shared import SharedReads
from coordinator.store.state import (
    PUBLICATION_FIELDS,
    REVISION_FIELDS,
    SUMMARY_FIELDS,
    ExperimentState,
    departed_of,
    lease_bytes,
    publication_due,
    publication_due_at,
    revision_of,
    state_of,
    waiting,
)

TIE_CACHE_SIZE = 4096  # experiments whose last tie verdict a coordinator process remembers


def _meta_of(exp: str, reply: Any) -> dict[str, str]:
    """The meta hash as a read's transaction gave it; NotFound if the experiment does not exist."""
    if isinstance(reply, Exception):
        raise reply
    if not reply:
        raise NotFound(f"experiment {exp!r} does not exist")
    return {text(k): text(v) for k, v in reply.items()}


class Replies:
    """A pipeline's commands queued under names, its replies given back by name."""

    def __init__(self) -> None:
        self._names: list[tuple[str, int | None]] = []

    def one(self, name: str, _queued: object) -> None:
        self._names.append((name, None))

    def each(self, name: str, count: int) -> None:
        """The next `count` commands (queued after this call), as one list under `name`."""
        self._names.append((name, count))

    def of(self, replies: Sequence[Any]) -> dict[str, Any]:
        named: dict[str, Any] = {}
        at = 0
        for name, count in self._names:
            if count is None:
                named[name], at = replies[at], at + 1
            else:
                named[name], at = list(replies[at : at + count]), at + count
        if at != len(replies):
            raise ValueError(f"{len(replies)} replies for {at} named commands")
        return named


@dataclass(frozen=True)
class Tally:
    """What the status is decided from when the voter sets are not read: a state's counts, or a
    listing's. `key`: every counter that moves when the inputs of is_tied can change (a vote or a
    settled message: messages, ignored; an elimination: version; a reset: epoch, version; an
    enrollment: agents; the experiment deleted and created again: created_at)."""

    remaining_arms: list[int]
    threshold: int
    agents: int
    key: tuple[int, ...]
    votes: list[int] | None = None  # None: not read (a listing)
    settled_agents: int | None = None

    @classmethod
    def of(cls, state: ExperimentState) -> Tally:
        c = state.counters
        return cls(
            state.remaining_arms,
            state.threshold,
            c.agents,
            tie_key(c.created_at, c.epoch, c.version, c.messages, c.ignored_messages, c.agents),
            state.votes,
            c.settled_agents,
        )

    def surely_not_tied(self) -> bool:
        """True when the state cannot be tied, from its counts alone (False: maybe tied). An agent
        that cannot vote any more ("done", see common.votes.reachable_votes) said it settled or
        voted against all the remaining arms but one, so at most settled + (votes on remaining
        arms) // (remaining - 1) agents are done; the others can still vote against every arm.
        When they are at least the threshold, every remaining arm can still reach it."""
        if self.votes is None or self.settled_agents is None:
            return False
        remaining = self.remaining_arms
        votes = sum(self.votes[arm] for arm in remaining)
        done_at_most = self.settled_agents + votes // (len(remaining) - 1)
        return self.agents - done_at_most >= self.threshold


def tie_key(
    created_at: int, epoch: int, version: int, messages: int, ignored: int, agents: int
) -> tuple[int, ...]:
    return (created_at, epoch, version, messages, ignored, agents)


class ExperimentReads:
    """Every read of an experiment's state, its listing, its revision and its status."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core
        self.redis = core.redis
        self.decisions = Decisions(core)  # LDP's, on each publication a read takes or finds
        # exp -> (what the verdict depends on, tied): see get_with_status
        self._ties: OrderedDict[str, tuple[tuple[int, ...], bool]] = OrderedDict()
        # every new event stream asks it (a storm of them: one read at a time, coordinator/store/shared.py)
        self._created_at = SharedReads(self._read_created_at)

    async def exists(self, exp: str) -> bool:
        return bool(await self.redis.exists(keys.meta(exp)))

    async def created_at(self, exp: str) -> int | None:
        """When `exp` was created (unix ms; an experiment deleted and created again under the
        same id is another one), or None if it does not exist. Read after the call, and shared
        by concurrent callers (SharedReads)."""
        return await self._created_at.get(exp)

    async def _read_created_at(self, exp: str) -> int | None:
        value = await self.redis.hget(keys.meta(exp), "created_at")
        return None if value is None else int(value)

    async def ids(self, after: str = "", limit: int = 50) -> list[str]:
        """Experiment ids in order, after `after`: one page of at most `limit`."""
        low = f"({after}" if after else "-"
        members = await self.redis.zrangebylex(keys.EXPERIMENT_INDEX, low, "+", 0, limit)
        return [text(m) for m in members]

    async def summaries(self, ids: list[str]) -> list[dict[str, Any]]:
        """A few aggregates of each experiment, in one pipeline (ids deleted meanwhile are left
        out): what a listing shows, never voters or agent ids. The status of an experiment whose
        tie verdict is not known for its counters costs one more read (see get_with_status)."""
        fields = (*SUMMARY_FIELDS, "result", "departed")
        async with self.redis.pipeline(transaction=False) as pipe:
            for exp in ids:
                pipe.hmget(keys.meta(exp), *fields)
                pipe.smembers(keys.remaining(exp))
                pipe.zcard(keys.agents(exp))
            replies = await pipe.execute()
        result = []
        for i, exp in enumerate(ids):
            values, live_remaining, enrolled = replies[3 * i : 3 * i + 3]
            meta = dict(zip(fields, values, strict=True))
            if meta["n_arms"] is None:
                continue
            # the last publication; the live counters for an experiment never published
            published = meta["p_remaining"] is not None
            if published:
                remaining = json.loads(meta["p_remaining"])
            else:
                remaining = [int(text(a)) for a in live_remaining]
            prefix = "p_" if published else ""
            version = int(meta[f"{prefix}version"])
            messages = int(meta[f"{prefix}messages"])
            ignored = int(meta[f"{prefix}ignored"])
            threshold, created, epoch = (int(meta[f]) for f in ("threshold", "created_at", "epoch"))
            agents = int(enrolled) + departed_of(meta)  # N, as state_of counts it
            tally = Tally(
                remaining,
                threshold,
                agents,
                tie_key(created, epoch, version, messages, ignored, agents),
            )
            status = self._known_status(exp, tally)
            key = results.decision(status or "", epoch, version, agents)
            outcome = results.kept(meta["result"], key) if status != "exploring" else None
            if status is None or (status != "exploring" and outcome is None):
                # the tie verdict, or a decision no reader has kept the result of yet
                try:
                    state = await self.get_with_status(exp)
                except NotFound:  # deleted meanwhile
                    continue
                status, outcome = state.status, state.result
            result.append(
                {
                    "id": exp,
                    "status": status,
                    "n_arms": int(meta["n_arms"]),
                    "remaining": len(remaining),
                    "threshold": threshold,
                    "agents": agents,
                    "version": version,
                    "epoch": epoch,
                    "created_at": created,
                    "result": outcome,
                }
            )
        return result

    async def get(self, exp: str, voters: bool = False) -> ExperimentState:
        """The state: config, threshold, global set, votes per arm, eliminations, counters (of
        every epoch, and of this one: epoch_messages, epoch_started_at), and the live figures of
        the load generator feeding it (None if none: see load_generator_figures), in one round
        trip (two when a publication is due; with `voters`, one more first: the arms). Without
        `voters`, the votes, global set, eliminations and counters are the last publication
        (lua/publish.lua), as anyone may read them; with `voters` (the admin's view only), they
        are live, with the agent ids that voted against each arm."""
        if voters:  # the voter sets: one SMEMBERS per arm, so the arms first
            meta = await self.core.meta(exp)
            replies = await self._read(exp, json.loads(meta["config"]))
        else:  # the public read: its own meta tells whether a publication is due
            replies = await self._read(exp)
            meta = _meta_of(exp, replies["meta"])
            if await self._publish_if_due(exp, meta):  # the read may predate the publication
                replies = await self._read(exp)
                meta = _meta_of(exp, replies["meta"])
        document = json.loads(meta["config"])
        for name, reply in replies.items():
            for part in reply if name == "voters" else [reply]:
                if isinstance(part, Exception) and name != "lease":
                    raise part
        if voters:
            meta = {text(k): text(v) for k, v in replies["meta"].items()} or meta
        return state_of(exp, document, meta, replies, self.core.publish_cadence_ms)

    async def tag_parts(self, exp: str) -> tuple[tuple[str, ...], bytes]:
        """What a public document's ETag is made of (REVISION_FIELDS, the load generator's lease),
        read as `get`'s public read reads them (HGETALL of the meta hash, LRANGE of the
        eliminations, GET of the lease: lua/tag.lua, one EVALSHA, cheaper for this process than
        their transaction), a publication that is due taken first, and NotFound if the experiment
        does not exist; without building the state or its status, which a strong tag already
        determines (coordinator/documents.py answers with what it kept)."""
        meta, lease = await self._tag_read(exp)
        if await self._publish_if_due(exp, meta):  # the read may predate the publication
            meta, lease = await self._tag_read(exp)
        return revision_of(meta), lease_bytes(lease)

    async def _tag_read(self, exp: str) -> tuple[dict[str, str], object]:
        """The meta hash (NotFound if empty) and the lease as lua/tag.lua read them (the lease may
        be anything, even a key of another type: the script's 0, which lease_bytes makes b"!")."""
        flat, lease = await self.core.scripts.tag(
            meta_key=keys.meta(exp),
            eliminations_key=keys.eliminations(exp),
            load_generator_key=keys.load_generator(exp),
        )
        if not flat:
            raise NotFound(f"experiment {exp!r} does not exist")
        return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}, lease

    async def _read(self, exp: str, document: dict[str, Any] | None = None) -> dict[str, Any]:
        """The replies `get` makes the state of, by name, in one transaction: given the config
        `document`, the live voter sets (the admin's view) too."""
        named = Replies()
        async with self.redis.pipeline(transaction=True) as pipe:
            named.one("meta", pipe.hgetall(keys.meta(exp)))
            named.one("agents", pipe.zcard(keys.agents(exp)))
            named.one("simulated", pipe.scard(keys.simulated(exp)))
            if document is not None:
                n_arms = len(document["arms"])
                algorithm = document["params"].get("algorithm")
                if algorithm in ("cde", "ldp"):
                    named.one("report_counts", pipe.hgetall(keys.report_counts(exp)))
                if algorithm == "ldp":
                    named.one("report_ones", pipe.hgetall(keys.report_ones(exp)))
                named.one("settled", pipe.smembers(keys.settled(exp)))
                named.one("remaining", pipe.smembers(keys.remaining(exp)))
                named.one("eliminations", pipe.lrange(keys.eliminations(exp), 0, -1))
                named.each("voters", n_arms)
                for arm in range(n_arms):
                    pipe.smembers(keys.voters(exp, arm))
            else:
                named.one("settled", pipe.scard(keys.settled(exp)))
                # the published eliminations: the first p_eliminations of the list (state_of;
                # the list holds at most one per arm)
                named.one("eliminations", pipe.lrange(keys.eliminations(exp), 0, -1))
            named.one("lease", pipe.get(keys.load_generator(exp)))
            # The lease is written by a process without admin rights: it may be anything, even a
            # key of another type (WRONGTYPE), which must not fail the read of the experiment.
            return named.of(await pipe.execute(raise_on_error=False))

    async def _publish_if_due(self, exp: str, meta: dict[str, str]) -> bool:
        """Take the publication that is due, if one is (lua/published.lua decides again, atomically):
        before a public read, so that an elimination shows at its cadence's tick even when no vote
        comes after it. An experiment never published (created before publications) gets its
        first one, from its voter sets. LDP: the decision on the publication taken, or on the last
        one if it waits for its decision (decisions.pending). True: read again."""
        core = self.core
        now = now_ms()
        batch, cadence = core.publish_batch, core.publish_cadence_ms
        if "p_votes" in meta and not publication_due(meta, now, batch, cadence):
            if not pending(meta):
                return False
            await self.decisions.apply(exp)
            return True
        unpublished = "p_votes" not in meta
        taken = await core.scripts.published(
            meta_key=keys.meta(exp),
            remaining_key=keys.remaining(exp),
            eliminations_key=keys.eliminations(exp),
            voters_keys=[keys.voters(exp, arm) for arm in range(int(meta["n_arms"]))]
            if unpublished
            else [],
            now_ms=now,
            publish_batch=batch,
            publish_cadence_ms=cadence,
            changes_channel=keys.changes(exp),
        )
        if int(taken) == 1:
            core.on_change(exp)
        if meta.get("algorithm") == "ldp":
            await self.decisions.apply(exp)
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
        values = tuple("" if v is None else text(v) for v in fields)
        return (
            values[: len(REVISION_FIELDS)],
            lease_bytes(replies[1]) if lease else b"",
            self.due_at(fields[len(REVISION_FIELDS) :]),
        )

    def due_at(self, fields: Sequence[bytes | str | None]) -> int | None:
        """When a publication is due (ms; 0: now, as when an LDP publication waits for its
        decision), given PUBLICATION_FIELDS' values as read; None if none waits: until then the
        public documents, and their tags, stay as they are."""
        meta = {
            name: None if value is None else text(value)
            for name, value in zip(PUBLICATION_FIELDS, fields, strict=True)
        }
        if meta["p_votes"] is None or pending(meta):  # LDP: a decision waits too
            return 0
        batch = self.core.publish_batch
        if waiting(meta["pending_votes"]) >= batch:
            return 0
        if batch <= 1 and meta["messages"] != meta["p_messages"]:
            return 0  # no batches: every message at once
        return publication_due_at(meta, self.core.publish_cadence_ms)

    async def announce_status(self, exp: str, tied: bool, created_at: int) -> tuple[int, str]:
        """Announce that `exp` (created at `created_at`) is tied, or no longer tied, unless that
        is the status already announced (lua/announce.lua): (1 announced, 0 already, -1 gone; the
        event id of the public state now)."""
        code, event_id = await self.core.scripts.announce(
            meta_key=keys.meta(exp),
            tied=int(tied),
            changes_channel=keys.changes(exp),
            created_at=created_at,
        )
        return int(code), text(event_id)

    # -- status: exploring, identified or tied ------------------------------------------------
    async def get_with_status(self, exp: str, voters: bool = False) -> ExperimentState:
        """`get(exp, voters)` with its status: identified (one arm left), tied (several left and
        none can reach the threshold any more: common.votes.is_tied over the voter sets, the
        settled agents and the enrolled agents) or exploring, and its result once decided.

        Deciding a tie needs every voter set, and the load generator asks every 0.2 s. So a cheap
        bound rules most states out (`Tally.surely_not_tied`), and the verdict is kept per
        process, keyed by every counter that a vote, a settled message, an enrollment or a reset
        moves (`Tally.key`): the voter sets are read only when one of them moved. An enrollment
        can end a tie (one more agent that can still vote): the key has the number of agents.
        With fewer agents than the threshold the status is exploring: no arm can leave before
        more enroll."""
        state = await self.get(exp, voters=voters)
        if state.design.crowd:
            return await self._with_result(exp, state, self._crowd_status(exp, state))
        if state.reports is not None:
            return await self._with_result(exp, state, self._report_status(exp, state))
        tally = Tally.of(state)
        status = self._known_status(exp, tally)
        if status is None:
            full = state if voters else await self.get(exp, voters=True)
            # The verdict comes from the live voter sets, and is kept under the counters of the
            # state it answers for: a public state's status changes with its publications only.
            # The second read may come after an elimination that left one arm: identified.
            status = self._known_status(exp, Tally.of(full)) or (
                "tied" if self._decide_tie(exp, full, tally) else "exploring"
            )
            if not voters and status == "identified":
                status = "exploring"  # the publication of that elimination is still to come
        return await self._with_result(exp, state, status)

    async def _with_result(
        self, exp: str, state: ExperimentState, status: Status
    ) -> ExperimentState:
        decided = replace(state, status=status)
        result = await self._result(exp, decided)
        return decided if result is None else replace(decided, result=result)

    async def _result(self, exp: str, state: ExperimentState) -> dict[str, Any] | None:
        """The result of a decided state (None while exploring): the one kept for this decision,
        else composed now and kept, unless another coordinator kept one first (lua/result.lua)."""
        if state.status == "exploring":
            return None
        key = results.decision_of(state)
        kept_raw = state.tags.kept_result
        replaced = None
        result = results.kept(kept_raw, key)
        if result is not None:
            newer = results.refreshed(result, state)  # the run that fed it, still running
            if newer is None:
                return result
            chosen, replaced = newer, kept_raw
        else:
            chosen = result = results.result_of(state, key, now_ms())
        raw = await self.core.scripts.result(
            meta_key=keys.meta(exp),
            created_at=state.created_at,
            decision_key=key,
            result=json.dumps(chosen),
            replaced=replaced,
        )
        return results.kept(raw, key) or result

    def _report_status(self, exp: str, state: ExperimentState) -> Status:
        """CDE's status, from the state alone: identified (an arm accepted), tied (several arms
        left and none can reach the threshold with the reports the agents enrolled can still
        send: common.votes.reports_exhausted; an agent reports once, and all counted reports are
        in the counts), else exploring (so with fewer agents than the threshold). Remembered as
        a tie verdict is, so that a listing reads no state for it."""
        remaining, counts = state.remaining_arms, state.reports or []
        tied = state.agents >= state.threshold and reports_exhausted(
            remaining,
            {arm: counts[arm] for arm in remaining},
            sum(counts),
            state.agents,
            state.threshold,
        )
        self._remember(exp, Tally.of(state), tied)
        return "identified" if len(remaining) < 2 else "tied" if tied else "exploring"

    def _crowd_status(self, exp: str, state: ExperimentState) -> Status:
        """LDP's status, from the state alone: identified once a decision identified an arm (the
        others left), tied when several arms remain, the experiment holds as many devices as
        DEXP_MAX_AGENTS admits and each has sent its B reports in the published counts
        (common.ldp.exhausted: nothing more can come), else exploring. Remembered as a tie
        verdict is, so that a listing reads no state for it."""
        remaining = state.remaining_arms
        tied = len(remaining) > 1 and ldp_exhausted(
            sum(state.reports or []),
            state.agents,
            state.design.config.reports_per_agent,
            self.core.limits.max_agents,
        )
        self._remember(exp, Tally.of(state), tied)
        return "identified" if len(remaining) < 2 else "tied" if tied else "exploring"

    def _known_status(self, exp: str, tally: Tally) -> Status | None:
        """The status if it shows without the voter sets (None: they must be read)."""
        if len(tally.remaining_arms) < 2:
            return "identified"
        if tally.agents < tally.threshold:
            # Fewer agents than the threshold: no arm can leave yet, and the experiment waits for
            # agents (its warnings say so); a tie is a verdict on the agents that are there.
            return "exploring"
        if tally.surely_not_tied():
            # Remembered too: a listing reads only counters, which cannot show it (without this,
            # every listing read every experiment's state again, 1,000 reads for 1,000 of them).
            self._remember(exp, tally, tied=False)
            return "exploring"
        known = self._ties.get(exp)
        if known is not None and known[0] == tally.key:
            self._ties.move_to_end(exp)
            return "tied" if known[1] else "exploring"
        return None

    def _decide_tie(self, exp: str, full: ExperimentState, answered: Tally) -> bool:
        """is_tied over a state read with its voters; remembered under the counters of the state
        it `answered` for."""
        assert full.live is not None  # read with its voters
        tied = is_tied(
            full.remaining_arms,
            dict(enumerate(full.live.voters)),
            full.live.settled,
            full.agents,
            full.threshold,
            tolerance=full.design.tolerance,
        )
        self._remember(exp, answered, tied)
        return tied

    def _remember(self, exp: str, tally: Tally, tied: bool) -> None:
        self._ties[exp] = (tally.key, tied)
        self._ties.move_to_end(exp)
        while len(self._ties) > TIE_CACHE_SIZE:
            self._ties.popitem(last=False)
