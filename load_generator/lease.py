"""One load generator per experiment: a lease in Redis, and the live figures it carries.

Two load generators feeding one experiment would each count the other's activations as their own
backlog, and the activations delivered would follow no single activation distribution. So a run
first takes the experiment's lease (common.redis_keys.load_generator, in the experiment's hash
slot): a JSON string set with NX and a TTL of `ttl_seconds` (DEXP_LEASE_SECONDS, 5 s by default).

- The holder renews it with its live figures (run, host, pid, started_at, updated_at, epoch,
  activations, delivered, backlog, activations_per_second) at each poll of its main loop, and at
  least every ttl/4 from a heartbeat thread, so a main loop blocked on an unreachable coordinator
  keeps its lease. A renewal is a compare-and-set (Lease._renew): only while the lease is still
  the holder's run; one that expired meanwhile and that nobody took is taken again.
- A newcomer that finds the lease held tries again for up to ttl + LEASE_MARGIN seconds (a crashed
  holder's lease expires within the ttl), then gives up: LeaseHeld, exit status 6, with a line
  saying which run holds it.
- A holder whose lease another run took (it could not renew for longer than the ttl, e.g. cut off
  from Redis) stops feeding: LeaseHeld too.
- At the end the holder deletes the lease, only if it is still its own (Lease._release).

No Lua: the load generator's Redis user may run no script (common/redis_acl.py; a script of its
choosing could block Redis). Taking, renewing and releasing the lease are optimistic
transactions (WATCH the lease, read it with PTTL or GET, then MULTI, SET or DEL, EXEC), which
Redis refuses if the lease changed in between: then it is read and decided again.

The coordinator shows the figures (without the pid) as the `load_generator` field of
GET /v1/experiments/{id}, parsed defensively (coordinator.store.load_generator_figures).

On a Redis Cluster (DEXP_REDIS_CLUSTER, or, when the caller does not say, a server that reports
cluster_enabled) the lease's connection is a cluster client: the lease is one key, and each
transaction keeps to it, hence to the experiment's slot.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from common import redis_keys as keys

log = logging.getLogger("dexp.load_generator")

LEASE_MARGIN = 1.0  # seconds a newcomer waits beyond the ttl before it gives up
# A Redis error, or one of the cluster client's own (a slot without a master during a failover)
REDIS_ERRORS = (redis.RedisError, RedisClusterException)

# A renewal or a release that lost a race (the lease changed between WATCH and EXEC) is tried
# again, at most this often: each try is a compare-and-set, so the loop ends as soon as the lease
# stays still for one round trip.
CAS_TRIES = 16


def _run_of(value: Any) -> str | None:
    """The run a lease's value names (None: not a lease a load generator wrote)."""
    try:
        lease = json.loads(value) if isinstance(value, bytes | str) else None
    except ValueError:
        return None
    run = lease.get("run") if isinstance(lease, dict) else None
    return run if isinstance(run, str) else None


def cluster_enabled(client: redis.Redis) -> bool:
    """Whether the server is a node of a Redis Cluster (INFO cluster; a server that refuses INFO
    is taken for a single Redis)."""
    try:
        return bool(client.info("cluster").get("cluster_enabled"))
    except redis.ResponseError:
        return False


class LeaseHeld(RuntimeError):
    """Another load generator feeds the experiment (exit status 6)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def describe_holder(value: Any) -> str:
    """'run R on host H, started T, N activations so far' from a lease's value; '?' for what the
    value does not say."""
    try:
        lease = json.loads(value) if isinstance(value, bytes | str) else None
    except ValueError:
        lease = None
    if not isinstance(lease, dict):
        lease = {}

    def text(name: str) -> str:
        value = lease.get(name)
        return value if isinstance(value, str) and value.isprintable() and value else "?"

    started = lease.get("started_at")
    when = (
        datetime.fromtimestamp(started / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if type(started) is int and 0 < started < 2**53
        else "at an unknown time"
    )
    count = lease.get("activations")
    activations = f"{count:,}" if type(count) is int else "?"
    return f"run {text('run')} on host {text('host')}, started {when}, {activations} activations so far"


class Lease:
    """This run's lease on `experiment`: acquire, then publish figures each poll (`update`), check
    it is still held (`check`), release at the end."""

    def __init__(
        self,
        redis_url: str,
        experiment: str,
        ttl_seconds: float = 5.0,
        *,
        cluster: bool | None = None,
    ) -> None:
        """`cluster`: whether `redis_url` is a node of a Redis Cluster (None: asked from the
        server when the lease is first taken)."""
        self.experiment = experiment
        self.key = keys.load_generator(experiment)
        self.ttl_ms = max(1, round(ttl_seconds * 1000))
        self.renew_seconds = min(1.0, ttl_seconds / 4)
        self.run = secrets.token_hex(4)
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.started_at = _now_ms()
        # Its own connection, with timeouts: a hung Redis must not hang the heartbeat for ever.
        self.redis_url = redis_url
        self.cluster = cluster
        self.redis: redis.Redis | RedisCluster | None = None  # connected by acquire()
        self._figures: dict[str, Any] = {
            "epoch": 0,
            "activations": 0,
            "delivered": 0,
            "backlog": 0,
            "activations_per_second": 0.0,
        }
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.held = False
        self.lost: str | None = None  # set when another run took the lease: who

    def value(self) -> str:
        with self._lock:
            figures = dict(self._figures)
        return json.dumps(
            {
                "run": self.run,
                "host": self.host,
                "pid": self.pid,
                "started_at": self.started_at,
                "updated_at": _now_ms(),
                **figures,
            }
        )

    def acquire(self, wait_seconds: float | None = None) -> None:
        """Take the lease, trying for up to `wait_seconds` (default: the ttl + LEASE_MARGIN, so a
        crashed holder's lease expires meanwhile); then start the heartbeat. LeaseHeld if another
        run still holds it."""
        wait = self.ttl_ms / 1000 + LEASE_MARGIN if wait_seconds is None else wait_seconds
        deadline = time.monotonic() + wait
        self._connect()
        while True:
            if self._take():
                break
            holder = self._holder()
            if time.monotonic() >= deadline:
                raise LeaseHeld(
                    f"another load generator ({describe_holder(holder)}) is feeding experiment "
                    f"{self.experiment}; stop it, or wait for it to end"
                )
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        self.held = True
        self._thread = threading.Thread(target=self._beat, name="dexp-lease", daemon=True)
        self._thread.start()

    def _connect(self) -> None:
        """The lease's own client (once)."""
        if self.redis is not None:
            return
        options: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
        cluster = self.cluster
        if cluster is None:
            probe = redis.Redis.from_url(self.redis_url, **options)
            try:
                cluster = cluster_enabled(probe)
            finally:
                probe.close()
        try:
            client: redis.Redis | RedisCluster = (
                RedisCluster.from_url(self.redis_url, **options)
                if cluster
                else redis.Redis.from_url(self.redis_url, **options)
            )
        except RedisClusterException as exc:  # no node answered the topology read
            raise redis.ConnectionError(f"Redis Cluster at {self.redis_url}: {exc}") from exc
        self.redis = client

    def _take(self) -> bool:
        """Take the lease if nobody holds it. A key without expiry was not set by a load
        generator (a holder always sets a TTL), so it is no live holder's: taken over too. True:
        taken."""
        assert self.redis is not None
        for _ in range(CAS_TRIES):
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.key)
                    if pipe.pttl(self.key) >= 0:  # -2: no key, -1: a key without expiry
                        return False
                    pipe.multi()
                    pipe.set(self.key, self.value(), px=self.ttl_ms)
                    pipe.execute()
                    return True
                except redis.WatchError:
                    continue
        return False

    def _swap(self, write: bool) -> int:
        """Compare-and-set on the lease: if it is this run's, write this run's figures (`write`)
        or delete it; if nobody holds it and `write`, take it again. 1 written or deleted, 2 taken
        again, 0 another run's (nothing changes)."""
        assert self.redis is not None
        for _ in range(CAS_TRIES):
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.key)
                    try:
                        value = pipe.get(self.key)
                    except redis.ResponseError:  # WRONGTYPE: a key no load generator set
                        return 0
                    if value is None and not write:
                        return 0
                    if value is not None and _run_of(value) != self.run:
                        return 0
                    pipe.multi()
                    if write:
                        pipe.set(self.key, self.value(), px=self.ttl_ms)
                    else:
                        pipe.delete(self.key)
                    pipe.execute()
                except redis.WatchError:  # the lease changed since GET: read it again
                    continue
            return 1 if value is not None else 2
        return 0

    def _renew(self) -> int:
        return self._swap(write=True)

    def _release(self) -> int:
        return self._swap(write=False)

    def _holder(self) -> bytes | None:
        """The lease's value now (None: none, or not a string: a key no generator set)."""
        assert self.redis is not None
        try:
            value = self.redis.get(self.key)
        except redis.ResponseError:  # WRONGTYPE
            return None
        return value if isinstance(value, bytes) else None

    def update(self, **figures: Any) -> None:
        """New live figures; the heartbeat writes them at once (the lease is renewed with them)."""
        with self._lock:
            self._figures.update(figures)
        self._wake.set()

    def flush(self) -> bool:
        """Write the live figures now rather than at the next heartbeat, so that a read right
        after sees them (the experiment's result takes the run's last figures from the lease:
        coordinator/results.py). False if the lease is not this run's or Redis did not answer."""
        if not self.held or self.lost is not None or self.redis is None:
            return False
        try:
            return bool(self._renew())
        except REDIS_ERRORS as exc:
            log.debug("lease figures not written: %s", exc)
            return False

    def check(self) -> None:
        """LeaseHeld if another run took the lease (this one could not renew it in time)."""
        if self.lost is not None:
            raise LeaseHeld(
                f"another load generator ({self.lost}) took over experiment {self.experiment} "
                f"while this run (run {self.run}) could not renew its lease; this run stops"
            )

    def _beat(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.renew_seconds)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                renewed = self._renew()
                if not renewed:
                    self.lost = describe_holder(self._holder())
                    return
            except REDIS_ERRORS as exc:  # the main loop sees Redis go away and says so
                log.debug("lease not renewed: %s", exc)

    def release(self) -> None:
        """Stop the heartbeat and delete the lease if it is still this run's (never raises)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.held and self.lost is None:
            try:
                self._release()
            except REDIS_ERRORS as exc:  # it expires within the ttl anyway
                log.warning(
                    "lease not released (it expires in %.0f s): %s", self.ttl_ms / 1000, exc
                )
        self.held = False

    def close(self) -> None:
        self.release()
        if self.redis is not None:
            self.redis.close()
