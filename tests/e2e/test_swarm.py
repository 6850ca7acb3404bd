"""The Docker Swarm production stack (deploy/swarm/production.yml) end to end on a single-node swarm.

One run, as an operator drives it: scripts/swarm_secrets.py makes the Docker secrets (the admin
token, Redis's ACL file, each service's Redis URL, the proxy's certificate and key from a test CA,
an empty tickets file), `docker stack deploy` brings up Redis, two coordinator replicas behind the
HAProxy proxy, two agent replicas and the load generator. The agents have no ticket yet, so the
load generator waits. Through the proxy, over HTTPS with the real admin token, the operator issues
32 tickets, makes them a secret and deploys again with it: the agents enroll and the demo starts.
Once votes are counted, the coordinator task that served the most is killed with `docker kill`;
Swarm starts a new task in its place, the agents it served reach the other replica, and the demo
still ends identified on the best arm, with the load generator's exit status 0. Both replicas
served votes: the killed one before the kill, the other one after it (an agent process keeps its
connections to the replica it reached first, so before the kill one replica may have served every
vote). The proxy spread its requests over both replicas and found the new task.

No secret value is in any `docker service inspect` or `docker inspect` output, nor on any
process's command line in the stack's containers (`docker top`); the values are read back from
the secrets' files inside the containers, and Redis's ACL file holds digests only.

The replicas' own figures are read the way an operator reads them, from a container on the
stack's attachable overlay network: each replica's /metrics at the addresses of
"tasks.coordinator" (the votes it served, dexp_votes_total).

Swarm's routing mesh and service virtual IPs need IPVS in the host's kernel. Where the kernel has
none (this machine's: built without IPVS and without module support), the stack is deployed with
deploy/swarm/no-ipvs.yml (DNS round robin). The proxy needs neither: it publishes its port in host
mode and finds the coordinators by "tasks.coordinator".

Runs where a Docker engine answers, like test_compose.py (skipped otherwise, failed under CI). It
initializes a swarm when the engine is in none, and leaves it at the end only then; it skips (fails
under CI) when the engine is a swarm worker or cannot make a swarm."""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.tls import TlsFiles, make_certificate
from tests.prerequisites import missing

from .test_compose import _docker_problem

ROOT = Path(__file__).resolve().parents[2]
STACK_FILE = "deploy/swarm/production.yml"
NO_IPVS_FILE = "deploy/swarm/no-ipvs.yml"
REDIS_LABEL = "dexp.redis"
AGENTS, THRESHOLD = 32, 29  # 2 agent replicas x 16, and M = 29 for the demo
KILL_AT_VOTES = 20  # of the demo's 261: a coordinator replica is killed early in the run
# Where each service's secrets are, in its containers (production.yml's targets).
SECRET_FILES = {
    "coordinator": ["admin_token", "redis_coordinator_url"],
    "load_generator": ["redis_generator_url"],
    "agent": ["redis_agent_url"],
    "proxy": ["dexp_tls.pem.key"],
}
T = TypeVar("T")

pytestmark = pytest.mark.docker

# Run in the operator's container: the experiment through "coordinator" (the service's name), and
# the votes each replica served from its own /metrics, at the addresses "tasks.coordinator" lists.
PROBE = """
import json, socket, urllib.request

def get(host, path):
    with urllib.request.urlopen(f"http://{host}:8000{path}", timeout=3) as reply:
        return reply.read().decode()

out = {"replicas": {}}
try:
    out["experiment"] = json.loads(get("coordinator", "/v1/experiments/demo"))
except Exception as exc:
    out["error"] = repr(exc)
try:
    found = socket.getaddrinfo("tasks.coordinator", 8000, type=socket.SOCK_STREAM)
except OSError:
    found = []
for address in sorted({info[4][0] for info in found}):
    try:
        lines = get(address, "/metrics").splitlines()
    except Exception:
        continue
    out["replicas"][address] = sum(
        float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("dexp_votes_total{")
    )
print(json.dumps(out))
"""


def _kernel_has_ipvs() -> bool:
    """IPVS loaded, shipped as a module, or built in; True when nothing tells."""
    release = os.uname().release
    if Path("/proc/net/ip_vs").exists() or Path("/sys/module/ip_vs").exists():
        return True
    if any(Path(f"/lib/modules/{release}").glob("kernel/net/netfilter/ipvs/ip_vs.ko*")):
        return True
    for config in (Path("/proc/config.gz"), Path(f"/boot/config-{release}")):
        if config.exists():
            opener = gzip.open if config.suffix == ".gz" else open
            with opener(config, "rt") as lines:
                return re.search(r"^CONFIG_IP_VS=[ym]$", lines.read(), re.M) is not None
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def docker(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["docker", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"docker {' '.join(args)}: {result.stderr[-2000:]}"
    return result.stdout.strip()


def _until(condition: Callable[[], T], timeout: float, pause: float = 0.5) -> T | None:
    """The first truthy value of condition() before `timeout` (a failed docker command or an
    answer not there yet counts as falsy), else the last value seen."""
    deadline, value = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except (AssertionError, LookupError, ValueError):
            value = None
        if value:
            return value
        time.sleep(pause)
    return value


@dataclass
class Stack:
    name: str
    image: str
    proxy_image: str
    files: list[str]
    env: dict[str, str]  # the deployer's environment (docker stack deploy's variables)
    tls: TlsFiles
    proxy_url: str = ""  # https://127.0.0.1:PORT: the proxy's port on this node (host mode)
    admin_token: str = ""
    operator: str = ""  # a container on the stack's default network
    seconds: dict[str, float] = field(default_factory=dict)  # since the start, per milestone
    started: float = field(default_factory=time.monotonic)

    def lap(self, what: str) -> None:
        self.seconds[what] = round(time.monotonic() - self.started, 1)

    def deploy(self, **variables: str) -> None:
        """`docker stack deploy` of the production stack file (and no-ipvs.yml without IPVS)."""
        env = {**self.env, **variables}
        files = [arg for name in self.files for arg in ("-c", name)]
        docker("stack", "deploy", "--resolve-image", "never", *files, self.name, env=env)
        self.env = env

    def secret(self, suffix: str, content: bytes) -> str:
        """A Docker secret of this run (labelled for the teardown), its content on stdin."""
        name = f"{self.name}_{suffix}"
        result = subprocess.run(
            ["docker", "secret", "create", "--label", f"dexp.secrets={self.name}", name, "-"],
            input=content, capture_output=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return name

    def client(self) -> httpx.Client:
        """This host's HTTPS client of the proxy, trusting the test CA."""
        return httpx.Client(base_url=self.proxy_url, verify=self.tls.context(), timeout=10)

    def tasks(self, service: str) -> list[dict[str, str]]:
        """The service's tasks: id, slot name, state ("Running 3 seconds ago"), error."""
        out = docker(
            "service", "ps", f"{self.name}_{service}", "--no-trunc",
            "--format", "{{json .}}",
        )  # fmt: skip
        return [json.loads(line) for line in out.splitlines()]

    def running(self, service: str) -> set[str]:
        return {
            t["ID"]
            for t in self.tasks(service)
            if t["DesiredState"] == "Running" and t["CurrentState"].startswith("Running")
        }

    def containers(self, service: str | None = None) -> list[str]:
        """The ids of the stack's running containers (of one service)."""
        labels = [f"label=com.docker.stack.namespace={self.name}"]
        if service is not None:
            labels.append(f"label=com.docker.swarm.service.name={self.name}_{service}")
        return docker("ps", "-q", *(arg for label in labels for arg in ("-f", label))).split()

    def probe(self) -> dict[str, Any]:
        """What the operator's container sees: {"experiment": ..., "replicas": {address: votes}}."""
        result: dict[str, Any] = json.loads(
            docker("exec", self.operator, "python", "-c", PROBE, timeout=30)
        )
        return result

    def container_at(self, address: str) -> str:
        """The container that has `address` on the stack's default network."""
        network = json.loads(
            docker("network", "inspect", f"{self.name}_default", "--format", "{{json .Containers}}")
        )
        for container, endpoint in network.items():
            if endpoint["IPv4Address"].split("/")[0] == address:
                return str(container)
        raise AssertionError(f"no container at {address} on {self.name}_default: {network}")

    def load_generator_exit(self) -> str:
        """'complete 0' once the load generator's one task ended well (restart_policy none)."""
        task = docker("service", "ps", "-q", "--no-trunc", f"{self.name}_load_generator")
        return docker(
            "inspect", task.split()[0],
            "--format", "{{.Status.State}} {{.Status.ContainerStatus.ExitCode}}",
        )  # fmt: skip

    def secret_values(self) -> dict[str, str]:
        """Every secret the services were given, read back from its file in a running container
        (the stack's own view of it): name -> content."""
        values = {}
        for service, names in SECRET_FILES.items():
            (container, *_) = self.containers(service)
            for name in names:
                values[name] = docker("exec", "-u", "0", container, "cat", f"/run/secrets/{name}")
        return values


def _swarm_state() -> tuple[str, bool]:
    state, control = docker(
        "info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}"
    ).split()
    return state, control == "true"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    problem = _docker_problem()
    if problem is not None:
        missing(f"Docker engine unavailable here: {problem}")
    state, manager = _swarm_state()
    initialized = state == "inactive"
    if initialized:
        init = subprocess.run(
            ["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if init.returncode != 0:
            missing(f"this Docker engine cannot make a swarm: {init.stderr.strip()[:300]}")
    elif state != "active" or not manager:
        missing(f"this engine is in a swarm as {state}, not a manager: stacks deploy from one")
    name = f"dexp-swarm-{uuid.uuid4().hex[:6]}"
    port = _free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DEXP_", "AGENT"))},
        "DEXP_IMAGE": f"dexp-app:{name}",
        "DEXP_PROXY_IMAGE": f"dexp-proxy:{name}",
        "DEXP_SECRETS": name,
        "DEXP_TICKETS_SECRET": f"{name}_tickets",  # none yet: the agents wait
        "DEXP_PROXY_PORT": str(port),
        "COORDINATOR_REPLICAS": "2",
        "AGENT_REPLICAS": "2",
        # 6,000 activations/s: the demo's ~60,000 take ~10 s, time to kill a replica mid-run
        # (unthrottled, it can be over in a few seconds, before the test sees its first votes).
        "DEXP_RATE": "6000",
    }
    files = [STACK_FILE] if _kernel_has_ipvs() else [STACK_FILE, NO_IPVS_FILE]
    tls = make_certificate(tmp_path_factory.mktemp("tls"), ("proxy", "localhost"))
    stack = Stack(name, env["DEXP_IMAGE"], env["DEXP_PROXY_IMAGE"], files, env, tls)
    stack.proxy_url = f"https://127.0.0.1:{port}"
    node, added_label = docker("info", "--format", "{{.Swarm.NodeID}}"), False
    try:
        labels = json.loads(docker("node", "inspect", node, "--format", "{{json .Spec.Labels}}"))
        if labels.get(REDIS_LABEL) != "true":  # the node that keeps Redis's volume
            docker("node", "update", "--label-add", f"{REDIS_LABEL}=true", node)
            added_label = True
        stack.lap("swarm ready")
        # Stack files cannot build: the compose file builds dexp-app:latest (BASE_IMAGE honoured,
        # as in test_compose.py), and the proxy's image is built from deploy/proxy, each tagged
        # for this run so that another build cannot change it under the stack.
        docker("compose", "build", "coordinator", timeout=900, env=env)
        docker("tag", "dexp-app:latest", stack.image)
        base = env.get("BASE_IMAGE", "python:3.12-slim")
        docker(
            "build", "-q", "-t", stack.proxy_image, "--build-arg", f"BASE_IMAGE={base}",
            "deploy/proxy", timeout=900,
        )  # fmt: skip
        stack.lap("images built")
        # The operator's tool: every secret, the admin token printed once.
        made = subprocess.run(
            [
                "python3", "scripts/swarm_secrets.py", "--prefix", name,
                "--tls-cert", str(tls.certificate), "--tls-key", str(tls.key),
            ],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        stack.admin_token = made.stdout.strip()
        stack.deploy()
        stack.operator = docker(
            "run", "-d", "--rm", "--network", f"{name}_default", "--name", f"{name}-operator",
            stack.image, "sleep", "600",
        )  # fmt: skip
        stack.lap("stack deployed")
        yield stack
    finally:
        for service in ("coordinator", "load_generator"):
            logs = subprocess.run(
                ["docker", "service", "logs", "--raw", f"{name}_{service}"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            print(f"--- {service}\n{(logs.stdout + logs.stderr)[-2500:]}")
        teardown = time.monotonic()
        subprocess.run(["docker", "rm", "-f", f"{name}-operator"], capture_output=True, timeout=60)
        subprocess.run(["docker", "stack", "rm", name], capture_output=True, timeout=120)
        namespace = f"label=com.docker.stack.namespace={name}"
        gone = _until(lambda: not docker("ps", "-aq", "-f", namespace), timeout=90)
        stack.seconds["containers removed"] = round(time.monotonic() - teardown, 1)
        gone = gone and _until(lambda: not docker("network", "ls", "-q", "-f", namespace), 60)
        stack.seconds["network removed"] = round(time.monotonic() - teardown, 1)
        made_secrets = docker("secret", "ls", "-q", "-f", f"label=dexp.secrets={name}").split()
        if made_secrets:
            subprocess.run(["docker", "secret", "rm", *made_secrets], capture_output=True)
        volumes = docker("volume", "ls", "-q", "-f", f"name={name}_").split()
        if volumes:
            subprocess.run(["docker", "volume", "rm", *volumes], capture_output=True, timeout=60)
        for image in (stack.image, stack.proxy_image):
            subprocess.run(["docker", "image", "rm", image], capture_output=True, timeout=60)
        if initialized:
            docker("swarm", "leave", "--force")
        elif added_label:
            docker("node", "update", "--label-rm", REDIS_LABEL, node)
        stack.seconds["teardown"] = round(time.monotonic() - teardown, 1)
        print(f"swarm stack {name}, files {files}, seconds since the start: {stack.seconds}")
        assert gone, f"stack {name} left containers or networks behind"


def _demo(client: httpx.Client) -> dict[str, Any] | None:
    """The demo experiment through the proxy, or None while it does not answer 200."""
    try:
        reply = client.get("/v1/experiments/demo")
    except httpx.HTTPError:
        return None
    return reply.json() if reply.status_code == 200 else None  # type: ignore[no-any-return]


def test_production_stack_behind_the_proxy_with_secrets(stack: Stack) -> None:
    client = stack.client()
    # Deployed: the proxy answers over HTTPS, two coordinator replicas run behind it, and the
    # agents, with no ticket yet, have not enrolled: the load generator waits.
    assert _until(lambda: len(stack.running("coordinator")) == 2, timeout=90)
    seen = _until(lambda: _demo(client), timeout=90)
    assert seen and seen["agents"] == 0 and sum(seen["votes"]) == 0, seen
    stack.lap("served through the proxy")
    secrets = stack.secret_values()  # while every service has a running container

    # The operator issues tickets through the proxy with the real token (a wrong one: 401), makes
    # them a secret and deploys again with it: the agents restart with them and enroll.
    auth = {"Authorization": f"Bearer {stack.admin_token}"}
    wrong = client.post("/v1/experiments/demo/tickets", json={"count": 1}, headers={})
    assert wrong.status_code == 401, wrong.text
    issued = client.post("/v1/experiments/demo/tickets", json={"count": AGENTS}, headers=auth)
    assert issued.status_code == 201, issued.text
    tickets = issued.json()["tickets"]
    stack.deploy(DEXP_TICKETS_SECRET=stack.secret("tickets_1", "\n".join(tickets).encode()))
    stack.lap("tickets deployed")

    # Mid-run (some votes counted, the experiment still exploring), kill the replica that served
    # the most votes. Each agent process keeps its connections to the replica it reached first, so
    # before the kill one replica may have served them all.
    def voting() -> dict[str, Any] | None:
        seen = stack.probe()
        return seen if sum(seen["experiment"]["votes"]) >= KILL_AT_VOTES else None

    before_kill = _until(voting, timeout=180, pause=0.3)
    assert before_kill, f"no {KILL_AT_VOTES} votes counted: {stack.probe()}"
    stack.lap("votes counted")
    exploring, served = before_kill["experiment"], before_kill["replicas"]
    assert exploring["agents"] == AGENTS
    assert exploring["status"] == "exploring", "the run ended before a replica could be killed"
    assert len(served) == 2, served
    tasks_before = stack.running("coordinator")
    killed = max(served, key=served.get)
    (survivor,) = set(served) - {killed}
    docker("kill", stack.container_at(killed))
    stack.lap("coordinator killed")

    ended = ("complete", "failed", "rejected", "shutdown")
    _until(lambda: stack.load_generator_exit().split()[0] in ended, timeout=180, pause=1)
    stack.lap("load generator ended")
    replaced = _until(
        lambda: len(now := stack.running("coordinator")) == 2 and now != tasks_before, timeout=60
    )
    stack.lap("coordinator replaced")
    final = stack.probe()
    failed = [t for t in stack.tasks("coordinator") if t["Error"]]
    print(
        f"votes served per replica when {killed} was killed: {served}; at the end: "
        f"{final['replicas']}; the killed task: {failed}"
    )
    assert replaced, stack.tasks("coordinator")
    assert any("137" in t["Error"] for t in failed), failed  # SIGKILL: exit status 137
    # Both replicas served votes: the killed one before the kill, the other one after it (the
    # agents of the dead replica found a live one by looking the name up again).
    assert served[killed] > 0
    assert final["replicas"].get(survivor, 0) > served[survivor], final["replicas"]
    assert stack.load_generator_exit() == "complete 0"
    state = final["experiment"]
    assert state["status"] == "identified"
    assert state["remaining_arms"] == [0]
    assert (state["agents"], state["threshold"]) == (AGENTS, THRESHOLD)
    assert sum(state["votes"]) > sum(exploring["votes"])  # votes counted after the kill
    assert [e["votes"] for e in state["eliminations"]] == [THRESHOLD] * 9

    # Through the proxy, after the kill: the answer, and the admin's view with the real token.
    # The proxy found the new task, and spread its requests over the replicas (its log names the
    # server of each request).
    served_by = _until(lambda: _demo(client) and _proxy_servers(stack), timeout=60)
    best = client.get("/v1/experiments/demo/best-arm").json()
    assert best["best_arm"] == {"index": 0, "name": "A"}
    voters = client.get("/v1/experiments/demo/voters", headers=auth)
    assert voters.status_code == 200, voters.text
    assert [len(ids) for ids in voters.json()["voters"]] == state["votes"]
    client.close()
    assert served_by and len(served_by) >= 2, served_by

    # No secret in the services' definitions, the containers' or any command line.
    _assert_no_secret_shown(stack, secrets, tickets)


def _proxy_servers(stack: Stack) -> set[str]:
    """The coordinator servers the proxy's log names as having answered a request."""
    logs = docker("service", "logs", "--raw", f"{stack.name}_proxy", timeout=60)
    return set(re.findall(r" coordinators/(coordinator\d+) ", logs))


def _assert_no_secret_shown(stack: Stack, secrets: dict[str, str], tickets: list[str]) -> None:
    """None of the secrets' values (the admin token, each Redis user's password, a ticket, the
    TLS key's body) in `docker service inspect` of each service, `docker inspect` of each running
    container, or the command line of any process in them. Redis's ACL file holds digests, no
    password."""
    passwords = [
        str(urlsplit(secrets[name]).password)
        for name in ("redis_coordinator_url", "redis_generator_url", "redis_agent_url")
    ]
    key_body = "".join(
        line for line in secrets["dexp_tls.pem.key"].splitlines() if not line.startswith("-----")
    )
    assert base64.b64decode(key_body)  # the key file as read: PEM
    values = {"admin token": secrets["admin_token"], "TLS key": key_body[:40], "ticket": tickets[0]}
    values |= {f"Redis password {i}": password for i, password in enumerate(passwords)}
    assert all(len(value) >= 16 for value in values.values()), values
    services = docker("stack", "services", "-q", stack.name).split()
    shown = {f"service {s}": docker("service", "inspect", s) for s in services}
    for container in stack.containers():
        shown[f"container {container}"] = docker("inspect", container)
        shown[f"processes of {container}"] = docker("top", container, "-eo", "pid,args")
    assert len(services) == 5 and len(shown) > 10, sorted(shown)
    leaks = [(what, where) for what, v in values.items() for where, s in shown.items() if v in s]
    assert not leaks, leaks
    (redis,) = stack.containers("redis")
    users = docker("exec", redis, "cat", "/run/secrets/redis-users.acl")
    assert not [p for p in passwords if p in users]
    assert users.count(" on #") == 3  # three users, each with a SHA-256 digest
