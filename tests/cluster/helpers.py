"""What the cluster tests share: the cluster's password, where keys live, and the agent and load
generator processes (python -m agent, python -m load_generator) with their logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agent.state import AgentRecord, StateDir
from dexp.redis_cluster import LocalCluster
from tests.services.helpers import ADMIN_TOKEN, ENROLLMENT_SECRET

PASSWORD = "dexp-cluster-test-password"


def keys_on(cluster: LocalCluster, pattern: str) -> dict[int, set[str]]:
    """Per live master (by port), the keys it holds that match `pattern` (SCAN on that node)."""
    found: dict[int, set[str]] = {}
    for node in cluster.masters():
        with cluster.client(node) as client:
            found[node.port] = set(client.scan_iter(match=pattern, count=1000))
    return found


def wait_until(condition: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Processes:
    """Processes started by a test, each with its log in `workdir`; `stop()` ends them all."""

    workdir: Path
    named: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def spawn(self, name: str, module: str, env: dict[str, str], *args: str) -> None:
        with open(self.workdir / f"{name}.log", "wb") as log:
            self.named[name] = subprocess.Popen(
                [sys.executable, "-m", module, *args],
                env={**os.environ, **env},
                stdout=subprocess.PIPE if module == "load_generator" else log,
                stderr=log,
            )

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str) -> None:
        """SIGTERM (an agent finishes its batch and its votes), then wait."""
        process = self.named[name]
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop_all(self) -> None:
        for name in self.named:
            self.stop(name)


def agent_env(
    cluster: LocalCluster,
    coordinator_url: str,
    experiment: str,
    agents: int,
    seed: int,
    state: Path,
) -> dict[str, str]:
    return {
        "DEXP_REDIS_URL": cluster.url,
        "DEXP_REDIS_CLUSTER": "true",
        "DEXP_COORDINATOR_URL": coordinator_url,
        "DEXP_EXPERIMENT": experiment,
        "DEXP_ENROLLMENT_SECRET": ENROLLMENT_SECRET,
        "AGENTS_PER_REPLICA": str(agents),
        "DEXP_SEED": str(seed),
        "DEXP_STATE_DIR": str(state),
        "DEXP_RECONCILE_SECONDS": "1",  # the slow periodic check of its own votes, made quick
        "DEXP_LOG_LEVEL": "info",  # a line per vote: outcome and kind (decided, resent, ...)
    }


def generator_env(
    cluster: LocalCluster, coordinator_url: str, experiment: str, problem: str, seed: int
) -> dict[str, str]:
    return {
        "DEXP_REDIS_URL": cluster.url,
        "DEXP_REDIS_CLUSTER": "true",
        "DEXP_COORDINATOR_URL": coordinator_url,
        "DEXP_EXPERIMENT": experiment,
        "DEXP_PROBLEM": problem,
        "DEXP_SEED": str(seed),
        "DEXP_SETTLE_SECONDS": "0.5",
        "DEXP_AGENT_WAIT_SECONDS": "60",
        "DEXP_MAX_SECONDS": "90",
    }


def summary_of(processes: Processes, name: str, timeout: float) -> tuple[int, dict[str, Any]]:
    """Exit status and JSON summary of a load generator started with --json."""
    process = processes.named[name]
    out, _ = process.communicate(timeout=timeout)
    try:
        summary: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError(
            f"no JSON summary (exit {process.returncode}): {out!r}\n{processes.log(name)[-3000:]}"
        ) from None
    return process.returncode, summary


def experiment_state(url: str, experiment: str) -> dict[str, Any]:
    reply = httpx.get(f"{url}/v1/experiments/{experiment}", timeout=10)
    reply.raise_for_status()
    state: dict[str, Any] = reply.json()
    return state


def voter_pairs(url: str, experiment: str) -> set[tuple[str, int]]:
    """(agent, arm) of every vote in the coordinator's voter sets (admin only)."""
    reply = httpx.get(
        f"{url}/v1/experiments/{experiment}/voters",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=10,
    )
    reply.raise_for_status()
    return {(agent, arm) for arm, ids in enumerate(reply.json()["voters"]) for agent in ids}


def records(states: list[Path], experiment: str, created_at: int) -> list[AgentRecord]:
    return [r for path in states for r in StateDir(path, experiment).load(created_at)]


def acknowledged_pairs(recs: list[AgentRecord], epoch: int) -> set[tuple[str, int]]:
    """(agent, arm) of the votes the agents recorded as acknowledged into a voter set."""
    return {
        (r.agent_id, v.arm)
        for r in recs
        for v in r.acknowledged
        if v.epoch == epoch and v.in_voter_set
    }
