"""`dexp` starts without numba and scipy: every command is registered at import, and only the ones
that compile a simulator or solve a bound load them, when they run. Each check is a fresh
interpreter, since this one may have imported both already."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
