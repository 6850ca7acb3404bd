"""The agent service's activation streams: read, fed to their agents, acknowledged.

Each agent has a stream of activations and a consumer group; an activation is acknowledged only
after the votes it caused were acknowledged by the coordinator, and this process does nothing else
to the streams (its Redis user may only read and acknowledge: the load generator deletes what was
acknowledged, load_generator/streams.py). A crash therefore means redelivery, and redelivery is
harmless because a vote is idempotent per (agent, arm). The entries of one read (every stream of it)
are fed first, then acknowledged together in one transaction: one round trip per read, whatever the
number of agents (with thousands of agents, a read holds a few entries per stream).

One read loop serves every hosted experiment (agent/discovery.py): one XREADGROUP over the agents'
streams, every one, or while some experiments are being played mostly theirs (see
StreamReader._turn); a stream's name holds its experiment.

Faults. Redis unreachable: the loop waits with capped back-off, then reads the pending entries again
(a read whose reply was lost left them pending); an
acknowledgement (XACK) is retried until it succeeds, so a batch is never fed to the local
statistics twice.

Redis Cluster (DEXP_REDIS_CLUSTER; docs/SCALING.md). A read or a transaction keeps to one hash slot:
the streams are read with one non-blocking XREADGROUP per hash tag (a shard of an experiment, see
common.redis_keys.activations), all in one cluster pipeline, and acknowledged with one MULTI/EXEC
per hash tag; on a single Redis the one blocking read over every stream stays as it is. A failover
(CLUSTERDOWN, TRYAGAIN, a slot without a master) is Redis unreachable, waited out as above. It can
lose acknowledgements the dead master had taken: an entry used already that comes back is
acknowledged again but not used again (each stream's last entry used is remembered).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError

from agent.discovery import Discovery, Hosted
from agent.library import Agent
from agent.settings import AgentSettings
from clients.coordinator import CoordinatorError
from clients.redis import NotedRetry, SyncRedis
from common import redis_keys as keys
from common.wire import decode_rewards

# The agent service's log lines keep the name operators filter on, whichever module writes them.
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
# On a cluster the read does not block (see StreamReader._read_cluster): with nothing to read, the
# loop waits this long, doubling up to the second figure while nothing comes.
CLUSTER_IDLE_WAIT = (0.005, 0.1)
# Reads (see StreamReader._turn). A process reading more streams than READ_CHUNK reads them all
# only at a sweep, every SWEEP_SECONDS, in non-blocking reads of READ_CHUNK streams at most (Redis
# spends about 0.25 ms on an empty read of 1,000 streams: benchmarks/bench_redis_ops.py), and in
# between only the hot experiments' streams: those that gave entries in the last HOT_SECONDS.
READ_CHUNK = 1000
SWEEP_SECONDS = 1.0
HOT_SECONDS = 2.0
# The pending entries of every stream are read again when a read may have lost its reply (a Redis
# error, a retry by redis-py), and, as a safety net, this often.
DRAIN_SECONDS = 30.0
# A read whose entries take longer than this to feed is acknowledged in parts, one per this long:
# under LDP each activation is a report (an HTTP request), and a read of 1,000 streams takes seconds.
ACK_SECONDS = 1.0


class StreamReader:
    """Reads the streams of the experiments `discovery` hosts, feeds each entry to its agent and
    acknowledges it; reads the pending entries again when a reply may have been lost."""

    def __init__(
        self,
        redis_client: SyncRedis,
        settings: AgentSettings,
        discovery: Discovery,
        should_stop: Callable[[], bool],
    ) -> None:
        self.redis = redis_client
        self.settings = settings
        self.discovery = discovery
        self.should_stop = should_stop
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
        self.activations = 0
        self.redelivered = 0
        self.drained = False  # the pending entries of every read stream were read again
        self.last_drain = time.monotonic()
        self.next_sweep = 0.0  # the next read of every stream (see _turn)

    def drain_if_due(self, now: float) -> None:
        """Read the pending entries of every stream again if a read may have lost its reply."""
        if not self.drained or self.retry.retried or now - self.last_drain > DRAIN_SECONDS:
            # A read whose reply was lost and that redis-py sent again by itself left entries
            # pending that no exception told us about: NotedRetry says so (and, as a safety
            # net, every DRAIN_SECONDS).
            self.retry.retried = False
            self._drain_pending()
            self.drained, self.last_drain = True, time.monotonic()

    def process(self, reply: list[Any]) -> int:
        """Feed one read's entries (every stream of it) to their agents, then acknowledge them all
        in one transaction: one round trip per read, not one per stream (with thousands of agents
        a read holds a few entries per stream, and per-stream round trips were most of the time);
        on a cluster, one per hash tag; a read that takes longer than ACK_SECONDS to feed, one
        per ACK_SECONDS. An entry is acknowledged only after the votes it caused
        were (they are sent as it is fed). The number of entries fed."""
        done: dict[str, list[bytes]] = {}
        failures: list[tuple[Hosted, CoordinatorError]] = []
        refed = 0  # entries read again after a failover (a cluster only): not fed again
        acknowledged, since = 0, time.monotonic()
        for raw, entries in reply:
            if done and time.monotonic() - since >= ACK_SECONDS:
                # a long read (LDP: every activation is a report, an HTTP request): what was fed
                # so far is acknowledged now, so that the backlog the load generator sees moves
                acknowledged += sum(len(ids) for ids in done.values())
                self._acknowledge(done)
                done, since = {}, time.monotonic()
            stream = _text(raw)
            found = self.discovery.streams.get(stream)
            if found is None or not entries:  # dropped meanwhile, or nothing
                continue
            hosted, agent = found
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
        count = acknowledged + sum(len(ids) for ids in done.values()) - refed
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
            self.discovery.failed(hosted, refusal)
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
        """XACK each stream's entries, retried until Redis answers: these activations went into
        the local statistics, so they must not be read again (if Redis lost them, XACK is a
        no-op). One transaction for them all, one round trip; on a cluster, one per hash tag (a
        transaction keeps to one slot): the streams of one shard together.

        Nothing is deleted here: the agent's Redis user may only read and acknowledge
        (common/redis_acl.py); the load generator, which writes the streams, deletes what was
        acknowledged (load_generator/streams.py)."""
        groups = _by_hash_tag(done) if self.cluster else [done]
        delay = 0.05
        while True:
            try:
                while groups:
                    pipe = self.redis.pipeline(transaction=True)
                    for stream, ids in groups[-1].items():
                        if ids:
                            pipe.xack(stream, keys.ACTIVATION_GROUP, *ids)
                    pipe.execute()
                    groups.pop()
                return
            except REDIS_DOWN as exc:
                if self.should_stop():
                    raise
                log.warning("redis unreachable (%s); acknowledgement retried in %.2fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, self.settings.redis_retry_max_seconds)

    def read(self, start: str) -> list[Any]:
        """New entries (">") of the streams _turn picks, or ("0") the pending entries of every
        stream of the running experiments."""
        now = time.monotonic()
        running = [h for h in self.discovery.hosted.values() if not h.paused]
        if start == "0":
            return self._xread([s for h in running for s in h.agents], "0", None)
        streams, block = self._turn(running, now)
        if not streams:  # nothing to read now: wait a little, as a blocking read would
            until = self.next_sweep if running else self.discovery.next_discovery
            time.sleep(max(0.0, min(1.0, until - time.monotonic())))
            return []
        reply = self._xread(streams, ">", block)
        for stream, entries in reply:
            if entries and (found := self.discovery.streams.get(_text(stream))):
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
        while pending := [(s, e) for s, e in self.read("0") if e]:
            count += self.process(pending)
        if count:
            self.redelivered += count
            log.info("processed %d redelivered activations", count)

    def groups_missing(self, exc: Exception) -> None:
        """XREADGROUP found a stream without its group, or a stream deleted while it blocked: its
        experiment was deleted (the coordinator deletes the streams too), or the agent was
        restored from an older version's state (its stream had another name), or Redis lost
        data. The experiments that are gone are dropped; in one still there, the agents whose
        streams are gone are replaced (Discovery.replace: they leave, new ones enroll), since
        the coordinator creates an agent's stream and group when it enrolls it, and this process
        may only read and acknowledge them (common/redis_acl.py)."""
        log.warning("consumer group missing (%s): an experiment deleted, or Redis lost data", exc)
        streams = list(self.discovery.streams)
        pipe = self.redis.pipeline(transaction=False)
        for stream in streams:  # the pending entries only ("0"): nothing new is delivered
            read = ("XREADGROUP", "GROUP", keys.ACTIVATION_GROUP, CONSUMER, "COUNT", 1)
            read += ("STREAMS", stream, "0")
            if isinstance(self.redis, RedisCluster):  # see _read_cluster
                pipe.execute_command(*read, target_nodes=self.redis.get_node_from_key(stream))
            else:
                pipe.execute_command(*read)
        lost: dict[str, tuple[Hosted, list[Agent]]] = {}
        for stream, reply in zip(streams, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(reply, redis.ResponseError) and "NOGROUP" in str(reply):
                hosted, agent = self.discovery.streams[stream]
                lost.setdefault(hosted.experiment, (hosted, []))[1].append(agent)
        for hosted, agents in lost.values():
            self.discovery.verify(hosted)
            if self.discovery.hosted.get(hosted.experiment) is hosted:
                self.discovery.replace(hosted, agents)

    def recover(self, exc: Exception, delay: float) -> None:
        """Wait `delay`, then make sure Redis answers (a Redis that lost its data lost the groups
        too: the next read says so, see groups_missing)."""
        log.warning("redis unreachable (%s); retrying in %.2fs", exc, delay)
        time.sleep(delay)
        self.redis.ping()


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
