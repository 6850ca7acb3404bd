"""`dexp` starts without numba and scipy: every command is registered at import, and only the ones
that compile a simulator or solve a bound load them, when they run. Each check is a fresh
interpreter, since this one may have imported both already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.services.helpers import (
    ADMIN_TOKEN,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    redis_server,
)

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("numba", "scipy")

REPORT = f"""
import json, sys
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
"""


def heavy_modules_after(code: str) -> list[str]:
    """The numba and scipy modules loaded once `code` has run in a new interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code + REPORT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_importing_the_cli_loads_neither_numba_nor_scipy() -> None:
    assert heavy_modules_after("import dexp.cli") == []


@pytest.mark.parametrize(
    "args", [["--help"], ["simulate", "--help"], ["plan", "--help"], ["regret", "run", "--help"]]
)
def test_help_loads_neither_numba_nor_scipy(args: list[str]) -> None:
    code = f"""
from typer.testing import CliRunner
from dexp.cli import app
result = CliRunner().invoke(app, {args!r})
assert result.exit_code == 0, result.output
assert "Usage" in result.output, result.output
"""
    assert heavy_modules_after(code) == []


def test_the_check_sees_a_command_that_loads_them() -> None:
    """The same check after a command that runs Hillel et al.'s compiled players: numba is there,
    so an empty list above is not an empty check."""
    code = """
from typer.testing import CliRunner
from dexp.cli import app
args = ["simulate", "--algorithm", "hillel-multi-round", "--agents", "4", "--trials", "1",
        "--json"]
result = CliRunner().invoke(app, args)
assert result.exit_code == 0, result.output
"""
    assert "numba" in heavy_modules_after(code)


def help_loads(args: list[str], modules: tuple[str, ...]) -> list[str]:
    """The top-level packages among `modules` that `python -m dexp ARGS` loads."""
    code = f"""
import json, runpy, sys
sys.argv = ["dexp", *{args!r}]
try:
    runpy.run_module("dexp", run_name="__main__")
except SystemExit as done:
    assert done.code in (0, None), done.code
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & {set(modules)!r})))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout, done.stdout
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


@pytest.mark.parametrize("args", [["--help"], ["plan", "--help"]])
def test_dexp_help_answers_without_numpy_httpx_or_fastapi(args: list[str]) -> None:
    """`dexp --help` lists every command from dexp/cli.py's table and imports none of them, and
    `dexp plan --help` reads plan's options alone (issue 37, point 11): on main's code both loaded
    numpy and httpx, over a second of CPU."""
    assert help_loads(args, ("numpy", "numba", "scipy", "httpx", "fastapi", "common")) == []


def test_a_command_is_loaded_when_it_runs() -> None:
    """The same check sees a command's own imports: `dexp subroutines` needs the algorithms."""
    code = """
from typer.testing import CliRunner
from dexp.cli import app
result = CliRunner().invoke(app, ["subroutines", "--json"])
assert result.exit_code == 0, result.output
import sys
assert "numpy" in sys.modules
"""
    heavy_modules_after(code)


# The commands that only talk to a coordinator, in the order one interpreter runs them below: on
# the experiment `done` (identified by the test's votes) and on new ones they create.
COORDINATOR_COMMANDS = [
    ["experiments", "create", "fresh", "--arms", "A,B,C", "--subroutine", "ser3"],
    ["experiments", "create", "crowd", "--arms", "A,B", "--algorithm", "ldp", "--rewards",
     "bernoulli", "--dp-epsilon", "1", "--reports-per-agent", "2"],
    ["experiments", "list"],
    ["experiments", "show", "done"],
    ["watch", "done"],
    ["experiments", "agents", "done"],
    ["experiments", "voters", "done"],
    ["experiments", "suspects", "done"],
    ["experiments", "reset", "done"],
    ["experiments", "delete", "crowd", "--yes"],
    ["tickets", "issue", "fresh", "--count", "1"],
    ["keys", "create", "reader", "--role", "viewer"],
    ["keys", "list"],
    ["audit-log"],
]  # fmt: skip
# What none of them needs: the algorithms, the compilers, the plots, the servers' own stacks.
NOT_NEEDED = ("numpy", "numba", "scipy", "matplotlib", "fastapi", "uvicorn", "redis", "coordinator")


@pytest.fixture(scope="module")
def coordinator_url() -> Iterator[str]:
    """A real coordinator (uvicorn on 127.0.0.1) on a real redis-server, for this module."""
    with (
        redis_server() as redis_instance,
        coordinator(coordinator_settings(redis_instance.url)) as up,
    ):
        yield up.url


def loaded_after_each(commands: list[list[str]], env: dict[str, str]) -> list[list[Any]]:
    """Runs `dexp ARGS` for each command in turn in one new interpreter, as the `dexp` script runs
    it (dexp.cli.main); for each, [args, exit status, the NOT_NEEDED packages loaded so far]."""
    code = f"""
import json, sys
from dexp.cli import main
report = []
for args in {commands!r}:
    sys.argv = ["dexp", *args]
    try:
        main()
    except SystemExit as done:
        status = done.code
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & {set(NOT_NEEDED)!r})
    report.append([args, status, loaded])
sys.__stdout__.write("REPORT " + json.dumps(report) + "\\n")
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("REPORT "), (done.stdout, done.stderr)
    report: list[list[Any]] = json.loads(last.removeprefix("REPORT "))
    return report


def test_coordinator_commands_run_without_numpy(coordinator_url: str) -> None:
    """Every command that only talks to a coordinator runs, against a real one, without loading
    numpy or anything else it does not use (issue 37, point 11): on main's code `dexp experiments`
    and `dexp watch` loaded numpy through common.subroutines, common.params and common.race. The
    same interpreter then runs `dexp subroutines`, which needs numpy: the check sees it."""
    with httpx.Client(base_url=coordinator_url, timeout=10.0, trust_env=False) as http:
        create_experiment(http, id="done", arms=["A", "B"], delta=0.2, eta=0.5)  # M = 3
        for agent in enroll_agents(http, "done", 3):
            headers = agent.headers
            reply = http.post(
                "/v1/experiments/done/votes", json={"arm": 1, "epoch": 0}, headers=headers
            )
            assert reply.status_code == 200, reply.text
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DEXP_COORDINATOR_URL": coordinator_url,
        "DEXP_ADMIN_TOKEN": ADMIN_TOKEN,
    }
    report = loaded_after_each([*COORDINATOR_COMMANDS, ["subroutines", "--json"]], env)
    assert [(args, status) for args, status, _ in report] == [
        (args, 0) for args in [*COORDINATOR_COMMANDS, ["subroutines", "--json"]]
    ]
    assert [(args, loaded) for args, _, loaded in report[:-1]] == [
        (args, []) for args in COORDINATOR_COMMANDS
    ]
    assert "numpy" in report[-1][2]


def test_the_demo_starts_its_processes_without_the_coordinators_web_stack() -> None:
    """`dexp demo` imports dexp.demo before it starts anything, and the coordinator's web stack is
    the coordinator process's to load: on main's code dexp.demo imported coordinator.settings (for
    a development token the demo never uses), and with it FastAPI, Starlette and zxcvbn, about half
    a second of CPU before redis-server was started."""
    code = """
import json, sys
import dexp.commands, dexp.demo
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "load_generator" in loaded and "numpy" in loaded  # what the demo runs in-process
    assert loaded & {"fastapi", "starlette", "uvicorn", "zxcvbn", "coordinator"} == set()
