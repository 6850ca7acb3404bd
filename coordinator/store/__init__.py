"""The experiment store: every read and write of an experiment's state in Redis.

Votes, enrollments, resets and creations are Lua scripts (lua/ beside this file) registered once and
run with EVALSHA, so each one is atomic; no state lives in the coordinator process. A vote is one
round trip: the script checks the agent's token digest (kept in the experiment's hash slot) and the
agent's rate limit itself. Rate limits are GCRA token buckets in Redis (lua/gcra.lua, prepended to
the scripts that use it), so every coordinator replica enforces the same ones. The same scripts
revise the experiment's document and announce changes of its public state (lua/changes.lua, also
prepended): what the ETags (coordinator/caching.py) and the event streams (coordinator/events.py)
are built on. Each script names its inputs in its header, and scripts.SCRIPTS lists the same names:
calls pass them by keyword.

On a Redis Cluster (DEXP_REDIS_CLUSTER) every script and every transaction here keeps to one
experiment's keys, hence to its hash slot (common/redis_keys.py); the index of experiments and the
agents' activation streams, in other slots, are never in a script or transaction with them.

The parts, by concern: reads.ExperimentReads (states, listings, revisions, status),
writes.ScriptWrites (creation, deletion, votes, reports, LDP's private reports, settled messages,
resets), decisions.Decisions (LDP's decision at each publication, common/ldp.py),
enrollment.Enrollments (tickets, enrollment, tokens, agents' views), departures.Departures (an
agent leaving), leases.Leases (the leases of the agent service's agents, their renewals and lapses), own.OwnMessages (an agent's own messages, the count waiting) and api_keys.ApiKeys
(named keys with roles, the audit log), over one core.StoreCore.
ExperimentStore is the one object the routes hold: it only puts them together.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.redis_client import AnyRedis
from coordinator.store.api_keys import ADMIN_NAME, KEY_PREFIX, ApiKeys, Principal, Role
from coordinator.store.core import (
    SERVICE_ALGORITHMS,
    TICKET_PREFIX,
    CrowdReport,
    Enrollment,
    Limits,
    ReportResult,
    ResetOutcome,
    SettleResult,
    Status,
    StoreCore,
    VoteResult,
    agent_of,
    cadence_ms,
    experiment_of,
    ticket_experiment,
)
from coordinator.store.departures import Departure, Departures
from coordinator.store.enrollment import Enrollments
from coordinator.store.leases import Lapse, Leases
from coordinator.store.own import OwnMessages
from coordinator.store.reads import TIE_CACHE_SIZE, ExperimentReads
from coordinator.store.state import (
    PUBLICATION_FIELDS,
    REVISION_FIELDS,
    SUMMARY_FIELDS,
    Counters,
    Design,
    Elimination,
    ExperimentState,
    LiveVoters,
    Tags,
    lease_bytes,
    load_generator_figures,
    publication_due,
    publication_due_at,
    revision_of,
)
from coordinator.store.writes import DELETE_CHUNK, WRONG_MESSAGE, ScriptWrites

__all__ = [
    "ADMIN_NAME",
    "DELETE_CHUNK",
    "KEY_PREFIX",
    "PUBLICATION_FIELDS",
    "REVISION_FIELDS",
    "SERVICE_ALGORITHMS",
    "SUMMARY_FIELDS",
    "TICKET_PREFIX",
    "TIE_CACHE_SIZE",
    "WRONG_MESSAGE",
    "ApiKeys",
    "Counters",
    "CrowdReport",
    "Departure",
    "Design",
    "Elimination",
    "Enrollment",
    "Enrollments",
    "ExperimentReads",
    "ExperimentState",
    "ExperimentStore",
    "Lapse",
    "Leases",
    "Limits",
    "LiveVoters",
    "Principal",
    "ReportResult",
    "ResetOutcome",
    "Role",
    "ScriptWrites",
    "SettleResult",
    "Status",
    "StoreCore",
    "Tags",
    "VoteResult",
    "agent_of",
    "cadence_ms",
    "experiment_of",
    "lease_bytes",
    "load_generator_figures",
    "publication_due",
    "publication_due_at",
    "revision_of",
    "ticket_experiment",
]


class ExperimentStore:
    """The store's parts behind one object (what the routes hold): each method is a part's.
    `reads_class` is the reads part a subclass may replace (a test interleaves writes with it)."""

    reads_class: type[ExperimentReads] = ExperimentReads

    def __init__(self, redis: AnyRedis, limits: Limits | None = None) -> None:
        self.core = core = StoreCore(redis, limits)
        self.redis = redis
        self.reads = reads = self.reads_class(core)
        self.enrollments = enrollments = Enrollments(core)
        self.writes = writes = ScriptWrites(core, reads, enrollments.refusal)
        # reads
        self.exists = reads.exists
        self.created_at = reads.created_at
        self.ids = reads.ids
        self.summaries = reads.summaries
        self.get = reads.get
        self.get_with_status = reads.get_with_status
        self.tag_parts = reads.tag_parts
        self.revision = reads.revision
        self.due_at = reads.due_at
        self.announce_status = reads.announce_status
        self.config = core.config
        # writes
        self.create = writes.create
        self.delete = writes.delete
        self.vote = writes.vote
        self.report = writes.report
        self.crowd_report = writes.crowd_report
        self.settle = writes.settle
        self.reset = writes.reset
        # agents
        self.issue_tickets = enrollments.issue_tickets
        self.unused_tickets = enrollments.unused_tickets
        self.ticket_usable = enrollments.ticket_usable
        self.enroll = enrollments.enroll
        self.authenticate = enrollments.authenticate
        self.agent_ids = enrollments.agent_ids
        self.own_votes = enrollments.own_votes
        self.agents_page = enrollments.agents_page
        self.revoke = enrollments.revoke
        self.own = own = OwnMessages(core)
        self.own_messages = own.own_messages
        self.waiting = own.waiting
        self.leave = Departures(core).leave
        self.leases = Leases(core)
        # API keys and the audit log
        self.api_keys = ApiKeys(core)

    @property
    def limits(self) -> Limits:
        return self.core.limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self.core.limits = limits

    @property
    def on_change(self) -> Callable[[str], None]:
        """Called with an experiment's id after this process changed it."""
        return self.core.on_change

    @on_change.setter
    def on_change(self, callback: Callable[[str], None]) -> None:
        self.core.on_change = callback
