"""A foreground `docker compose up`, as the README shows it: `--exit-code-from load_generator`
ends the stack when the load generator ends, with its exit status, and the output holds its
summary as one block, not drowned by the agents (warnings only by default: no line per vote, no
status line). Runs where a Docker engine answers (CI gets one from docker-sandbox.sh)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_compose import ROOT, _docker_problem, _free_port
from tests.prerequisites import missing

pytestmark = pytest.mark.docker
PROJECT = "dexp-e2e-foreground"
# The agents' lines per vote at info (the old default): about 260 in this run. Warnings only now.
MAX_AGENT_LINES = 10


def test_compose_up_ends_with_the_load_generators_summary_and_status(tmp_path: Path) -> None:
    problem = _docker_problem()
    if problem is not None:
        missing(problem)
    env = {**os.environ, "DEXP_PORT": str(_free_port())}
    compose = ["docker", "compose", "-p", PROJECT]

    def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )

    run("down", "-v", timeout=120)
    try:
        up = run("up", "--build", "--no-color", "--exit-code-from", "load_generator")
        output = up.stdout
        (tmp_path / "up.log").write_text(output + up.stderr)
        print(output[-4000:])
        assert up.returncode == 0, up.stderr[-2000:]  # the load generator's: identified, correct
        summary = re.search(
            r"load_generator-1 +\| ==== dexp load generator: experiment demo =+\n"
            r"((?:load_generator-1 +\| .*\n)+?)load_generator-1 +\| =+\n",
            output,
        )
        assert summary is not None, output[-4000:]
        block = summary.group(1)
        assert "experiment        demo: identified" in block
        assert "identified arm    A (index 0), eps-optimal: True" in block
        agent_lines = [line for line in output.splitlines() if re.match(r"agent-\d+ +\|", line)]
        assert len(agent_lines) <= MAX_AGENT_LINES, "\n".join(agent_lines[:40])
        assert not any('"vote agent=' in line or "vote agent=" in line for line in agent_lines)
    finally:
        run("down", "-v", timeout=120)
