"""The docker compose stack end to end: build, `up`, the demo identifies the best arm, scaling adds
agents, `down -v`; then the production override (docker-compose.production.yml) as an operator runs
it: secrets from an env file, tickets issued with `exec coordinator dexp tickets issue`, agents
enrolled with them, the shared enrollment secret refused, the API reached only through the HAProxy
proxy over HTTPS (a certificate from a test CA made here); and attacks on that proxy from client
containers, each with an address of its own, while an honest device is served. Runs where a Docker
engine answers (CI gets one from docker-sandbox.sh). The production stack comes up while the
development stack's tests run (ProductionLauncher)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from common import redis_acl as acl
from coordinator.settings import Settings
from tests.e2e.tls import TlsFiles, make_certificate
from tests.prerequisites import missing

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "dexp-e2e"
PRODUCTION_PROJECT = "dexp-e2e-production"
PRODUCTION_FILES = ["-f", "docker-compose.yml", "-f", "docker-compose.production.yml"]
# Each Redis user's password variable, and its development default (common/redis_acl.py).
REDIS_PASSWORDS = {
    acl.USERS[user].password_variable: acl.USERS[user].development_password for user in acl.SERVICES
}


def _docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    for args in (["docker", "info"], ["docker", "compose", "version"]):
        result = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            return f"`{' '.join(args)}` failed: {result.stderr.strip()[:200]}"
    return None


pytestmark = pytest.mark.docker


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest, launcher: ProductionLauncher
) -> Iterator[tuple[dict[str, str], str]]:
    port = _free_port()
    # the simulated agents join the demo and, as docs/OPERATIONS.md's walk-through starts them,
    # the experiment `checkout` the operator creates later (they join the demo only by default)
    env = {**os.environ, "DEXP_PORT": str(port), "DEXP_AGENT_EXPERIMENTS": "demo,checkout"}
    compose = ["docker", "compose", "-p", PROJECT]

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )

    run("down", "-v", timeout=120)
    up = run("up", "-d", "--build", "--wait", "coordinator")
    assert up.returncode == 0, up.stderr[-2000:]
    # The image is built: the production stack (if its tests are to run) comes up from it now, in
    # the background, while this stack's tests run.
    if any("production" in getattr(item, "fixturenames", ()) for item in request.session.items):
        launcher.start(build=False)
    try:
        up = run("up", "-d")
        assert up.returncode == 0, up.stderr[-2000:]
        yield env, f"http://127.0.0.1:{port}"
    finally:
        logs = run("logs", "--no-color", "load_generator", timeout=60).stdout
        print(logs[-3000:])
        run("down", "-v", timeout=120)


def _containers(env: dict[str, str], project: str = PROJECT) -> list[dict[str, object]]:
    out = subprocess.run(
        ["docker", "compose", "-p", project, "ps", "-a", "--format", "json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    out = out.strip()
    if out.startswith("["):
        return list(json.loads(out))
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _wait_for_the_load_generator(
    env: dict[str, str], project: str = PROJECT, timeout: float = 300
) -> dict[str, object]:
    """Its container once exited (or as last seen when `timeout` runs out)."""
    deadline = time.monotonic() + timeout
    generator: dict[str, object] = {}
    while time.monotonic() < deadline:
        generator = next(
            (c for c in _containers(env, project) if c["Service"] == "load_generator"), {}
        )
        if generator.get("State") == "exited":
            break
        time.sleep(1)
    return generator


def test_compose_demo_identifies_the_best_arm(stack: tuple[dict[str, str], str]) -> None:
    env, url = stack
    generator = _wait_for_the_load_generator(env)
    assert generator.get("State") == "exited", generator
    assert generator.get("ExitCode") == 0, generator
    best = httpx.get(f"{url}/v1/experiments/demo/best-arm", timeout=10).json()
    assert best["status"] == "identified"
    assert best["best_arm"] == {"index": 0, "name": "A"}
    state = httpx.get(f"{url}/v1/experiments/demo", timeout=10).json()
    assert state["agents"] == 32  # 2 replicas x AGENTS_PER_REPLICA=16
    assert state["threshold"] == 29
    assert len(state["eliminations"]) == 9
    # the image carries the JavaScript SDK's build, served for web pages to import
    sdk = httpx.get(f"{url}/sdk/agent.js", timeout=10)
    assert sdk.status_code == 200, sdk.text
    assert sdk.content == (ROOT / "sdk" / "js" / "dist" / "agent.min.js").read_bytes()

    # Redis and the coordinator restarted (the volume kept): the experiment comes back whole from
    # the append-only file, which Redis 7.0 replays as the default user (common/redis_acl.py)
    restart = subprocess.run(
        ["docker", "compose", "-p", PROJECT, "restart", "redis", "coordinator"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restart.returncode == 0, restart.stderr[-2000:]
    deadline, again = time.monotonic() + 120, None
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(f"{url}/v1/experiments/demo", timeout=10)
        except httpx.TransportError:
            answer = None
        if answer is not None and answer.status_code == 200:
            again = answer.json()
            break
        assert answer is None or answer.status_code == 503, answer.text
        time.sleep(0.5)
    assert again is not None, "the coordinator did not come back"
    assert again["status"] == "identified" and again["eliminations"] == state["eliminations"]
    assert again["agents"] == 32 and again["result"] == state["result"]


def test_an_operator_runs_a_second_experiment_from_the_operations_guide(
    stack: tuple[dict[str, str], str],
) -> None:
    """docs/OPERATIONS.md's walk-through ("Watch and drive it"): the dashboard is served, an
    experiment created with the CLI in the coordinator's container gets the running agents (the
    stack runs with DEXP_AGENT_EXPERIMENTS=demo,checkout, as the guide starts it), its own load
    generator plays it, and `dexp watch` follows it to the answer."""
    env, url = stack
    page = httpx.get(f"{url}/dashboard", timeout=10)
    assert page.status_code == 200 and "dashboard" in page.text.lower()
    compose = ["docker", "compose", "-p", PROJECT]

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )

    created = run(
        "exec", "-T", "coordinator", "dexp", "experiments", "create", "checkout",
        "--arms", "red,green,blue,yellow",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    watch = subprocess.Popen(
        [*compose, "exec", "-T", "coordinator", "dexp", "watch", "checkout", "--timeout", "240"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        played = run(
            "run", "--rm", "-e", "DEXP_EXPERIMENT=checkout",
            "-e", "DEXP_MEANS=0.5,0.8,0.45,0.3", "load_generator",
        )  # fmt: skip
        assert played.returncode == 0, played.stdout[-2000:] + played.stderr[-2000:]
        assert "identified arm    green (index 1), eps-optimal: True" in played.stdout
        out, err = watch.communicate(timeout=60)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    assert "checkout identified: best arm green" in out
    state = httpx.get(f"{url}/v1/experiments/checkout", timeout=10).json()
    assert state["agents"] == 32 and state["remaining_arms"] == [1]
    demo = httpx.get(f"{url}/v1/experiments/demo", timeout=10).json()
    assert demo["status"] == "identified" and demo["load_generator"] is None


def test_redis_asks_for_a_user_and_publishes_no_port(
    stack: tuple[dict[str, str], str],
) -> None:
    """What docs/RELIABILITY.md promises of Redis in the stack: no port of it reaches the host, a
    client inside the stack's network without a user is refused (NOAUTH), and the agents' own user
    (their DEXP_REDIS_URL) is refused a key of the coordinator's (NOPERM), on the compose file's
    Redis 7 as on the tests' Redis 6.2 (tests/e2e/test_redis_acl.py)."""
    env, _ = stack
    (redis_container,) = [c for c in _containers(env) if c["Service"] == "redis"]
    publishers = redis_container.get("Publishers") or []
    assert all(not p.get("PublishedPort") for p in publishers), publishers  # type: ignore[union-attr]
    probe = (  # a bare PING on the stack's network, as any client without the password sends it
        "import socket\n"
        "with socket.create_connection(('redis', 6379), timeout=5) as s:\n"
        "    s.sendall(b'PING\\r\\n')\n"
        "    print(s.recv(200).decode().strip())\n"
    )
    assert _python_in(env, "coordinator", probe).startswith("-NOAUTH Authentication required")
    as_agent = (  # the agent container's own user writes a credential, then reads the votes
        "import os, redis\n"
        "r = redis.Redis.from_url(os.environ['DEXP_REDIS_URL'])\n"
        "for call in (lambda: r.hset('dexp:{demo}:credentials', 'a', 'b'),\n"
        "             lambda: r.smembers('dexp:{demo}:voters:1')):\n"
        "    try:\n"
        "        call(); print('allowed')\n"
        "    except redis.exceptions.NoPermissionError:\n"
        "        print('NOPERM')\n"
    )
    assert _python_in(env, "agent", as_agent).split() == ["NOPERM", "NOPERM"]


def _python_in(env: dict[str, str], service: str, code: str) -> str:
    """What `python -c code` prints in a container of `service` (the first one)."""
    result = subprocess.run(
        ["docker", "compose", "-p", PROJECT, "exec", "-T", service, "python", "-c", code],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_scaling_adds_agents(stack: tuple[dict[str, str], str]) -> None:
    env, url = stack
    result = subprocess.run(
        [
            "docker",
            "compose",
            "-p",
            PROJECT,
            "up",
            "-d",
            "--no-recreate",
            "--scale",
            "agent=3",
            "agent",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    deadline = time.monotonic() + 120
    agents = 0
    while time.monotonic() < deadline:
        agents = httpx.get(f"{url}/v1/experiments/demo", timeout=10).json()["agents"]
        if agents >= 48:
            break
        time.sleep(1)
    assert agents == 48


# ----------------------------------------------------------------------------- production


@dataclass
class Production:
    """The production stack of one test module: compose runner, the proxy's URL and the CA that
    signed its certificate, secrets, tickets, timings."""

    env: dict[str, str]
    env_file: Path
    url: str  # https://127.0.0.1:PORT, the proxy (the coordinator publishes no port)
    tls: TlsFiles
    admin_token: str
    tickets: list[str]
    seconds: dict[str, float]
    started: float = field(default_factory=time.monotonic)  # agents and load generator up

    def client(self) -> httpx.Client:
        """An HTTPS client of the proxy that trusts the test CA (from this host: the proxy sees
        the address of the public network's gateway)."""
        return httpx.Client(base_url=self.url, verify=self.tls.context(), timeout=10)

    def compose(
        self, *args: str, timeout: float = 600, env_file: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "docker",
                "compose",
                "-p",
                PRODUCTION_PROJECT,
                *PRODUCTION_FILES,
                "--env-file",
                str(env_file or self.env_file),
                *args,
            ],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _tls_settings(tls: TlsFiles) -> dict[str, str]:
    return {"DEXP_TLS_CERT": str(tls.certificate), "DEXP_TLS_KEY": str(tls.key)}


def _env_file(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    path.chmod(0o600)
    return path


class ProductionLauncher:
    """Brings the production stack up once, in a thread: the operator's flow of `up --wait redis
    coordinator`, tickets from `exec coordinator dexp tickets issue` into the bind-mounted file,
    `up agent load_generator`. The development stack's fixture starts it as soon as the image is
    built, so the two stacks come up and play their demos at the same time (two projects, two
    ports, nothing shared but the image): the module takes about one stack's time, not two. Run
    alone, the production tests start it themselves. `down -v` whatever happens."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="production-stack")
        self.future: Future[Production] | None = None
        self.prod: Production | None = None  # as soon as it exists: the teardown needs it

    def start(self, build: bool) -> None:
        if self.future is None:
            self.future = self.pool.submit(self._up, build)

    def result(self) -> Production:
        self.start(build=True)
        assert self.future is not None
        return self.future.result(timeout=1200)

    def _up(self, build: bool) -> Production:
        tmp = self.tmp
        # Only what the env file says: no DEXP_* (nor compose variable) leaking from this process.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DEXP_", "AGENT"))}
        admin_token, port = secrets.token_urlsafe(32), _free_port()
        tickets_file = tmp / "tickets.txt"
        tls = make_certificate(tmp / "tls", ("proxy", "localhost"))
        env_file = _env_file(
            tmp / ".env",
            {
                "DEXP_ADMIN_TOKEN": admin_token,
                **{variable: secrets.token_urlsafe(32) for variable in REDIS_PASSWORDS},
                **_tls_settings(tls),
                "DEXP_PROXY_PORT": str(port),
                "DEXP_TICKETS_FILE_HOST": str(tickets_file),
            },
        )
        prod = Production(env, env_file, f"https://127.0.0.1:{port}", tls, admin_token, [], {})
        self.prod = prod
        prod.compose("down", "-v", timeout=120)
        start = time.monotonic()
        # The proxy's image is built here (the development stack has no proxy); the app's too
        # when the development stack did not build it.
        built = prod.compose("build", *([] if build else ["proxy"]))
        assert built.returncode == 0, built.stderr[-2000:]
        up = prod.compose("up", "-d", "--wait", "redis", "coordinator", "proxy")
        assert up.returncode == 0, up.stderr[-2000:]
        prod.seconds["up_coordinator"] = time.monotonic() - start
        start = time.monotonic()
        issued = prod.compose(
            "exec", "-T", "coordinator", "dexp", "tickets", "issue", "demo", "--count", "32"
        )
        assert issued.returncode == 0, issued.stderr[-2000:]
        prod.seconds["issue_tickets"] = time.monotonic() - start
        tickets_file.write_text(issued.stdout)
        tickets_file.chmod(0o644)  # read by the agents' uid 10001
        prod.tickets = issued.stdout.splitlines()
        start = time.monotonic()
        up = prod.compose("up", "-d", "agent", "load_generator")
        assert up.returncode == 0, up.stderr[-2000:]
        prod.seconds["up_agents"] = time.monotonic() - start
        prod.started = time.monotonic()
        return prod

    def close(self) -> None:
        if self.future is not None:
            self.future.exception()  # the bring-up is over, well or not
        self.pool.shutdown()
        prod = self.prod
        if prod is None:
            return
        for service in ("load_generator", "agent"):
            logs = prod.compose("logs", "--no-color", service, timeout=60).stdout
            print(f"--- production {service}\n{logs[-3000:]}")
        prod.compose("down", "-v", timeout=120)


@pytest.fixture(scope="module")
def launcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProductionLauncher]:
    problem = _docker_problem()
    if problem is not None:
        missing(f"Docker engine unavailable here: {problem}")
    launcher = ProductionLauncher(tmp_path_factory.mktemp("production"))
    try:
        yield launcher
    finally:
        launcher.close()


@pytest.fixture(scope="module")
def production(launcher: ProductionLauncher) -> Production:
    return launcher.result()


def test_production_needs_real_secrets(production: Production, tmp_path: Path) -> None:
    """A missing secret stops compose before anything starts; the development defaults stop the
    coordinator at start-up. (Judged by the messages: some builds of the compose plugin exit 0 on
    an error, this sandbox's among them.)"""
    tls = _tls_settings(production.tls)
    no_token = _env_file(
        tmp_path / "no-token.env", {**dict.fromkeys(REDIS_PASSWORDS, "x" * 32), **tls}
    )
    config = production.compose("config", "--quiet", env_file=no_token, timeout=60)
    assert "required variable DEXP_ADMIN_TOKEN is missing a value" in config.stderr
    assert "set DEXP_ADMIN_TOKEN in .env" in config.stderr
    defaults = _env_file(
        tmp_path / "dev.env",
        {"DEXP_ADMIN_TOKEN": "dev-admin-token", **REDIS_PASSWORDS, **tls},
    )
    run = production.compose(
        "run", "--rm", "--no-deps", "coordinator", env_file=defaults, timeout=120
    )
    refused = run.stdout + run.stderr
    assert "not starting" in refused and "DEXP_ADMIN_TOKEN is the development default" in refused
    assert "Redis password" in refused


def test_production_tickets_enroll_the_agents_and_the_run_ends_identified(
    production: Production,
) -> None:
    assert len(production.tickets) == 32
    assert all(t.startswith("ticket.demo.") for t in production.tickets)
    generator = _wait_for_the_load_generator(production.env, PRODUCTION_PROJECT)
    production.seconds["run"] = time.monotonic() - production.started  # at most: polled
    print({k: round(v, 1) for k, v in production.seconds.items()})
    assert generator.get("State") == "exited", generator
    assert generator.get("ExitCode") == 0, generator
    with production.client() as client:  # through the proxy, with the real admin token
        best = client.get("/v1/experiments/demo/best-arm").json()
        assert best["status"] == "identified"
        assert best["best_arm"] == {"index": 0, "name": "A"}
        state = client.get("/v1/experiments/demo").json()
        assert state["agents"] == 32  # one per ticket
        assert "voters" not in state  # who voted against what: admin only
        voters = client.get(
            "/v1/experiments/demo/voters",
            headers={"Authorization": f"Bearer {production.admin_token}"},
        )
        assert voters.status_code == 200
        assert [len(ids) for ids in voters.json()["voters"]] == state["votes"]
        # Every ticket was used, once: a second use is refused.
        again = client.post(
            "/v1/agents",
            headers={"Authorization": f"Bearer {production.tickets[0]}"},
            json={"experiment": "demo"},
        )
        assert again.status_code == 401


def test_production_refuses_the_enrollment_secret(production: Production) -> None:
    with production.client() as client:
        for secret in ("dev-enrollment-secret", production.admin_token):
            reply = client.post(
                "/v1/agents",
                headers={"Authorization": f"Bearer {secret}"},
                json={"experiment": "demo"},
            )
            assert reply.status_code == 401, reply.text


# ----------------------------------------------------------------------------- the proxy
# HAProxy in front of the production coordinator (deploy/proxy/haproxy.cfg). The attacks come from
# containers on the stack's public network, one address each, as clients on the Internet would;
# each test checks that another client, an honest device, was served meanwhile, and that nothing
# changed that should not have.

EDGE = "edge"  # the experiment the attacks play on: M = 2 (delta 0.25, eta 0.5), arms A to D
ROLES = ("device", "slowloris", "burst", "trickle", "guesser", "bystander")
# deploy/proxy/haproxy.cfg's bounds, as docker-compose.production.yml sets them by default
PER_CLIENT = 200  # DEXP_PROXY_MAX_CONNECTIONS_PER_CLIENT
RATE = 200  # DEXP_PROXY_RATE, requests per 10 s
DEADLINE = 10.0  # timeout http-request: headers, and bodies, whole within 10 s


@dataclass
class EdgeClients:
    """One container per role on the production stack's public network (its own address there),
    each with tests/e2e mounted at /probe and the test CA at /tls."""

    production: Production
    addresses: dict[str, str]
    tickets: list[str]

    def container(self, role: str) -> str:
        return f"{PRODUCTION_PROJECT}-{role}"

    def command(self, role: str, *args: str) -> list[str]:
        return [
            "docker", "exec", "-i", self.container(role), "python", "/probe/edge_client.py",
            args[0], "proxy", "8443", "/tls/ca.pem", *args[1:],
        ]  # fmt: skip

    def run(self, role: str, *args: str) -> dict[str, Any]:
        """A client command run to its end: its JSON report."""
        result = subprocess.run(
            self.command(role, *args), capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-2000:]
        report: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
        return report

    def start(self, role: str, *args: str) -> subprocess.Popen[str]:
        """A client command that keeps its attack up until its stdin closes; started once it
        says `ready`."""
        process = subprocess.Popen(
            self.command(role, *args),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.strip() == "ready", line + (process.stderr.read() if process.stderr else "")
        return process


def _stop(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=120)  # closes its stdin: the attack ends
    assert process.returncode == 0, err[-2000:]
    report: dict[str, Any] = json.loads(out.splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def edge_clients(production: Production) -> Iterator[EdgeClients]:
    with production.client() as admin:
        auth = {"Authorization": f"Bearer {production.admin_token}"}
        created = admin.post(
            "/v1/experiments",
            headers=auth,
            json={"id": EDGE, "arms": ["A", "B", "C", "D"], "delta": 0.25, "eta": 0.5},
        )
        assert created.status_code == 201, created.text
        issued = admin.post(f"/v1/experiments/{EDGE}/tickets", headers=auth, json={"count": 6})
        assert issued.status_code == 201, issued.text
    network, image = f"{PRODUCTION_PROJECT}_public", f"{PRODUCTION_PROJECT}-app:latest"

    def run_container(role: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                "docker", "run", "-d", "--rm", "--network", network, "--name",
                f"{PRODUCTION_PROJECT}-{role}", "-v", f"{ROOT / 'tests' / 'e2e'}:/probe:ro",
                "-v", f"{production.tls.ca.parent}:/tls:ro", image, "sleep", "900",
            ],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    started = [run_container(role) for role in ROLES]
    clients = EdgeClients(production, {}, issued.json()["tickets"])
    try:
        for process in started:
            _, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
        for role in ROLES:
            clients.addresses[role] = subprocess.run(
                [
                    "docker", "inspect", clients.container(role), "--format",
                    f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}',
                ],
                capture_output=True, text=True, timeout=60, check=True,
            ).stdout.strip()  # fmt: skip
        assert len(set(clients.addresses.values())) == len(ROLES), clients.addresses
        yield clients
    finally:
        names = [f"{PRODUCTION_PROJECT}-{role}" for role in ROLES]
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=120)


def test_the_proxy_serves_https_only(production: Production) -> None:
    """HTTPS with the test CA: the API, the proxy's own /healthz, HSTS; ETag/304 and gzip pass
    through; /metrics is not public. Plain HTTP on the port gets no answer at all, nor do TLS 1.1
    and a TLS 1.2 cipher without AEAD. The coordinator publishes no port: the proxy is the way in."""
    with production.client() as client:
        health = client.get("/healthz")
        assert (health.status_code, health.json()) == (200, {"status": "ok"})
        state = client.get("/v1/experiments/demo")
        assert state.status_code == 200
        assert state.headers["strict-transport-security"] == "max-age=31536000"
        again = client.get("/v1/experiments/demo", headers={"If-None-Match": state.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        schema = client.get("/openapi.json", headers={"Accept-Encoding": "gzip"})
        assert schema.headers["content-encoding"] == "gzip" and schema.json()["openapi"]
        metrics = client.get("/metrics")
        assert (metrics.status_code, metrics.json()) == (404, {"detail": "not found"})
    port = int(production.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as plain:
        plain.sendall(b"GET /v1/experiments/demo HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert plain.recv(4096) == b""  # closed: not a byte of HTTP back
    old = production.tls.context()
    with warnings.catch_warnings():  # an obsolete client, on purpose
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    cbc = production.tls.context()
    cbc.maximum_version = ssl.TLSVersion.TLSv1_2
    cbc.set_ciphers("ECDHE-ECDSA-AES128-SHA")
    for context, alert in ((old, "PROTOCOL_VERSION"), (cbc, "HANDSHAKE_FAILURE")):
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as raw,
            pytest.raises(ssl.SSLError, match=alert),
        ):
            context.wrap_socket(raw, server_hostname="localhost")
    (coordinator,) = [
        c for c in _containers(production.env, PRODUCTION_PROJECT) if c["Service"] == "coordinator"
    ]
    publishers = coordinator.get("Publishers") or []
    assert all(not p.get("PublishedPort") for p in publishers), publishers  # type: ignore[union-attr]


def test_attackers_at_the_proxy_do_not_stop_a_device(edge_clients: EdgeClients) -> None:
    """Three attackers at once, each from its own address, while a device enrolls, reads, votes
    and follows the event stream through the proxy:

    - slowloris: 250 connections, half idle, half trickling headers, each reopened when cut. The
      proxy accepts PER_CLIENT of them and closes the others at once; it cuts the rest at the
      header deadline (never before), without a word;
    - a burst of reads over one kept-alive connection: RATE requests in 10 s are served, then
      429 with Retry-After and a JSON body;
    - a vote whose body comes a byte every 0.5 s, with a real agent token: 408 JSON at the
      deadline, and the vote never reaches the coordinator.

    The device's every request succeeds, its two votes remove arm C (M = 2), and its event stream
    shows the removal and a heartbeat."""
    clients = edge_clients
    slowloris = clients.start("slowloris", "slowloris", str(PER_CLIENT + 50))
    burst = clients.start("burst", "burst", f"/v1/experiments/{EDGE}")
    with ThreadPoolExecutor(2) as pool:
        trickled = pool.submit(clients.run, "trickle", "trickle", EDGE, "3", clients.tickets[2])
        device = clients.run("device", "device", EDGE, "2", *clients.tickets[:2])
        trickle = trickled.result(timeout=300)
    hoarded, hammered = _stop(slowloris), _stop(burst)
    print({"device": device, "slowloris": hoarded, "burst": hammered, "trickle": trickle})

    assert [status for _, status, _ in device["steps"]] == [201, 201, 200, 200, 200, 200, 200]
    stream = device["stream"]
    assert stream["status"] == 200
    assert stream["headers"]["content-type"].startswith("text/event-stream")
    assert stream["states"][0]["remaining_arms"] == [0, 1, 2, 3]
    assert stream["states"][-1]["remaining_arms"] == [0, 1, 3] and stream["heartbeats"] >= 1

    assert hoarded["held"] == PER_CLIENT and hoarded["refused"] >= 50, hoarded
    assert hoarded["cuts"] >= 1 and hoarded["first_cut"] >= DEADLINE - 1, hoarded
    assert hoarded["said"] == "", hoarded  # cut without an answer (no HTML page)

    assert hammered["statuses"].get("200", 0) >= RATE and hammered["statuses"].get("429"), hammered
    assert hammered["refused"]["retry_after"] == "10"
    assert hammered["refused"]["content_type"] == "application/json"
    assert "DEXP_PROXY_RATE" in hammered["refused"]["body"]["detail"]

    assert trickle["status"] == 408, trickle
    assert json.loads(trickle["body"])["detail"].startswith("the request did not arrive within")
    assert trickle["seconds"] >= DEADLINE - 1, trickle
    assert trickle["bytes_sent"] < trickle["body_bytes"], trickle
    with clients.production.client() as admin:
        state = admin.get(f"/v1/experiments/{EDGE}").json()
        voters = admin.get(
            f"/v1/experiments/{EDGE}/voters",
            headers={"Authorization": f"Bearer {clients.production.admin_token}"},
        ).json()["voters"]
    assert state["remaining_arms"] == [0, 1, 3] and state["votes"] == [0, 0, 2, 0]
    assert state["messages"] == 2 and voters[3] == []  # the trickled vote was never counted


def test_the_coordinator_sees_each_client_behind_the_proxy(edge_clients: EdgeClients) -> None:
    """X-Forwarded-For is the proxy's word, not the client's. A guesser sends wrong agent tokens,
    each claiming another address (the bystander's among them): the coordinator's throttle of
    failed credentials (DEXP_AUTH_FAILURE_LIMIT) counts them all against the guesser's real
    address and refuses even its right token after the limit. The bystander, whose address the
    guesser claimed, is served; so the coordinator tells the clients behind the proxy apart."""
    clients = edge_clients
    limit = int(Settings().auth_failure_limit.split("/")[0])  # the production default: 20/minute
    guesser = clients.run(
        "guesser", "credentials", EDGE, clients.tickets[3], str(limit + 1),
        clients.addresses["bystander"],
    )  # fmt: skip
    assert guesser["statuses"] == [201, *[401] * limit, 429, 429], guesser
    assert "too many failed credential checks" in guesser["last"]["detail"]
    bystander = clients.run(
        "bystander", "credentials", EDGE, clients.tickets[4], "0", clients.addresses["guesser"]
    )
    assert bystander["statuses"] == [201, 200], bystander
