"""Push: the fan-out hub behind GET /v1/experiments/{id}/events (Server-Sent Events).

A device follows the global set without polling: it holds one stream open and gets one event per
change of the experiment's public state (version, epoch, status, remaining arms, candidates, best
arm). Where the changes come from:

- The scripts that change the public state announce it atomically (lua/changes.lua): an elimination
  (vote.lua) and a reset (reset.lua) take a new `event_id` in the meta hash, '<ms>-<seq>' from
  Redis's clock and always greater than the last, and publish 's' on the experiment's changes
  channel (common.redis_keys.changes).
- A tie, and a tie reopened, are not seen by any script: whether no remaining arm can still reach
  the threshold is common.votes.is_tied over every voter set, decided by a coordinator
  (store.get_with_status). The scripts whose change may turn the status publish 'c' (a counted
  vote, a newly settled agent, an enrollment that reaches the threshold or follows an announced
  tie), and a hub that reads a verdict other than the one announced last (`tied` in the meta hash)
  announces it (lua/announce.lua): a new event id and 's', once, whichever coordinator comes
  first. A hub never sends a state whose verdict is not yet announced, so every event it sends
  carries the id of that very state.
- A deletion publishes 'd'; a hub also sees one as the experiment gone, or created again (another
  `created_at`).

One process holds ONE pub/sub connection (on a client of its own, so that nothing it does can touch
the store's pool), and on it one subscription per experiment it streams, taken when the first
client of the experiment connects and dropped when the last leaves: never a Redis connection per
client. On each message (and on each confirmation of a subscription, so that a
reconnection misses nothing) the topic reads the experiment again (one read at a time; messages
that arrive meanwhile make one more) and, when its event id moved, hands the new state to every
subscriber. A subscriber keeps only the latest state it has not written yet: a slow client gets the
latest state, coalesced, and never holds up the others; one whose writes stall for two heartbeat
periods is cut (coordinator/api/events.py).

Events are coalesced: a state that changed twice between two reads is sent once, with the later
id. Every event is a state that happened, and the last event sent is the current state. A client
that reconnects with Last-Event-ID gets the current state unless its id is the current one.

Bounds: DEXP_MAX_SUBSCRIBERS streams per process (beyond: 503) and DEXP_MAX_SUBSCRIBERS_PER_CLIENT
per client address (beyond: 429), separate from DEXP_MAX_CONCURRENCY (coordinator/server.py takes
streams out of the connection count), so that votes and probes are served while they are full.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter as MetricCounter
from prometheus_client import Gauge
from redis.exceptions import RedisError

from common import redis_keys as keys
from coordinator.errors import NotFound, Overloaded, RateLimited
from coordinator.redis_client import AnyRedis
from coordinator.store import ExperimentState, ExperimentStore

log = logging.getLogger("dexp.coordinator.events")
LISTEN_SECONDS = 5.0  # a blocked read of the pub/sub connection wakes this often (health checks)
RETRY_MAX_SECONDS = 2.0  # back-off cap while Redis is unreachable
DUE_SLACK_SECONDS = 0.05  # a due publication is read this long after its tick (clocks differ)
REFUSED_RETRY_SECONDS = 30  # Retry-After of a stream refused at a bound
EVENTS_CLIENT = "dexp-events"  # the name of the hub's connection (CLIENT LIST)

SUBSCRIBERS = Gauge("dexp_sse_subscribers", "Event streams open in this process")
TOPICS = Gauge("dexp_sse_topics", "Experiments this process streams (one subscription each)")
REFUSED = MetricCounter(
    "dexp_sse_refused_total", "Event streams refused at a bound, by bound", ["bound"]
)
EVENTS = MetricCounter("dexp_sse_states_total", "States read and handed to the subscribers")


@dataclass(frozen=True)
class State:
    """One event: the public state of an experiment and the id of the change that made it."""

    event_id: str
    data: bytes  # the JSON document of the event's data line

    def frame(self) -> bytes:
        return b"id: " + self.event_id.encode() + b"\nevent: state\ndata: " + self.data + b"\n\n"


def public_state(exp: str, state: ExperimentState) -> bytes:
    """What an event says: only what anonymous readers of GET /v1/experiments/{id} may read."""
    remaining = state.remaining_arms
    status = state.status
    document = {
        "experiment": exp,
        "version": state.version,
        "epoch": state.epoch,
        "epoch_started_at": state.counters.epoch_started_at,
        "status": status,
        "remaining_arms": remaining,
        "candidates": remaining if status == "tied" else [],
        "best_arm": remaining[0] if status == "identified" else None,
    }
    return json.dumps(document, separators=(",", ":")).encode()


class Subscriber:
    """One stream: the latest state not yet written (one slot: states are coalesced), and whether
    the experiment was deleted or the stream must stop."""

    def __init__(self, last_event_id: str | None = None) -> None:
        self.last_event_id = (
            last_event_id  # the id the client has (Last-Event-ID), then the last sent
        )
        self.pending: State | None = None
        self.up_to_date = False  # the client has the current state already (its Last-Event-ID)
        self.deleted = False
        self.stopped = False
        self.wake = asyncio.Event()
        self.topic: Topic | None = None

    def offer(self, state: State) -> None:
        if state.event_id == self.last_event_id:
            self.up_to_date = True
        else:
            self.pending = state
        self.wake.set()

    def take(self) -> State | None:
        state, self.pending = self.pending, None
        if state is not None:
            self.last_event_id = state.event_id
        return state

    def end(self, deleted: bool = False) -> None:
        self.deleted = self.deleted or deleted
        self.stopped = True
        self.wake.set()


class Topic:
    """One experiment this process streams: its subscribers and the latest state read."""

    def __init__(self, exp: str) -> None:
        self.exp = exp
        self.subscribers: set[Subscriber] = set()
        self.latest: State | None = None
        self.created_at: int | None = None  # of the experiment the subscribers joined
        self.reading = False
        self.again = False  # a message came during a read: read once more
        self.closed = False
        # a read at the tick when the publication of an elimination is due (lua/publish.lua):
        # no vote need come after it for the streams to send it
        self.timer: asyncio.TimerHandle | None = None


class Hub:
    """The process's event streams: admission, one subscription per experiment, the fan-out."""

    def __init__(
        self,
        store: ExperimentStore,
        redis: AnyRedis,
        max_subscribers: int,
        max_per_client: int,
    ) -> None:
        """`redis`: a client for the pub/sub connection alone (its pool is not the store's)."""
        self.store = store
        self.redis = redis
        self.max_subscribers = max_subscribers
        self.max_per_client = max_per_client
        self.clients: Counter[str] = Counter()
        self.topics: dict[str, Topic] = {}
        self.pubsub: Any = None
        self.listener: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.subscribed = asyncio.Event()  # the listener has something to listen to

    # -- admission --------------------------------------------------------------------------
    @property
    def open_streams(self) -> int:
        return sum(self.clients.values())

    @contextlib.contextmanager
    def admitted(self, client: str) -> Iterator[None]:
        """A place for one stream of `client` while the block runs, or RateLimited (429: this
        client's bound) / Overloaded (503: this process's bound)."""
        if self.open_streams >= self.max_subscribers:
            REFUSED.labels(bound="process").inc()
            raise Overloaded(
                f"this coordinator holds its maximum of {self.max_subscribers} event streams "
                "(DEXP_MAX_SUBSCRIBERS): retry later, or poll with If-None-Match meanwhile",
                REFUSED_RETRY_SECONDS,
            )
        if self.clients[client] >= self.max_per_client:
            REFUSED.labels(bound="client").inc()
            raise RateLimited(
                f"this client has {self.max_per_client} event streams open "
                "(DEXP_MAX_SUBSCRIBERS_PER_CLIENT): close one, or retry later",
                REFUSED_RETRY_SECONDS,
            )
        self.clients[client] += 1
        SUBSCRIBERS.inc()
        try:
            yield
        finally:
            self.clients[client] -= 1
            if self.clients[client] <= 0:
                del self.clients[client]
            SUBSCRIBERS.dec()

    # -- subscriptions ----------------------------------------------------------------------
    async def join(self, exp: str, subscriber: Subscriber, created_at: int | None = None) -> None:
        """Add `subscriber` to the experiment's topic, subscribing to its channel if it is the
        first; it is offered the latest state the topic knows (if any: else the first read,
        which follows the subscription's confirmation, brings it). `created_at`: of the
        experiment the subscriber asked for; a topic of an earlier experiment under the same id
        (deleted, or lost with a flushed Redis, and created again before any read of the topic
        saw it) ends with `deleted` for its subscribers, and a new topic begins."""
        topic = self.topics.get(exp)
        if (
            topic is not None
            and created_at is not None
            and topic.created_at is not None
            and topic.created_at != created_at
        ):
            self._deleted(topic)
            topic = None
        subscriber.topic = topic
        if topic is None:
            topic = subscriber.topic = self.topics[exp] = Topic(exp)
            topic.created_at = created_at
            TOPICS.set(len(self.topics))
            topic.subscribers.add(subscriber)
            await self._subscribe(exp)
        else:
            topic.subscribers.add(subscriber)
            if topic.latest is not None:
                subscriber.offer(topic.latest)

    async def leave(self, subscriber: Subscriber) -> None:
        topic = subscriber.topic
        if topic is None:
            return
        topic.subscribers.discard(subscriber)
        if not topic.subscribers and not topic.closed:
            self._drop(topic)
            await self._unsubscribe(topic.exp)

    def _drop(self, topic: Topic) -> None:
        topic.closed = True
        if topic.timer is not None:
            topic.timer.cancel()
        if self.topics.get(topic.exp) is topic:
            del self.topics[topic.exp]
        TOPICS.set(len(self.topics))

    async def _subscribe(self, exp: str) -> None:
        """Subscribe to the experiment's channel; the listener reads the confirmation and then
        the state. While Redis is unreachable the listener subscribes again when it reconnects."""
        if self.listener is None:
            self.listener = asyncio.create_task(self._listen())
        if self.pubsub is None:
            self.subscribed.set()  # the listener connects, with every topic's channel
            return
        try:
            await self.pubsub.subscribe(keys.changes(exp))
        except (RedisError, OSError) as exc:
            log.warning("event streams: subscription to %s failed (%s); retrying", exp, exc)
        self.subscribed.set()

    async def _listen(self) -> None:
        """The process's one pub/sub connection: every topic's messages, for ever."""
        backoff = 0.05
        while True:
            try:
                if self.pubsub is None:
                    if not self.topics:
                        self.subscribed.clear()
                        await self.subscribed.wait()
                        continue
                    self.pubsub = self.redis.pubsub()
                    await self.pubsub.subscribe(*[keys.changes(e) for e in self.topics])
                if not self.pubsub.subscribed:
                    self.subscribed.clear()
                    await self.subscribed.wait()
                    continue
                message = await self.pubsub.get_message(timeout=LISTEN_SECONDS)
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, RuntimeError) as exc:
                log.warning("event streams: the pub/sub connection failed (%s); reconnecting", exc)
                await self._reset_pubsub()
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, RETRY_MAX_SECONDS)
                continue
            if message is None or message.get("type") not in ("subscribe", "message"):
                continue
            channel = message["channel"]
            channel = channel.decode() if isinstance(channel, bytes) else str(channel)
            # a confirmation: messages from now on arrive, so a read now misses nothing
            topic = self.topics.get(channel.removeprefix(f"{keys.PREFIX}:{{").split("}", 1)[0])
            if topic is not None and keys.changes(topic.exp) == channel:
                self.read(topic)

    async def _reset_pubsub(self) -> None:
        pubsub, self.pubsub = self.pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    # -- reads and the fan-out --------------------------------------------------------------
    def read(self, topic: Topic) -> None:
        """Read the topic's experiment again, now (once more after a read in progress)."""
        if topic.reading:
            topic.again = True
            return
        topic.reading = True
        task = asyncio.create_task(self._reads(topic))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _reads(self, topic: Topic) -> None:
        backoff = 0.05
        try:
            while not topic.closed:
                topic.again = False
                try:
                    await self._read(topic)
                    backoff = 0.05
                except (RedisError, OSError) as exc:
                    log.warning("event streams: reading %s failed (%s)", topic.exp, exc)
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, RETRY_MAX_SECONDS)
                    topic.again = True
                if not topic.again:
                    break
        finally:
            topic.reading = False

    async def _read(self, topic: Topic) -> None:
        try:
            state = await self.store.get_with_status(topic.exp)
        except NotFound:
            return self._deleted(topic)
        if not state.remaining_arms:  # deleted between the reads of one get
            return self._deleted(topic)
        if topic.created_at is None:
            topic.created_at = state.created_at
        elif state.created_at != topic.created_at:
            return self._deleted(topic)  # deleted and created again: another experiment
        self._read_when_due(topic, state.tags.publication_due_at)
        tied = state.status == "tied"
        if tied != state.tags.announced_tied:
            # announced here, or already by another coordinator: either way its 's' follows,
            # and the read it triggers sends the state with the id of the announcement
            code, _ = await self.store.announce_status(topic.exp, tied, state.created_at)
            if code == -1:
                self._deleted(topic)
            return
        latest = State(state.tags.event_id, public_state(topic.exp, state))
        if topic.latest == latest:
            return
        topic.latest = latest
        EVENTS.inc()
        for subscriber in list(topic.subscribers):
            subscriber.offer(latest)

    def _read_when_due(self, topic: Topic, due_at: int | None) -> None:
        """Read the topic again when its next publication is due (ms), if one waits."""
        if topic.timer is not None:
            topic.timer.cancel()
            topic.timer = None
        if due_at is not None and not topic.closed:
            delay = max(0.0, due_at / 1000 - time.time()) + DUE_SLACK_SECONDS
            topic.timer = asyncio.get_running_loop().call_later(delay, self.read, topic)

    def _deleted(self, topic: Topic) -> None:
        """The experiment is gone: every stream of it ends with `event: deleted`."""
        for subscriber in list(topic.subscribers):
            subscriber.end(deleted=True)
        self._drop(topic)
        task = asyncio.create_task(self._unsubscribe(topic.exp))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _unsubscribe(self, exp: str) -> None:
        """Drop the channel of a topic that was closed, unless a new one took its place meanwhile
        (then subscribe again: its SUBSCRIBE may have gone out before this UNSUBSCRIBE)."""
        if self.pubsub is None or exp in self.topics:
            return
        with contextlib.suppress(RedisError, OSError):
            await self.pubsub.unsubscribe(keys.changes(exp))
        if exp in self.topics:
            await self._subscribe(exp)

    async def close(self) -> None:
        """Stop listening (at shutdown, once the streams have ended)."""
        for topic in list(self.topics.values()):
            for subscriber in list(topic.subscribers):
                subscriber.end()
            self._drop(topic)
        tasks = [t for t in (self.listener, *self.tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._reset_pubsub()
