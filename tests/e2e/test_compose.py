"""The docker compose stack end to end: build, `up`, the demo identifies the best arm, scaling adds
agents, `down -v`. Runs where a Docker engine answers (CI gets one from docker-sandbox.sh)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "dexp-e2e"


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
def stack() -> Iterator[tuple[dict[str, str], str]]:
    problem = _docker_problem()
    if problem is not None:
        pytest.skip(f"Docker engine unavailable here: {problem}")
    port = _free_port()
    env = {**os.environ, "DEXP_PORT": str(port)}
    compose = ["docker", "compose", "-p", PROJECT]

    def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )

    run("down", "-v", timeout=120)
    up = run("up", "-d", "--build", "--wait", "coordinator")
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        up = run("up", "-d")
        assert up.returncode == 0, up.stderr[-2000:]
        yield env, f"http://127.0.0.1:{port}"
    finally:
        logs = run("logs", "--no-color", "load_generator", timeout=60).stdout
        print(logs[-3000:])
        run("down", "-v", timeout=120)


def _containers(env: dict[str, str]) -> list[dict[str, object]]:
    out = subprocess.run(
        ["docker", "compose", "-p", PROJECT, "ps", "-a", "--format", "json"],
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


def test_compose_demo_identifies_the_best_arm(stack: tuple[dict[str, str], str]) -> None:
    env, url = stack
    deadline = time.monotonic() + 300
    generator: dict[str, object] = {}
    while time.monotonic() < deadline:
        generator = next(c for c in _containers(env) if c["Service"] == "load_generator")
        if generator["State"] == "exited":
            break
        time.sleep(2)
    assert generator.get("State") == "exited", generator
    assert generator.get("ExitCode") == 0, generator
    best = httpx.get(f"{url}/v1/experiments/demo/best-arm", timeout=10).json()
    assert best["status"] == "identified"
    assert best["best_arm"] == {"index": 0, "name": "A"}
    state = httpx.get(f"{url}/v1/experiments/demo", timeout=10).json()
    assert state["agents"] == 32  # 2 replicas x AGENTS_PER_REPLICA=16
    assert state["threshold"] == 29
    assert len(state["eliminations"]) == 9


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
