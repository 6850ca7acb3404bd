"""The agent service: hosts agents of one or several experiments in one process, fed by Redis streams.

Each agent has a stream of activations and a consumer group; an activation is acknowledged (and
deleted, so the stream length is the backlog the load generator sees) only after the votes it caused
were acknowledged by the coordinator. A crash therefore means redelivery, and redelivery is harmless
because a vote is idempotent per (agent, arm). The entries of one read (every stream of it) are fed
first, then acknowledged together in one transaction: one round trip per read, whatever the number
of agents (with thousands of agents, a read holds a few entries per stream).

Experiments (DEXP_EXPERIMENT). An application running several tests runs one process: it hosts
AGENTS_PER_REPLICA agents in each experiment of a list (`demo,checkout`), or in every experiment the
coordinator lists (`*`, looked up every DEXP_DISCOVER_SECONDS, so an experiment created later gets
its agents). One read loop serves them all (one XREADGROUP over the agents' streams: every one, or
while some experiments are being played mostly theirs, see AgentService._turn; a stream's name
holds its experiment), with one GlobalView and one pub/sub channel per experiment, and one
coordinator client. The global sets are learnt from broadcasts and vote replies, and under `*` from
the (epoch, version) of each experiment in the coordinator's list; the fallback refresh of each one
is spread so that a process sends at most DEXP_POLL_RATE of them a second. A problem with one experiment stops only its agents:
- deleted (404), or deleted and created again under the same id (another creation time: its agents
  are the old one's): dropped, its streams no longer read and its channel left; with a fixed list
  it is looked for again every DEXP_DISCOVER_SECONDS (and gets new agents if it comes back);
- not hostable (not created yet, out of tickets, open enrollment refused with 401): one log line
  (again only if the reason changes), retried every DEXP_DISCOVER_SECONDS; agents already enrolled
  are hosted;
- at a limit of the coordinator (enrollment refused with 403: the experiment has its maximum of
  agents, DEXP_MAX_AGENTS, or under open enrollment this address has its maximum in it,
  DEXP_MAX_AGENTS_PER_CLIENT, which counts every process of one machine as one client): the agents
  enrolled so far are hosted and do their work, the others are not asked for again by this process
  (waiting does not lift a limit), and one log line names the limit and the fix (tickets, which
  the per-address limit does not apply to, or a higher limit on the coordinator, then a restart);
- rate-limited (429): the request waits as Retry-After asks and is sent again (clients/coordinator.py);
  a 429 never stops anything, it only slows it down;
- any other refusal (4xx) of one of its requests (a vote refused with 401: the coordinator does not
  know the agents' tokens): its agents pause for DEXP_DISCOVER_SECONDS, one log line names the
  cause and the fix (the activations that caused it are acknowledged: dropping one is harmless,
  feeding it twice is not).
At start, with a fixed list, the process exits with status 3 (one log line, no traceback) when no
experiment of it got all its agents, as it always did with one id, and as an operator who must
supply tickets expects; except at a limit (403): then it runs with the agents it got if it got
any, since they are enrolled and count in the experiment (its threshold, its ties), so an exit
would leave them as orphans that hold activations nobody reads and still count against the limit;
it exits with status 3 only when it got no agent in any experiment. Under `*` it never exits for
an enrollment problem. Exit status: 0 stopped (SIGTERM, SIGINT); 2 invalid configuration; 3 no
experiment of a fixed list hostable at start (the line says why and what to do); 1 Redis never
reachable at start, or a refusal nothing above handles (one line each).

Restarts (DEXP_STATE_DIR). With a state directory, the process keeps each agent's credentials and
vote record there (agent/state.py; one directory for all its experiments, each file names its own)
and a restart re-uses them: the same agent ids, hence the same streams and consumer groups, whose
pending entries (read by the dead process, never acknowledged) are read again first; the votes the
dead process had decided are never decided again, and those it had not seen acknowledged are sent
again (a copy is harmless). The local statistics are not saved: a restarted agent starts fresh on
the global set, which is exactly DE's own restart rule (an agent whose local set empties restarts on
the global set with fresh statistics). Each vote it sends later is still decided at confidence
1 - eta on samples it observed itself after the restart, and its voted set keeps it from voting
twice on an arm, so the analysis of DE (at most one vote per agent and arm, each wrong with
probability at most eta) holds across the restart. Restoring statistics instead would need rewards
or means on disk, which must never leave the process. Without a state directory every start enrolls
new agents (the old ones' streams are orphaned).

Enrollment. Each agent that is not restored takes one ticket of its own experiment (DEXP_TICKETS,
DEXP_TICKETS_FILE: a ticket names its experiment, so one list serves several, and it is read again
at each discovery round and whenever the tickets read are used up, so tickets appended later are
used): the process walks that experiment's tickets from a random offset (replicas may share one
file), skips a ticket refused with 401 (used by another replica, expired, or burnt by a lost reply)
and tries the next. Tickets are not subject to open enrollment's per-address limits (number and
rate): the way to enroll many agents from one machine. When they run out first, the
experiment gets one line saying how to get more tickets. Without tickets, agents enroll with the
shared secret (open enrollment, refused by a production coordinator unless it allows it). Tickets
and tokens are never logged.

Faults. The coordinator unreachable: every request is retried with capped back-off until it answers.
Redis unreachable: the loop waits with capped back-off, then reads the pending entries again (a read
whose reply was lost left them pending) and resubscribes; an acknowledgement (XACK) is retried until
it succeeds, so a batch is never fed to the local statistics twice.

Redis Cluster (DEXP_REDIS_CLUSTER; docs/SCALING.md). A read or a transaction keeps to one hash slot:
the streams are read with one non-blocking XREADGROUP per hash tag (a shard of an experiment, see
common.redis_keys.activations), all in one cluster pipeline, and acknowledged with one MULTI/EXEC
per hash tag; on a single Redis the one blocking read over every stream stays as it is. A failover
(CLUSTERDOWN, TRYAGAIN, a slot without a master) is Redis unreachable, waited out as above. It can
lose acknowledgements the dead master had taken: an entry used already that comes back is
acknowledged again but not used again (each stream's last entry used is remembered).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import random
import signal
import socket
import sys
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import redis
from pydantic import ValidationError
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    SlotNotCoveredError,
    TryAgainError,
)

from agent.library import Agent, GlobalView
from agent.settings import AgentSettings, ticket_experiment
from agent.state import AgentRecord, StateDir
from clients.coordinator import CoordinatorClient, CoordinatorError
from clients.redis import NotedRetry, connect_redis
from common import redis_keys as keys
from common.wire import decode_rewards

log = logging.getLogger("dexp.agent.service")
CONSUMER = "agent"  # one logical consumer per stream: a restarted process sees its pending entries
# Redis unreachable, or (on a cluster) a failover under way: a master down and its replica not
# promoted yet (CLUSTERDOWN, TRYAGAIN, a slot without a master). Waited out, never fatal. On a single
# Redis only the first two occur.
REDIS_DOWN = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    TryAgainError,
    SlotNotCoveredError,
)
# On a cluster the read does not block (see AgentService._read_cluster): with nothing to read, the
# loop waits this long, doubling up to the second figure while nothing comes.
CLUSTER_IDLE_WAIT = (0.005, 0.1)
# Reads (see AgentService._turn). A process reading more streams than READ_CHUNK reads them all
# only at a sweep, every SWEEP_SECONDS, in non-blocking reads of READ_CHUNK streams at most (Redis
# spends about 0.25 ms on an empty read of 1,000 streams: benchmarks/bench_redis_ops.py), and in
# between only the hot experiments' streams: those that gave entries in the last HOT_SECONDS.
READ_CHUNK = 1000
SWEEP_SECONDS = 1.0
HOT_SECONDS = 2.0
# The pending entries of every stream are read again when a read may have lost its reply (a Redis
# error, a retry by redis-py), and, as a safety net, this often.
DRAIN_SECONDS = 30.0


class EnrollmentFailed(RuntimeError):
    """An experiment's agents cannot all be hosted: it does not exist, the tickets ran out or
    cannot be read, or the coordinator refused enrollment."""


class EnrollmentLimited(EnrollmentFailed):
    """The coordinator refuses to enroll more agents in an experiment (403) at one of its limits:
    the experiment has its maximum of agents (DEXP_MAX_AGENTS), or this client address its maximum
    under open enrollment (DEXP_MAX_AGENTS_PER_CLIENT). Waiting does not lift it: not retried."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def per_client(self) -> bool:
        return "DEXP_MAX_AGENTS_PER_CLIENT" in self.detail

    def line(self, experiment: str, enrolled: int, wanted: int, tickets: bool) -> str:
        """The one log line: which limit, what this process keeps, and the fix."""
        missing = wanted - enrolled
        kept = (
            f"this process hosts the {enrolled} of its {wanted} agent(s) it got and does not ask "
            "for more"
            if enrolled
            else f"this process got none of its {wanted} agent(s)"
        )
        if self.per_client:
            fix = (
                f"enroll with tickets instead (`dexp tickets issue {experiment} --count "
                f"{missing}`, then DEXP_TICKETS_FILE; tickets are not subject to this limit of "
                "open enrollment, which counts every process of one address as one client), or "
                "raise DEXP_MAX_AGENTS_PER_CLIENT on the coordinator, then restart this process"
            )
        elif "DEXP_MAX_AGENTS" in self.detail:
            fix = (
                "raise DEXP_MAX_AGENTS on the coordinator (its experiments then admit more "
                "agents), then restart this process"
            )
        else:
            fix = "see the coordinator's reason; restart this process once it is resolved"
        via = "with tickets" if tickets else "under open enrollment"
        return (
            f"experiment {experiment}: the coordinator refuses to enroll more agents {via} "
            f"(403: {self.detail}): {kept}; to host all {wanted}, {fix}"
        )


class Tickets:
    """The configured tickets, walked once in a circle from a random offset: several replicas that
    share one list mostly start on different tickets, and each ticket is tried at most once."""

    def __init__(self, tickets: list[str], rng: random.Random | None = None) -> None:
        self.tickets = tickets
        self.start = (rng or random.SystemRandom()).randrange(len(tickets)) if tickets else 0
        self.tried = 0
        self.refused = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        """(position in the list from 1, ticket), each ticket once."""
        while self.tried < len(self.tickets):
            index = (self.start + self.tried) % len(self.tickets)
            self.tried += 1
            yield index + 1, self.tickets[index]


def ticket_label(ticket: str) -> str:
    """What a log may show of a ticket: `ticket.<id>.<secret>` without its secret."""
    head, _, secret = ticket.rpartition(".")
    return f"{head}.…" if head and secret else "(malformed ticket)"


@dataclass
class Hosted:
    """One experiment's part of the process: its view of the global set, its agents (by stream),
    their state files and seeds, and what the loop does for it."""

    view: GlobalView
    state: StateDir | None
    seeds: list[np.random.SeedSequence]
    restored: int  # agents restored from the state directory (the others were enrolled)
    agents: dict[str, Agent] = field(default_factory=dict)
    installed: bool = False  # its streams are read and its channel subscribed
    changed: bool = False  # a broadcast or the listing announced a change of its global set
    next_refresh: float = 0.0  # when its fallback refresh is due (see AgentService.refresh_period)
    hot_until: float = 0.0  # its streams gave entries lately: read at every turn until then
    reconciled: tuple[int, int] = (0, -1)  # the view's (snapshot_seq, lost_at) at the last pass
    next_reconcile: float = 0.0
    resend_due: bool = True  # its agents' pending votes are to be sent (again)
    paused_until: float = 0.0  # a refused request: its agents wait until then (0: running)
    failure: str = ""  # the last refusal logged

    @property
    def experiment(self) -> str:
        return self.view.experiment

    @property
    def paused(self) -> bool:
        return self.paused_until > 0


class AgentService:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.stopping = False
        self.client = CoordinatorClient(
            settings.coordinator_url,
            retry_max_seconds=settings.retry_max_seconds,
            should_stop=lambda: self.stopping,
        )
        self.redis = connect_redis(settings.redis_url, cluster=settings.redis_cluster)
        self.cluster = isinstance(self.redis, RedisCluster)
        retry = (
            self.redis.get_retry()
            if isinstance(self.redis, redis.Redis)
            else getattr(self.redis, "retry", None)  # RedisCluster keeps it as an attribute
        )
        self.retry = retry if isinstance(retry, NotedRetry) else NotedRetry(NoBackoff(), 0)
        self.idle = CLUSTER_IDLE_WAIT[0]  # the cluster's wait when nothing was read
        # On a cluster, per stream, the id of the last entry fed to its agent: a failover can lose
        # acknowledgements the old master had taken, and an entry read again is then acknowledged
        # without being fed a second time (see _fresh).
        self.last_fed: dict[str, tuple[int, int]] = {}
        self.refed = 0
        # One directory (and lock) for every experiment: `of` gives each its own agents.
        self.state = (
            StateDir(settings.state_dir, "", settings.state_fsync) if settings.state_dir else None
        )
        if self.state:
            self.state.lock()
        self.hosted: dict[str, Hosted] = {}
        self.streams: dict[str, tuple[Hosted, Agent]] = {}  # every read stream -> its agent
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.problems: dict[str, str] = {}  # experiment -> why it is not (fully) hosted, logged
        # experiment -> the line saying which limit of the coordinator (403) stopped its
        # enrollment: never asked again by this process (until the experiment is dropped)
        self.limited: dict[str, str] = {}
        self.spent: set[str] = set()  # tickets used or refused: never tried again
        self.refused: Counter[str] = Counter()  # per experiment, tickets refused
        self.malformed_logged = False
        self.activations = 0
        self.redelivered = 0
        self.drained = False  # the pending entries of every read stream were read again
        self.next_discovery = 0.0
        self.next_sweep = 0.0  # the next read of every stream (see _turn)
        if settings.every_experiment:
            log.info(
                "following every experiment the coordinator lists (checked every %gs)",
                settings.discover_seconds,
            )
        problems = self._discover(report=settings.every_experiment)
        # At a limit (403), the agents got are kept: they are enrolled, an exit would orphan them.
        running = [
            h for h in self.hosted.values() if self._complete(h) or h.experiment in self.limited
        ]
        if not settings.every_experiment and not running:
            self.close()
            raise EnrollmentFailed("; ".join(problems.values()))
        for experiment, problem in problems.items():
            self._problem(experiment, problem)

    # -- which experiments, and their agents ----------------------------------------------------
    def _complete(self, hosted: Hosted) -> bool:
        return len(hosted.agents) >= self.settings.agents_per_replica

    def _discover(self, report: bool = True) -> dict[str, str]:
        """Host the experiments to follow that are not fully hosted yet (with `*`, first drop the
        hosted ones the coordinator no longer lists and are gone); their problems, logged if
        `report`."""
        self.next_discovery = time.monotonic() + self.settings.discover_seconds
        if self.settings.every_experiment:
            try:
                listed = self.client.experiments()
            except CoordinatorError as exc:
                refused = f"the coordinator refused to list its experiments ({exc})"
                self._problem("*", refused)
                return {"*": refused}
            self.problems.pop("*", None)
            wanted = [str(e["id"]) for e in listed]
            self._compare(listed)
            for experiment in set(self.hosted) - set(wanted):
                self._verify(self.hosted[experiment])
            for experiment in set(self.problems) - set(wanted):
                del self.problems[experiment]  # gone: nothing to retry
            for experiment in set(self.limited) - set(wanted):
                del self.limited[experiment]  # gone: a new one of that name starts afresh
        else:
            wanted = self.settings.experiments
        problems: dict[str, str] = {}
        for experiment in wanted:
            hosted = self.hosted.get(experiment)
            if hosted is not None and self._complete(hosted):
                continue
            if experiment in self.limited:
                continue  # a limit of the coordinator: said once, not asked again
            problem = self._try_host(experiment)
            if problem is None:
                self.problems.pop(experiment, None)
                continue
            problems[experiment] = problem
            if report:
                self._problem(experiment, problem)
        return problems

    def _compare(self, listed: list[dict[str, Any]]) -> None:
        """The listing names each experiment's (epoch, version): a hosted view that differs is
        refreshed at once. Under `*` this is the check that scales (one page per 100
        experiments), and the fallback refreshes only back it up."""
        for summary in listed:
            hosted = self.hosted.get(str(summary.get("id")))
            if hosted is None:
                continue
            view = hosted.view
            listed_at = (summary.get("epoch"), summary.get("version"))
            if listed_at != (view.epoch, view.version) or summary.get("created_at") not in (
                None,
                view.created_at,
            ):
                hosted.changed = True

    def _problem(self, experiment: str, problem: str) -> None:
        """Log why an experiment is not (fully) hosted: once, and again only if it changes."""
        if self.problems.get(experiment) != problem:
            self.problems[experiment] = problem
            if experiment in self.limited:  # not retried: the line says what to do
                log.error("%s", problem)
                return
            log.error(
                "%s (retried every %gs, DEXP_DISCOVER_SECONDS; the other experiments carry on)",
                problem,
                self.settings.discover_seconds,
            )

    def _try_host(self, experiment: str) -> str | None:
        """Host `experiment`'s agents; None when all are, else why not."""
        try:
            self._host(experiment)
        except EnrollmentLimited as exc:
            hosted = self.hosted.get(experiment)
            line = exc.line(
                experiment,
                len(hosted.agents) if hosted else 0,
                self.settings.agents_per_replica,
                self.settings.uses_tickets,
            )
            self.limited[experiment] = line
            return line
        except EnrollmentFailed as exc:
            return str(exc)
        except CoordinatorError as exc:
            if exc.status == 404:
                return f"experiment {experiment} does not exist (yet)"
            return f"experiment {experiment}: the coordinator refused to enroll its agents ({exc})"
        return None

    def _host(self, experiment: str) -> None:
        """Restore the experiment's saved agents (first time only) and enroll the missing ones;
        the agents got so far are hosted even if the rest fail (EnrollmentFailed)."""
        n = self.settings.agents_per_replica
        hosted = self.hosted.get(experiment)
        if hosted is None:
            view = GlobalView.fetch(self.client, experiment)
            state = self.state.of(experiment) if self.state else None
            saved = state.load(view.created_at) if state else []
            if len(saved) > n:
                log.warning(
                    "%d agents of %s saved in %s but AGENTS_PER_REPLICA=%d: hosting the first %d, "
                    "the others' streams are left unread",
                    len(saved),
                    experiment,
                    self.settings.state_dir,
                    n,
                    n,
                )
                saved = saved[:n]
            hosted = Hosted(view, state, self._seeds(experiment, bool(saved)), len(saved))
            for slot, record in enumerate(saved):
                agent = Agent(
                    self.client,
                    view,
                    record.agent_id,
                    record.token,
                    np.random.default_rng(hosted.seeds[slot]),
                    record=record,
                    reconcile_seconds=self.settings.reconcile_seconds,
                )
                self._attach(hosted, agent, slot)
        before = len(hosted.agents) if hosted.installed else 0
        walker: list[Tickets] = []  # the tickets read for this round (read on first use)
        try:
            while len(hosted.agents) < n:
                slot = len(hosted.agents)
                agent = self._enroll(hosted, np.random.default_rng(hosted.seeds[slot]), walker)
                if hosted.state:  # before anything else: a crash now must not enroll it again
                    hosted.state.save(agent.record, hosted.view.created_at, slot, durable=True)
                self._attach(hosted, agent, slot)
        finally:
            if len(hosted.agents) > before:
                self._install(hosted, added=len(hosted.agents) - before)

    def _seeds(self, experiment: str, restart: bool) -> list[np.random.SeedSequence]:
        """The agents' seeds: from DEXP_SEED and the experiment's id (a process of one experiment
        draws exactly what it always did). A restart draws new randomness: the same seed would
        replay the dead process's choices."""
        entropy: Any = self.settings.seed
        if restart and entropy is not None:
            entropy = [entropy, time.time_ns() % 2**32]
        n = self.settings.agents_per_replica
        if self.settings.experiments == [experiment]:
            return np.random.SeedSequence(entropy).spawn(n)
        key = (zlib.crc32(experiment.encode()),)
        return np.random.SeedSequence(entropy, spawn_key=key).spawn(n)

    def _attach(self, hosted: Hosted, agent: Agent, slot: int) -> None:
        if hosted.state:
            agent.persist = self._persister(hosted, agent.record, slot)
        hosted.agents[keys.activations(hosted.experiment, agent.agent_id)] = agent

    def _install(self, hosted: Hosted, added: int) -> None:
        """Read the experiment's streams (groups created), follow its channel, send its agents'
        pending votes, and say so."""
        experiment = hosted.experiment
        self._create_groups(list(hosted.agents))
        self.hosted[experiment] = hosted
        for stream, agent in hosted.agents.items():
            self.streams[stream] = (hosted, agent)
        if not hosted.installed:
            self.pubsub.subscribe(keys.events(experiment))
            hosted.installed = True
            hosted.next_refresh = time.monotonic() + self.refresh_period * random.random()
        hosted.resend_due = True
        self.drained = False  # restored agents' entries read by a dead process come first
        log.info(
            "%d agent(s) in %s on %s (M=%d): %d restored from %s, %d enrolled",
            len(hosted.agents),
            experiment,
            socket.gethostname(),
            hosted.view.threshold,
            hosted.restored,
            self.settings.state_dir or "-",
            len(hosted.agents) - hosted.restored,
        )
        if hosted.restored and added == len(hosted.agents):
            restored = list(hosted.agents.values())[: hosted.restored]
            log.info("restored agents: %s", ",".join(a.agent_id for a in restored))

    def _tickets_of(self, experiment: str) -> list[str]:
        """The configured tickets of `experiment`, the list read again (a file may have grown)."""
        try:
            tickets = self.settings.ticket_list()
        except OSError as exc:
            raise EnrollmentFailed(
                f"cannot read the tickets file DEXP_TICKETS_FILE={self.settings.tickets_file}: "
                f"{exc.strerror or exc}"
            ) from None
        malformed = sum(1 for t in tickets if not ticket_experiment(t))
        if malformed and not self.malformed_logged:
            self.malformed_logged = True
            log.warning(
                "%d ticket(s) ignored: not of the form ticket.<experiment>.<secret>", malformed
            )
        return [t for t in tickets if ticket_experiment(t) == experiment]

    def _enroll(self, hosted: Hosted, rng: np.random.Generator, walker: list[Tickets]) -> Agent:
        """A new agent of the experiment: with the next ticket of it that works, or with the
        shared secret if no ticket is configured at all. `walker` holds the tickets read in this
        round ([] at first): they are read once, and again only when they are used up (a file may
        have grown), not for every agent (thousands of agents, thousands of tickets)."""
        experiment, view = hosted.experiment, hosted.view
        period = self.settings.reconcile_seconds
        if not self.settings.uses_tickets:
            try:
                return Agent.enroll(
                    self.client,
                    view,
                    self.settings.enrollment_secret,
                    rng,
                    reconcile_seconds=period,
                )
            except CoordinatorError as exc:
                if exc.status == 403:
                    raise EnrollmentLimited(exc.detail) from None
                if exc.status != 401:
                    raise
                raise EnrollmentFailed(
                    f"experiment {experiment}: the coordinator refused open enrollment ({exc}): "
                    f"give the agents tickets (`dexp tickets issue {experiment} --count N`, then "
                    "DEXP_TICKETS_FILE or DEXP_TICKETS)"
                ) from None
        configured: list[str] = []
        for fresh in (False, True):
            if fresh or not walker:  # the first read of this round, or the read ones used up
                configured = self._tickets_of(experiment)
                unspent = [t for t in configured if t not in self.spent]
                if fresh and not unspent:
                    break
                walker[:] = [Tickets(unspent)]
            tickets = walker[0]
            for position, ticket in tickets:
                try:
                    agent = Agent.enroll(self.client, view, ticket, rng, reconcile_seconds=period)
                except CoordinatorError as exc:
                    if exc.status == 403:  # the experiment is full: the ticket is still good
                        raise EnrollmentLimited(exc.detail) from None
                    if exc.status != 401:
                        raise
                    self.spent.add(ticket)
                    self.refused[experiment] += 1
                    log.info(
                        "ticket %d of %d (%s) refused (used, expired or unknown): trying the next",
                        position,
                        len(tickets.tickets),
                        ticket_label(ticket),
                    )
                    continue
                self.spent.add(ticket)
                return agent
        needed = self.settings.agents_per_replica - hosted.restored
        enrolled = len(hosted.agents) - hosted.restored
        more = f"`dexp tickets issue {experiment} --count {needed - enrolled}`"
        if not configured:
            raise EnrollmentFailed(
                f"experiment {experiment}: no ticket of it is configured (DEXP_TICKETS, "
                f"DEXP_TICKETS_FILE): issue {more} and add them there"
            )
        raise EnrollmentFailed(
            f"experiment {experiment}: out of tickets: {enrolled} of the {needed} agent(s) to "
            f"enroll got one ({len(configured)} ticket(s) of {experiment} configured, "
            f"{self.refused[experiment]} refused as used, expired or unknown); issue more with "
            f"{more} and add them to DEXP_TICKETS_FILE or DEXP_TICKETS"
        )

    def _persister(self, hosted: Hosted, record: AgentRecord, slot: int) -> Callable[[], None]:
        state, created_at = hosted.state, hosted.view.created_at
        assert state is not None

        def persist() -> None:
            state.save(record, created_at, slot)

        return persist

    # -- one experiment's failures ----------------------------------------------------------------
    def _gone(self, hosted: Hosted) -> str | None:
        """Why the experiment's agents are gone for good (deleted, or created again), asking the
        coordinator; None if it is still theirs."""
        try:
            hosted.view.refresh(self.client)
        except CoordinatorError as exc:
            return "was deleted" if exc.status == 404 else None
        if hosted.view.replaced:
            return "was deleted and created again (these agents were the old one's)"
        return None

    def _verify(self, hosted: Hosted) -> None:
        reason = self._gone(hosted)
        if reason is not None:
            self._drop(hosted, reason)

    def _drop(self, hosted: Hosted, reason: str) -> None:
        """Stop hosting the experiment: its streams are no longer read, its channel is left."""
        experiment = hosted.experiment
        if self.hosted.get(experiment) is not hosted:
            return
        del self.hosted[experiment]
        self.limited.pop(experiment, None)  # another experiment of that name may come: ask again
        for stream in hosted.agents:
            self.streams.pop(stream, None)
        with contextlib.suppress(redis.RedisError):
            self.pubsub.unsubscribe(keys.events(experiment))
        log.warning(
            "experiment %s %s: its %d agent(s) here are dropped, their streams no longer read",
            experiment,
            reason,
            len(hosted.agents),
        )

    def _failed(self, hosted: Hosted, exc: CoordinatorError) -> None:
        """A request of the experiment refused: drop it if it is gone, else pause its agents."""
        if self.hosted.get(hosted.experiment) is not hosted:
            return
        reason = self._gone(hosted)
        if reason is not None:
            self._drop(hosted, reason)
            return
        hosted.paused_until = time.monotonic() + self.settings.discover_seconds
        failure = str(exc)
        if failure != hosted.failure:
            hosted.failure = failure
            log.error(
                "experiment %s: the coordinator refused a request (%s): its agents pause for %gs "
                "and try again (DEXP_DISCOVER_SECONDS), the other experiments carry on%s",
                hosted.experiment,
                failure,
                self.settings.discover_seconds,
                refusal_hint(exc),
            )

    def _guarded(self, hosted: Hosted, action: Callable[[], object]) -> None:
        """Run one experiment's work; a refusal stops that experiment only."""
        if self.hosted.get(hosted.experiment) is not hosted or hosted.paused:
            return
        try:
            action()
        except CoordinatorError as exc:
            self._failed(hosted, exc)

    def _resume(self, now: float) -> None:
        for hosted in self.hosted.values():
            if hosted.paused and now >= hosted.paused_until:
                hosted.paused_until = 0.0
                hosted.resend_due = True
                self.drained = False

    # -- the loop ---------------------------------------------------------------------------------
    def _create_groups(self, streams: list[str]) -> None:
        for stream in streams:
            try:
                self.redis.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def _subscribe(self) -> Any:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        channels = [keys.events(experiment) for experiment in self.hosted]
        if channels:
            pubsub.subscribe(*channels)
        return pubsub

    def stop(self, *_: Any) -> None:
        self.stopping = True

    def close(self) -> None:
        """Release what the service holds (the state directory's lock included)."""
        self.client.close()
        with contextlib.suppress(Exception):
            self.pubsub.close()
        with contextlib.suppress(Exception):
            self.redis.close()
        if self.state:
            self.state.close()

    @property
    def refresh_period(self) -> float:
        """The mean period of each experiment's fallback refresh: DEXP_POLL_SECONDS, stretched so
        that the process sends at most DEXP_POLL_RATE of them a second in all (1,000 experiments
        refreshed every 2 s would be 500 requests a second from each process, most of the
        coordinator's work for nothing: the global set changes at most K - 1 times an epoch).
        Each refresh is due at a random point of it, so they do not come in bursts."""
        return max(self.settings.poll_seconds, len(self.hosted) / self.settings.poll_rate)

    def _follow_global_set(self) -> None:
        while (message := self.pubsub.get_message(timeout=0)) is not None:
            if message.get("type") == "message":
                channel = message["channel"]
                channel = channel.decode() if isinstance(channel, bytes) else str(channel)
                for experiment, hosted in self.hosted.items():
                    if channel == keys.events(experiment):
                        hosted.changed = True
        now = time.monotonic()
        period = self.refresh_period
        for hosted in list(self.hosted.values()):
            if hosted.changed or now >= hosted.next_refresh:
                hosted.changed = False
                hosted.next_refresh = now + period * (0.5 + random.random())
                self._guarded(hosted, functools.partial(hosted.view.refresh, self.client))
                if hosted.view.replaced:
                    self._drop(
                        hosted, "was deleted and created again (these agents were the old one's)"
                    )

    def _reconcile(self) -> None:
        """After each new read of an experiment's global state or sign of lost writes, and once a
        second for the agents' slow periodic checks: each agent checks its acknowledged votes if it
        has a reason to (Agent.check_reason) and sends again those the coordinator lost."""
        now = time.monotonic()
        for hosted in list(self.hosted.values()):
            seen = (hosted.view.snapshot_seq, hosted.view.lost_at)
            if seen == hosted.reconciled and now < hosted.next_reconcile:
                continue
            hosted.reconciled, hosted.next_reconcile = seen, now + 1.0
            for agent in hosted.agents.values():
                self._guarded(hosted, functools.partial(agent.reconcile, now))

    def _resend(self) -> None:
        """Votes decided but not seen acknowledged: a dead process's, or a paused experiment's."""
        for hosted in list(self.hosted.values()):
            if hosted.resend_due and not hosted.paused:
                hosted.resend_due = False
                for agent in hosted.agents.values():
                    self._guarded(hosted, agent.resend_pending)

    def _process(self, reply: list[Any]) -> int:
        """Feed one read's entries (every stream of it) to their agents, then acknowledge them all
        in one transaction: one round trip per read, not one per stream (with thousands of agents
        a read holds a few entries per stream, and per-stream round trips were most of the time);
        on a cluster, one per hash tag. An entry is acknowledged only after the votes it caused
        were (they are sent as it is fed). The number of entries fed."""
        done: dict[str, list[bytes]] = {}
        failures: list[tuple[Hosted, CoordinatorError]] = []
        refed = 0  # entries read again after a failover (a cluster only): not fed again
        for raw, entries in reply:
            stream = _text(raw)
            if stream not in self.streams or not entries:  # dropped meanwhile, or nothing
                continue
            hosted, agent = self.streams[stream]
            if hosted.paused:
                continue  # read before the pause: left pending, read again when it ends
            ids: list[bytes] = []
            if self.cluster:
                entries = self._fresh(stream, entries, ids)
                refed += len(ids)
            try:
                for entry_id, fields in entries:
                    # Acknowledged even if its vote is refused below: an activation lost is
                    # harmless, one fed twice to the local statistics is not.
                    ids.append(entry_id)
                    if not fields:  # deleted while pending
                        continue
                    rewards = decode_rewards(fields[b"r"])
                    arms = agent.choose()
                    if arms:
                        agent.observe(arms, rewards[arms])
            except CoordinatorError as exc:
                hosted.paused_until = hosted.paused_until or time.monotonic()  # no more of it
                failures.append((hosted, exc))
            if self.cluster and ids:  # the last entry fed (or dropped)
                newest = _entry_order(ids[-1])
                if newest > self.last_fed.get(stream, (0, 0)):
                    self.last_fed[stream] = newest
            done[stream] = ids
        count = sum(len(ids) for ids in done.values()) - refed
        self.activations += count
        if refed:
            self.refed += refed
            log.warning(
                "%d activations read again after a failover lost their acknowledgement or their "
                "delivery: acknowledged again, not fed again",
                refed,
            )
        if done:
            self._acknowledge(done)
        for hosted, refusal in failures:
            hosted.paused_until = 0.0
            self._failed(hosted, refusal)
        return count

    def _fresh(
        self, stream: str, entries: list[tuple[bytes, Any]], stale: list[bytes]
    ) -> list[tuple[bytes, Any]]:
        """The entries of `stream` newer than the last one fed (a cluster only). The others were
        fed already and come back because a failover lost their acknowledgement: their ids go to
        `stale`, to be acknowledged again, not fed. Ids grow within a stream, so this costs one
        comparison per read of a stream; a promoted replica whose clock is behind could give new
        entries smaller ids, which are then dropped (an activation lost is harmless)."""
        last = self.last_fed.get(stream)
        if last is None or not entries or _entry_order(entries[0][0]) > last:
            return entries
        stale.extend(e[0] for e in entries if _entry_order(e[0]) <= last)
        return [e for e in entries if _entry_order(e[0]) > last]

    def _acknowledge(self, done: dict[str, list[bytes]]) -> None:
        """XACK each stream's entries and delete them, retried until Redis answers: these
        activations went into the local statistics, so they must not be read again (if Redis lost
        them, XACK is a no-op). On a cluster, one transaction per hash tag (a transaction keeps to
        one slot): the streams of one shard together.

        The deletion is XTRIM MINID (every entry older than the newest one acknowledged), not
        XDEL of each id: the transaction acknowledging 200 streams of 180 entries held Redis for
        185 ms with XDEL and holds it for 20 ms (benchmarks/bench_redis_ops.py). It is exact because a
        stream is read in order and its older entries were acknowledged already, except after a
        read whose reply was lost (redis-py sent it again: NotedRetry): their entries are still
        pending, unread, and the ids alone are deleted until the next read of pending entries."""
        groups = _by_hash_tag(done) if self.cluster else [done]
        exact = self.retry.retried
        delay = 0.05
        while True:
            try:
                while groups:
                    # MULTI/EXEC: both or neither (acknowledged but not deleted would stay in the
                    # backlog forever; deleted but not acknowledged would be read again as empty).
                    pipe = self.redis.pipeline(transaction=True)
                    for stream, ids in groups[-1].items():
                        if not ids:
                            continue
                        pipe.xack(stream, keys.ACTIVATION_GROUP, *ids)
                        if exact:
                            pipe.xdel(stream, *ids)
                        else:
                            ms, seq = max(_entry_order(i) for i in ids)
                            pipe.xtrim(stream, minid=f"{ms}-{seq + 1}", approximate=False)
                    pipe.execute()
                    groups.pop()
                return
            except REDIS_DOWN as exc:
                if self.stopping:
                    raise
                log.warning("redis unreachable (%s); acknowledgement retried in %.2fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, self.settings.redis_retry_max_seconds)

    def _read(self, start: str) -> list[Any]:
        """New entries (">") of the streams _turn picks, or ("0") the pending entries of every
        stream of the running experiments."""
        now = time.monotonic()
        running = [h for h in self.hosted.values() if not h.paused]
        if start == "0":
            return self._xread([s for h in running for s in h.agents], "0", None)
        streams, block = self._turn(running, now)
        if not streams:  # nothing to read now: wait a little, as a blocking read would
            until = self.next_sweep if running else self.next_discovery
            time.sleep(max(0.0, min(1.0, until - time.monotonic())))
            return []
        reply = self._xread(streams, ">", block)
        for stream, entries in reply:
            if entries and (found := self.streams.get(_text(stream))):
                found[0].hot_until = now + HOT_SECONDS
        return reply

    def _turn(self, running: list[Hosted], now: float) -> tuple[list[str], int | None]:
        """The streams to read at this turn, and how long the read may block (ms; None: not).

        A read costs Redis time in proportion to the streams it names, whether they hold entries
        or not (benchmarks/bench_redis_ops.py: about 3 ms for 8,000 empty streams, the process
        hosting 8 agents in each of 1,000 experiments; 5.5 ms blocking, which registers and
        unregisters each), and Redis serves nobody else meanwhile. Up to READ_CHUNK streams, each turn reads them all, blocking up to
        a second (it returns at the first entry). Beyond, a sweep reads every stream every
        SWEEP_SECONDS, without blocking and READ_CHUNK streams at a time (see _xread); the turns
        in between read only the hot experiments' streams, blocking until the next sweep at
        most, and with none hot they wait for it. So a few experiments being played among many
        cost Redis what they would alone, and an experiment whose play starts is read within
        SWEEP_SECONDS."""
        if sum(len(h.agents) for h in running) <= READ_CHUNK:
            return [s for h in running for s in h.agents], 1000
        if now >= self.next_sweep:
            self.next_sweep = now + SWEEP_SECONDS
            return [s for h in running for s in h.agents], None
        hot = [s for h in running if h.hot_until > now for s in h.agents]
        return hot, max(1, math.ceil((self.next_sweep - now) * 1000))

    def _xread(self, streams: list[str], start: str, block: int | None) -> list[Any]:
        """XREADGROUP of `streams` from `start`: blocking (one read), or not (one read per
        READ_CHUNK streams, in turn, so that Redis serves others in between); on a cluster, see
        _read_cluster."""
        if not streams:
            return []
        if self.cluster:
            return self._read_cluster(streams, start)
        reply: list[Any] = []
        chunks = [streams] if block is not None else _chunks(streams, READ_CHUNK)
        for chunk in chunks:
            raw: Any = self.redis.xreadgroup(
                keys.ACTIVATION_GROUP,
                CONSUMER,
                dict.fromkeys(chunk, start),
                count=self.settings.batch,
                block=block,
            )
            reply += raw or []
        return reply

    def _read_cluster(self, streams: list[str], start: str) -> list[Any]:
        """On a cluster one XREADGROUP must keep to one slot: one per hash tag (the streams of one
        shard of one experiment), none blocking, all sent in one cluster pipeline (redis-py sends
        each node its reads at once, then collects the replies). Each read is addressed to the
        node that serves its slot in the client's map (so redis-py need not ask a node for the
        keys of XREADGROUP, a command whose keys move); a stale map after a failover is corrected
        by the client (a redirection, or a connection error: the map is read again). With nothing
        to read, the loop waits CLUSTER_IDLE_WAIT, as a blocking read would have."""
        assert isinstance(self.redis, RedisCluster)
        groups = _by_hash_tag(dict.fromkeys(streams, start))
        pipe = self.redis.pipeline(transaction=False)
        for group in groups:
            names = list(group)
            node = self.redis.get_node_from_key(names[0])
            pipe.execute_command(
                "XREADGROUP",
                "GROUP",
                keys.ACTIVATION_GROUP,
                CONSUMER,
                "COUNT",
                self.settings.batch,
                "STREAMS",
                *names,
                *[start] * len(names),
                target_nodes=node,
            )
        reply = [item for part in pipe.execute() if part for item in part]
        if start != "0":
            if any(entries for _, entries in reply):
                self.idle = CLUSTER_IDLE_WAIT[0]
            else:
                time.sleep(self.idle)
                self.idle = min(2 * self.idle, CLUSTER_IDLE_WAIT[1])
        return reply

    def _drain_pending(self) -> None:
        """Entries read earlier but never acknowledged: a dead process's, or a read whose reply
        was lost. Each is processed once, by the agents' current statistics."""
        count = 0
        while pending := [(s, e) for s, e in self._read("0") if e]:
            count += self._process(pending)
        if count:
            self.redelivered += count
            log.info("processed %d redelivered activations", count)

    def _groups_missing(self, exc: Exception) -> None:
        """XREADGROUP found a stream without its group, or a stream deleted while it blocked: its
        experiment was deleted (the coordinator deletes the streams too), or Redis lost its data.
        Drop the experiments that are gone, recreate the others' groups."""
        log.warning("consumer group missing (%s): an experiment deleted, or Redis lost data", exc)
        streams = list(self.streams)
        pipe = self.redis.pipeline(transaction=False)
        for stream in streams:
            pipe.xinfo_groups(stream)
        suspects: dict[str, Hosted] = {}
        for stream, reply in zip(streams, pipe.execute(raise_on_error=False), strict=True):
            groups = [] if isinstance(reply, Exception) else reply
            if not any(_text(g.get("name")) == keys.ACTIVATION_GROUP for g in groups):
                hosted = self.streams[stream][0]
                suspects[hosted.experiment] = hosted
        for hosted in suspects.values():
            self._verify(hosted)
            if self.hosted.get(hosted.experiment) is hosted:
                log.warning("recreating the consumer groups of %s", hosted.experiment)
                self._create_groups(list(hosted.agents))

    def _recover_redis(self, exc: Exception, delay: float) -> None:
        """Wait until Redis answers again, then make sure the groups exist and resubscribe."""
        log.warning("redis unreachable (%s); retrying in %.2fs", exc, delay)
        time.sleep(delay)
        self.redis.ping()
        self._create_groups(list(self.streams))  # a Redis that lost its data lost the groups too
        with contextlib.suppress(Exception):
            self.pubsub.close()
        self.pubsub = self._subscribe()
        now, period = time.monotonic(), self.refresh_period
        for hosted in self.hosted.values():  # a change announced while we were away was missed
            hosted.next_refresh = now + period * random.random()
        log.info("redis reachable again")

    def run(self) -> None:
        last_log, last_drain, delay = time.monotonic(), time.monotonic(), 0.05
        try:
            while not self.stopping:
                try:
                    now = time.monotonic()
                    if now >= self.next_discovery:
                        self._discover()
                    self._resume(now)
                    self._resend()
                    if not self.drained or self.retry.retried or now - last_drain > DRAIN_SECONDS:
                        # A read whose reply was lost and that redis-py sent again by itself
                        # left entries pending that no exception told us about: NotedRetry says
                        # so (and, as a safety net, every DRAIN_SECONDS).
                        self.retry.retried = False
                        self._drain_pending()
                        self.drained, last_drain = True, time.monotonic()
                    self._follow_global_set()
                    self._reconcile()
                    self._process(self._read(">"))
                    delay = 0.05
                except REDIS_DOWN as exc:
                    self.drained = False
                    while not self.stopping:
                        try:
                            self._recover_redis(exc, delay)
                            break
                        except REDIS_DOWN as again:
                            exc = again
                            delay = min(delay * 2, self.settings.redis_retry_max_seconds)
                except redis.ResponseError as exc:
                    # A stream or its group gone: NOGROUP, or UNBLOCKED when the stream is deleted
                    # while the read blocks on it (Redis 7).
                    if "NOGROUP" not in str(exc) and "UNBLOCKED" not in str(exc):
                        raise
                    self._groups_missing(exc)
                if time.monotonic() - last_log > 10:
                    last_log = time.monotonic()
                    self._log_progress()
        finally:
            self.close()

    def _log_progress(self) -> None:
        agents = [agent for _, agent in self.streams.values()]
        remaining = {e: sorted(h.view.remaining) for e, h in self.hosted.items()}
        log.info(
            "%d activations, %d votes (%d sent again, %d checks), %d settled messages, "
            "%d resets rate-limited, remaining arms %s",
            self.activations,
            sum(a.votes_sent for a in agents),
            sum(a.votes_resent for a in agents),
            sum(a.checks for a in agents),
            sum(a.settled_sent for a in agents),
            sum(a.resets_limited for a in agents),
            next(iter(remaining.values()))
            if len(remaining) == 1
            else " ".join(f"{e}={arms}" for e, arms in remaining.items()) or "-",
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry_order(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry id (b"<ms>-<seq>") as numbers, in the stream's order."""
    ms, _, seq = _text(entry_id).partition("-")
    return int(ms), int(seq or 0)


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _by_hash_tag(items: dict[str, Any]) -> list[dict[str, Any]]:
    """`items` (keyed by Redis key) split by hash tag: each part's keys share one cluster slot."""
    groups: dict[str, dict[str, Any]] = {}
    for key, value in items.items():
        groups.setdefault(keys.hash_tag(key), {})[key] = value
    return list(groups.values())


def refusal_hint(exc: CoordinatorError) -> str:
    """What an operator can do about a refusal of an enrolled agent's request ('' if nothing
    specific), as the end of a log line."""
    if exc.status == 401:
        return (
            ". The coordinator does not know these agents' tokens: its Redis lost its data (or "
            "the agents were enrolled on another coordinator). Restart this process without its "
            "state (DEXP_STATE_DIR) so that its agents enroll again"
        )
    if exc.status == 403:
        return ". An agent is not enrolled in this experiment, or the request is not allowed here"
    return ""


def settings_error(exc: ValidationError) -> str:
    """One line naming each bad variable as it is set in the environment."""
    problems = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "settings"
        variable = name if name.isupper() else f"DEXP_{name.upper()}"
        if variable == "DEXP_AGENTS_PER_REPLICA":
            variable = "AGENTS_PER_REPLICA"
        problems.append(f"{variable}: {error['msg'].removeprefix('Value error, ')}")
    return "dexp agent: invalid configuration, not starting: " + "; ".join(problems)


def main() -> None:
    try:
        settings = AgentSettings()
    except ValidationError as exc:  # a bad value: one line, no traceback, status 2
        print(settings_error(exc), file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format='{"time":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}',
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        service = AgentService(settings)
    except EnrollmentFailed as exc:
        log.error("%s", exc)
        sys.exit(3)
    except redis.RedisError as exc:  # connect_redis gave up
        log.error("redis unreachable at start (DEXP_REDIS_URL): %s; not starting", exc)
        sys.exit(1)
    except CoordinatorError as exc:  # a refusal nothing else handles: one line, no traceback
        log.error(
            "the coordinator refused a request at start (%s)%s; not starting",
            exc,
            refusal_hint(exc),
        )
        sys.exit(1)
    signal.signal(signal.SIGTERM, service.stop)
    signal.signal(signal.SIGINT, service.stop)
    try:
        service.run()
    except ConnectionError:  # the coordinator still unreachable when asked to stop
        if not service.stopping:
            raise
        log.warning("stopped while the coordinator was unreachable; pending votes are on record")
    except CoordinatorError as exc:  # a refusal nothing else handles: one line, no traceback
        log.error("stopped: the coordinator refused a request (%s)%s", exc, refusal_hint(exc))
        sys.exit(1)


if __name__ == "__main__":
    main()
