"""The JavaScript SDK (sdk/js/dist/agent.js) under Node against a real coordinator (real Redis,
real HTTP): agents enrolled with tickets reach `identified` on the best arm, following the global
set over the coordinator's event stream; stopped in the middle and started again without tickets,
they are the same agents (their state files), enroll nobody, and finish the run.

tests/test_js_agreement.py proves the local algorithm step by step; this file proves the protocol
(enroll, the shared event stream, votes, the state file, resuming) end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.prerequisites import missing

from .helpers import admin_headers, create_experiment

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk" / "js"
BUNDLE = SDK / "dist" / "agent.js"
RUNNER = ROOT / "tests" / "js" / "node_agents.mjs"
RATES = [0.2, 0.5, 0.8]  # Bernoulli means: arm 2 is the best, by 0.3
AGENTS = 8
SEED = 26  # the rewards, the activations and the agents' draws (seeded here, crypto in a page)
STOP = 3  # votes: once this many are sent (an observe may send two), the first run closes


def node() -> str:
    path = shutil.which("node")
    if path is None:
        missing("node (Debian's nodejs) runs the JavaScript agent")
    return path


def run_agents(job: dict[str, Any]) -> dict[str, Any]:
    """The runner under node; its JSON report (the process must end by itself)."""
    done = subprocess.run(
        [node(), str(RUNNER)],
        input=json.dumps({"sdk": str(BUNDLE), **job}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def tickets(client: httpx.Client, experiment: str, count: int) -> list[str]:
    reply = client.post(
        f"/v1/experiments/{experiment}/tickets", json={"count": count}, headers=admin_headers()
    )
    assert reply.status_code == 201, reply.text
    issued: list[str] = reply.json()["tickets"]
    return issued


def test_version_is_package_json_s() -> None:
    """The module's VERSION is the package's: the served file and the docs quote it."""
    version = json.loads((SDK / "package.json").read_text())["version"]
    report = subprocess.run(
        [
            node(),
            "--input-type=module",
            "-e",
            f"import {{VERSION}} from '{BUNDLE.as_uri()}'; process.stdout.write(VERSION)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert report.stdout == version


@pytest.mark.parametrize("subroutine", ["ser3", "stitched-lucb"])
def test_node_agents_identify_the_best_arm_and_resume_from_their_files(
    subroutine: str, coordinator_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    """Eight Node agents play three Bernoulli arms (0.2, 0.5, 0.8) under DE (M = 4). Stopped once
    three votes are sent (the run half done) and run again without tickets, each resumes its agent (same id, `resumed`),
    the coordinator still counts 8 agents, and the run ends identified on arm 2, which every agent
    learnt from the coordinator. The agents of a process share one event stream."""
    experiment = f"js-{subroutine}"
    created = create_experiment(
        client,
        id=experiment,
        arms=["low", "mid", "high"],
        eta=0.5,
        delta=0.1,
        epsilon=0.1,
        subroutine=subroutine,
    )
    assert created["threshold"] == 4
    job = {"coordinator": coordinator_url, "experiment": experiment, "dir": str(tmp_path)}
    job |= {"agents": AGENTS, "rates": RATES, "seed": SEED}

    first = run_agents(
        job | {"tickets": tickets(client, experiment, AGENTS), "stopAfterVotes": STOP}
    )
    assert not any(agent["resumed"] for agent in first["agents"])
    assert sum(agent["votesSent"] for agent in first["agents"]) >= STOP  # stopped mid-run
    middle = client.get(f"/v1/experiments/{experiment}").json()
    assert (middle["agents"], middle["status"]) == (AGENTS, "exploring")
    kept = [json.loads((tmp_path / f"agent-{i}.json").read_text()) for i in range(AGENTS)]

    second = run_agents(job | {"tickets": None, "stopAfterVotes": None})
    ids = [agent["agentId"] for agent in first["agents"]]
    assert [agent["agentId"] for agent in second["agents"]] == ids
    assert all(agent["resumed"] for agent in second["agents"])
    assert {agent["status"] for agent in second["agents"]} == {"identified"}
    assert {agent["bestArm"] for agent in second["agents"]} == {2}
    state = client.get(f"/v1/experiments/{experiment}").json()
    assert state["agents"] == AGENTS  # no new enrollment
    assert (state["status"], state["remaining_arms"]) == ("identified", [2])
    assert second["follower"]["streams"] >= 1 and second["follower"]["subscribers"] == AGENTS
    for i, saved in enumerate(kept):  # what a device keeps: its votes and local statistics
        assert saved["agent_id"] == ids[i] and saved["experiment"] == experiment
        assert oct((tmp_path / f"agent-{i}.json").stat().st_mode & 0o777) == "0o600"
        assert saved["pending"] == []  # every vote decided was acknowledged before the close
        assert saved["local"]["sub"], saved  # the local statistics, resumed by the second run
    voted = [{arm for arm, _, _ in saved["acknowledged"]} for saved in kept]
    again = [agent["votesSent"] for agent in second["agents"]]
    assert all(n <= 2 - len(v) for n, v in zip(again, voted, strict=True))  # never voted twice
