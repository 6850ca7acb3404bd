"""The agent service: hosts AGENTS_PER_REPLICA agents in one process, fed by Redis streams.

Each agent has a stream of activations and a consumer group; an activation is acknowledged (and
deleted, so the stream length is the backlog the load generator sees) only after the votes it caused
were acknowledged by the coordinator. A crash therefore means redelivery, and redelivery is harmless
because a vote is idempotent per (agent, arm).

Restarts (DEXP_STATE_DIR). With a state directory, the process keeps each agent's credentials and
vote record there (agent/state.py) and a restart re-uses them: the same agent ids, hence the same
streams and consumer groups, whose pending entries (read by the dead process, never acknowledged)
are read again first; the votes the dead process had decided are never decided again, and those it
had not seen acknowledged are sent again (a copy is harmless). The local statistics are not saved:
a restarted agent starts fresh on the global set, which is exactly DE's own restart rule (an agent
whose local set empties restarts on the global set with fresh statistics). Each vote it sends later
is still decided at confidence 1 - eta on samples it observed itself after the restart, and its
voted set keeps it from voting twice on an arm, so the analysis of DE (at most one vote per agent
and arm, each wrong with probability at most eta) holds across the restart. Restoring statistics
instead would need rewards or means on disk, which must never leave the process.
Without a state directory every start enrolls new agents (the old ones' streams are orphaned).

Enrollment. Each agent that is not restored takes one ticket (DEXP_TICKETS, DEXP_TICKETS_FILE): the
process walks the list from a random offset (replicas may share one file), skips a ticket refused
with 401 (used by another replica, expired, or burnt by a lost reply) and tries the next. When the
list runs out first, it exits with status 3 and one line saying how to get more tickets. Without
tickets, agents enroll with the shared secret (open enrollment, refused by a production coordinator
unless it allows it). Tickets and tokens are never logged.

Faults. The coordinator unreachable: every request is retried with capped back-off until it answers.
Redis unreachable: the loop waits with capped back-off, then reads the pending entries again (a read
whose reply was lost left them pending) and resubscribes; an acknowledgement (XACK) is retried until
it succeeds, so a batch is never fed to the local statistics twice.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import redis

from agent.client import CoordinatorClient, CoordinatorError
from agent.library import Agent, GlobalView
from agent.settings import AgentSettings
from agent.state import AgentRecord, StateDir
from common import redis_keys as keys
from common.wire import decode_rewards

log = logging.getLogger("dexp.agent.service")
CONSUMER = "agent"  # one logical consumer per stream: a restarted process sees its pending entries
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)


class EnrollmentFailed(RuntimeError):
    """The agents to enroll cannot all be enrolled: the tickets ran out, or cannot be read."""


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


def connect_redis(url: str, attempts: int = 120, delay: float = 0.5) -> redis.Redis:
    client = redis.Redis.from_url(url)
    for attempt in range(attempts):
        try:
            client.ping()
            return client
        except redis.ConnectionError as exc:
            if attempt == attempts - 1:
                raise
            log.warning("redis not ready (%s); retrying", exc)
            time.sleep(delay)
    return client


class AgentService:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.stopping = False
        self.client = CoordinatorClient(
            settings.coordinator_url,
            retry_max_seconds=settings.retry_max_seconds,
            should_stop=lambda: self.stopping,
        )
        self.redis = connect_redis(settings.redis_url)
        self.view = GlobalView.fetch(self.client, settings.experiment)
        self.state = (
            StateDir(settings.state_dir, settings.experiment, settings.state_fsync)
            if settings.state_dir
            else None
        )
        if self.state:
            self.state.lock()
        saved = self.state.load(self.view.created_at) if self.state else []
        if len(saved) > settings.agents_per_replica:
            log.warning(
                "%d agents saved in %s but AGENTS_PER_REPLICA=%d: hosting the first %d, the "
                "others' streams are left unread",
                len(saved),
                settings.state_dir,
                settings.agents_per_replica,
                settings.agents_per_replica,
            )
            saved = saved[: settings.agents_per_replica]
        # A restart draws new randomness: the same seed would replay the dead process's choices.
        entropy: Any = settings.seed
        if saved and settings.seed is not None:
            entropy = [settings.seed, time.time_ns() % 2**32]
        seeds = np.random.SeedSequence(entropy).spawn(settings.agents_per_replica)
        self.agents: dict[str, Agent] = {}
        self.restored = len(saved)
        self.tickets = self._tickets() if len(saved) < len(seeds) else None
        for slot, seed in enumerate(seeds):
            rng = np.random.default_rng(seed)
            if slot < len(saved):
                record = saved[slot]
                agent = Agent(
                    self.client,
                    self.view,
                    record.agent_id,
                    record.token,
                    rng,
                    record=record,
                    reconcile_seconds=settings.reconcile_seconds,
                )
            else:
                agent = self._enroll(rng, enrolled=slot - len(saved))
                if self.state:  # before anything else: a crash now must not enroll it again
                    self.state.save(agent.record, self.view.created_at, slot, durable=True)
            if self.state:
                agent.persist = self._persister(agent.record, slot)
            self.agents[keys.activations(settings.experiment, agent.agent_id)] = agent
        self._create_groups()
        self.pubsub = self._subscribe()
        self.activations = 0
        self.redelivered = 0
        self.last_refresh = time.monotonic()
        self.reconciled = (0, -1)  # the view's (snapshot_seq, lost_at) at the last pass
        self.next_reconcile = 0.0
        log.info(
            "%d agent(s) in %s on %s (M=%d): %d restored from %s, %d enrolled",
            len(self.agents),
            settings.experiment,
            socket.gethostname(),
            self.view.threshold,
            self.restored,
            settings.state_dir or "-",
            len(self.agents) - self.restored,
        )
        if self.restored:
            log.info("restored agents: %s", ",".join(a.agent_id for a in self.agents.values()))

    def _tickets(self) -> Tickets | None:
        """The configured tickets (None: none configured, open enrollment)."""
        if not self.settings.uses_tickets:
            return None
        try:
            return Tickets(self.settings.ticket_list())
        except OSError as exc:
            raise EnrollmentFailed(
                f"cannot read the tickets file DEXP_TICKETS_FILE={self.settings.tickets_file}: "
                f"{exc.strerror or exc}"
            ) from None

    def _enroll(self, rng: np.random.Generator, enrolled: int) -> Agent:
        """A new agent: with the next ticket that works, or with the shared secret if no ticket
        is configured. `enrolled`: agents this process enrolled so far (for the message)."""
        period = self.settings.reconcile_seconds
        if self.tickets is None:
            try:
                return Agent.enroll(
                    self.client,
                    self.view,
                    self.settings.enrollment_secret,
                    rng,
                    reconcile_seconds=period,
                )
            except CoordinatorError as exc:
                if exc.status != 401:
                    raise
                raise EnrollmentFailed(
                    f"the coordinator refused open enrollment ({exc}): give the agents tickets "
                    f"(`dexp tickets issue {self.settings.experiment} --count N`, then "
                    "DEXP_TICKETS_FILE or DEXP_TICKETS)"
                ) from None
        for position, ticket in self.tickets:
            try:
                return Agent.enroll(self.client, self.view, ticket, rng, reconcile_seconds=period)
            except CoordinatorError as exc:
                if exc.status != 401:
                    raise
                self.tickets.refused += 1
                log.info(
                    "ticket %d of %d (%s) refused (used, expired or unknown): trying the next",
                    position,
                    len(self.tickets.tickets),
                    ticket_label(ticket),
                )
        needed = self.settings.agents_per_replica - self.restored
        raise EnrollmentFailed(
            f"out of tickets: {enrolled} of the {needed} agent(s) to enroll got one "
            f"({len(self.tickets.tickets)} ticket(s) configured, {self.tickets.refused} refused as "
            f"used, expired or unknown); issue more with `dexp tickets issue {self.settings.experiment} "
            f"--count {needed - enrolled}` and add them to DEXP_TICKETS_FILE or DEXP_TICKETS"
        )

    def _persister(self, record: AgentRecord, slot: int) -> Callable[[], None]:
        state, created_at = self.state, self.view.created_at
        assert state is not None

        def persist() -> None:
            state.save(record, created_at, slot)

        return persist

    def _create_groups(self) -> None:
        for stream in self.agents:
            try:
                self.redis.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def _subscribe(self) -> Any:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(keys.events(self.settings.experiment))
        return pubsub

    def stop(self, *_: Any) -> None:
        self.stopping = True

    def _follow_global_set(self) -> None:
        changed = False
        while (message := self.pubsub.get_message(timeout=0)) is not None:
            changed = changed or message.get("type") == "message"
        if changed or time.monotonic() - self.last_refresh > self.settings.poll_seconds:
            self.view.refresh(self.client)
            self.last_refresh = time.monotonic()

    def _reconcile(self) -> None:
        """After each new read of the global state or sign of lost writes, and once a second for
        the agents' slow periodic checks: each agent checks its acknowledged votes if it has a
        reason to (Agent.check_reason) and sends again those the coordinator lost."""
        now, seen = time.monotonic(), (self.view.snapshot_seq, self.view.lost_at)
        if seen == self.reconciled and now < self.next_reconcile:
            return
        self.reconciled, self.next_reconcile = seen, now + 1.0
        for agent in self.agents.values():
            agent.reconcile(now)

    def _process(self, stream: str, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        agent = self.agents[stream]
        done: list[bytes] = []
        for entry_id, fields in entries:
            if not fields:  # deleted while pending
                done.append(entry_id)
                continue
            rewards = decode_rewards(fields[b"r"])
            arms = agent.choose()
            if arms:
                agent.observe(arms, rewards[arms])
            done.append(entry_id)
        self.activations += len(done)
        self._acknowledge(stream, done)

    def _acknowledge(self, stream: str, done: list[bytes]) -> None:
        """XACK and XDEL, retried until Redis answers: these activations went into the local
        statistics, so they must not be read again (if Redis lost them, XACK is a no-op)."""
        delay = 0.05
        while True:
            try:
                # MULTI/EXEC: both or neither (acknowledged but not deleted would stay in the
                # backlog forever; deleted but not acknowledged would be read again as empty).
                pipe = self.redis.pipeline(transaction=True)
                pipe.xack(stream, keys.ACTIVATION_GROUP, *done)
                pipe.xdel(stream, *done)
                pipe.execute()
                return
            except REDIS_DOWN as exc:
                if self.stopping:
                    raise
                log.warning("redis unreachable (%s); acknowledgement retried in %.2fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, self.settings.redis_retry_max_seconds)

    def _read(self, start: str) -> list[Any]:
        streams: dict[Any, Any] = dict.fromkeys(self.agents, start)
        block = None if start == "0" else 1000
        reply: Any = self.redis.xreadgroup(
            keys.ACTIVATION_GROUP, CONSUMER, streams, count=self.settings.batch, block=block
        )
        return list(reply or [])

    def _drain_pending(self) -> None:
        """Entries read earlier but never acknowledged: a dead process's, or a read whose reply
        was lost. Each is processed once, by the agents' current statistics."""
        count = 0
        while pending := [(s, e) for s, e in self._read("0") if e]:
            for stream, entries in pending:
                self._process(stream.decode(), entries)
                count += len(entries)
        if count:
            self.redelivered += count
            log.info("processed %d redelivered activations", count)

    def _recover_redis(self, exc: Exception, delay: float) -> None:
        """Wait until Redis answers again, then make sure the groups exist and resubscribe."""
        log.warning("redis unreachable (%s); retrying in %.2fs", exc, delay)
        time.sleep(delay)
        self.redis.ping()
        self._create_groups()  # a Redis that lost its data lost the groups too
        with contextlib.suppress(Exception):
            self.pubsub.close()
        self.pubsub = self._subscribe()
        self.last_refresh = 0.0  # a change announced while we were away was missed
        log.info("redis reachable again")

    def run(self) -> None:
        for agent in self.agents.values():  # votes a dead process sent without an answer
            agent.resend_pending()
        last_log, last_drain, delay, drained = time.monotonic(), time.monotonic(), 0.05, False
        while not self.stopping:
            try:
                if not drained or time.monotonic() - last_drain > self.settings.poll_seconds:
                    # Also now and then: a read whose reply was lost and that redis-py retried
                    # by itself left entries pending that no exception told us about.
                    self._drain_pending()
                    drained, last_drain = True, time.monotonic()
                self._follow_global_set()
                self._reconcile()
                for stream, entries in self._read(">"):
                    self._process(stream.decode(), entries)
                delay = 0.05
            except REDIS_DOWN as exc:
                drained = False
                while not self.stopping:
                    try:
                        self._recover_redis(exc, delay)
                        break
                    except REDIS_DOWN as again:
                        exc = again
                        delay = min(delay * 2, self.settings.redis_retry_max_seconds)
            except redis.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("consumer group missing (%s): Redis lost its data; recreating", exc)
                self._create_groups()
            if time.monotonic() - last_log > 10:
                last_log = time.monotonic()
                agents = self.agents.values()
                log.info(
                    "%d activations, %d votes (%d sent again, %d checks), %d settled messages, "
                    "%d resets rate-limited, remaining arms %s",
                    self.activations,
                    sum(a.votes_sent for a in agents),
                    sum(a.votes_resent for a in agents),
                    sum(a.checks for a in agents),
                    sum(a.settled_sent for a in agents),
                    sum(a.resets_limited for a in agents),
                    sorted(self.view.remaining),
                )
        self.client.close()


def main() -> None:
    settings = AgentSettings()
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
    signal.signal(signal.SIGTERM, service.stop)
    signal.signal(signal.SIGINT, service.stop)
    try:
        service.run()
    except ConnectionError:  # the coordinator still unreachable when asked to stop
        if not service.stopping:
            raise
        log.warning("stopped while the coordinator was unreachable; pending votes are on record")


if __name__ == "__main__":
    main()
