"""The Docker Swarm stack (deploy/swarm/docker-stack.yml) end to end on a single-node swarm.

One run, as an operator drives it: `docker stack deploy` with two coordinator replicas and one agent
replica (16 agents, fewer than M = 29: the load generator waits), `docker service scale` of the
agents to 2 replicas (32 agents: the demo starts), then, once votes are counted, `docker kill` of
the coordinator task that served the most. Swarm starts a new task in its place, the agents it
served reach the other replica, and the demo still ends identified on the best arm, with the load
generator's exit status 0. Both replicas served votes: the killed one before the kill, the other
one after it (an agent process keeps its connections to the replica it reached first, so before
the kill one replica may have served every vote).

Everything is read the way an operator reads it, from a container on the stack's attachable
overlay network: the experiment from "coordinator", and each replica's own /metrics from the
addresses of "tasks.coordinator" (the votes it served, dexp_votes_total).

The routing mesh and service virtual IPs need IPVS in the host's kernel. Where the kernel has none
(this machine's: built without IPVS and without module support), the stack is deployed with
deploy/swarm/no-ipvs.yml: DNS round robin over the replicas, no mesh. Where it has IPVS, the stack
file is deployed alone and the published port is checked too.

Runs where a Docker engine answers, like test_compose.py (skipped otherwise, failed under CI). It
initializes a swarm when the engine is in none, and leaves it at the end only then; it skips (fails
under CI) when the engine is a swarm worker or cannot make a swarm."""

from __future__ import annotations

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

import httpx
import pytest

from tests.prerequisites import missing

from .test_compose import _docker_problem

ROOT = Path(__file__).resolve().parents[2]
STACK_FILE = "deploy/swarm/docker-stack.yml"
NO_IPVS_FILE = "deploy/swarm/no-ipvs.yml"
REDIS_LABEL = "dexp.redis"
AGENTS_PER_REPLICA, THRESHOLD = 16, 29  # the stack's defaults: M = 29 for the demo
KILL_AT_VOTES = 20  # of the demo's 261: a coordinator replica is killed early in the run
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
    mesh_url: str | None  # the published port through the routing mesh (IPVS only)
    operator: str = ""  # a container on the stack's network
    seconds: dict[str, float] = field(default_factory=dict)  # since the start, per milestone
    started: float = field(default_factory=time.monotonic)

    def lap(self, what: str) -> None:
        self.seconds[what] = round(time.monotonic() - self.started, 1)

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

    def probe(self) -> dict[str, Any]:
        """What the operator's container sees: {"experiment": ..., "replicas": {address: votes}}."""
        result: dict[str, Any] = json.loads(
            docker("exec", self.operator, "python", "-c", PROBE, timeout=30)
        )
        return result

    def container_at(self, address: str) -> str:
        """The container that has `address` on the stack's network."""
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


def _swarm_state() -> tuple[str, bool]:
    state, control = docker(
        "info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}"
    ).split()
    return state, control == "true"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
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
    mesh = _kernel_has_ipvs()
    port = _free_port()
    stack = Stack(name, f"dexp-app:{name}", f"http://127.0.0.1:{port}" if mesh else None)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DEXP_", "AGENT"))},
        "DEXP_IMAGE": stack.image,
        "COORDINATOR_REPLICAS": "2",
        "AGENT_REPLICAS": "1",  # 16 agents: the demo waits for the scale-up below
        # 6,000 activations/s: the demo's ~60,000 take ~10 s, time to kill a replica mid-run
        # (unthrottled, it can be over in a few seconds, before the test sees its first votes).
        "DEXP_RATE": "6000",
        # With IPVS: the routing mesh on a free port. Without: dnsrr, each task's port its own.
        **({"DEXP_PORT": str(port)} if mesh else {"DEXP_PUBLISH_MODE": "host", "DEXP_PORT": "0"}),
    }
    node, added_label = docker("info", "--format", "{{.Swarm.NodeID}}"), False
    try:
        labels = json.loads(docker("node", "inspect", node, "--format", "{{json .Spec.Labels}}"))
        if labels.get(REDIS_LABEL) != "true":  # the node that keeps Redis's volume
            docker("node", "update", "--label-add", f"{REDIS_LABEL}=true", node)
            added_label = True
        stack.lap("swarm ready")
        # Stack files cannot build: the compose file builds dexp-app:latest (BASE_IMAGE honoured,
        # as in test_compose.py), tagged for this run so that another build of :latest cannot
        # change it under the stack.
        docker("compose", "build", "coordinator", timeout=900, env=env)
        docker("tag", "dexp-app:latest", stack.image)
        stack.lap("image built")
        files = [STACK_FILE] if mesh else [STACK_FILE, NO_IPVS_FILE]
        deploy = ["stack", "deploy", "--resolve-image", "never"]
        docker(*deploy, *(arg for f in files for arg in ("-c", f)), name, env=env)
        stack.operator = docker(
            "run", "-d", "--rm", "--network", f"{name}_default", "--name", f"{name}-operator",
            "-e", "DEXP_COORDINATOR_URL=http://coordinator:8000", stack.image, "sleep", "600",
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
        volumes = docker("volume", "ls", "-q", "-f", f"name={name}_").split()
        if volumes:
            subprocess.run(["docker", "volume", "rm", *volumes], capture_output=True, timeout=60)
        subprocess.run(["docker", "image", "rm", stack.image], capture_output=True, timeout=60)
        if initialized:
            docker("swarm", "leave", "--force")
        elif added_label:
            docker("node", "update", "--label-rm", REDIS_LABEL, node)
        stack.seconds["teardown"] = round(time.monotonic() - teardown, 1)
        print(
            f"swarm stack {name}, {'routing mesh' if mesh else 'no IPVS: dnsrr'}, "
            f"seconds since the start: {stack.seconds}"
        )
        assert gone, f"stack {name} left containers or networks behind"


def test_scaled_agents_and_a_killed_coordinator_replica(stack: Stack) -> None:
    # Deployed: two coordinator replicas, and the 16 agents of one agent replica enrolled.
    assert _until(lambda: len(stack.running("coordinator")) == 2, timeout=90)
    seen = _until(
        lambda: stack.probe().get("experiment", {}).get("agents") == AGENTS_PER_REPLICA,
        timeout=90,
    )
    assert seen, stack.probe()
    stack.lap(f"{AGENTS_PER_REPLICA} agents")
    assert sum(stack.probe()["experiment"]["votes"]) == 0  # too few agents: nothing is played

    docker("service", "scale", "--detach", f"{stack.name}_agent=2")

    # Mid-run (some votes counted, the experiment still exploring), kill the replica that served
    # the most votes. Each agent process keeps its connections to the replica it reached first, so
    # before the kill one replica may have served them all.
    def voting() -> dict[str, Any] | None:
        seen = stack.probe()
        return seen if sum(seen["experiment"]["votes"]) >= KILL_AT_VOTES else None

    before_kill = _until(voting, timeout=120, pause=0.3)
    assert before_kill, f"no {KILL_AT_VOTES} votes counted: {stack.probe()}"
    stack.lap("votes counted")
    exploring, served = before_kill["experiment"], before_kill["replicas"]
    assert exploring["agents"] == 2 * AGENTS_PER_REPLICA
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
    assert (state["agents"], state["threshold"]) == (2 * AGENTS_PER_REPLICA, THRESHOLD)
    assert sum(state["votes"]) > sum(exploring["votes"])  # votes counted after the kill
    assert [e["votes"] for e in state["eliminations"]] == [THRESHOLD] * 9

    # The operator's command, from the stack's network: the answer by the service's name.
    shown = json.loads(
        docker("exec", stack.operator, "dexp", "experiments", "show", "demo", "--json")
    )
    assert shown["status"] == "identified"
    assert shown["outcome"]["best_arm"] == {"index": 0, "name": "A"}
    if stack.mesh_url is not None:  # the routing mesh, where the kernel has IPVS
        best = httpx.get(f"{stack.mesh_url}/v1/experiments/demo/best-arm", timeout=10).json()
        assert best["best_arm"] == {"index": 0, "name": "A"}
