"""Start-up: how long until a `dexp` command, and each quickstart, gives its first answer.

    python benchmarks/bench_startup.py                        # 5 runs each, 2 s apart
    python benchmarks/bench_startup.py --runs 3 --no-demo     # without the minute of `dexp demo`
    python benchmarks/bench_startup.py --checkout /tmp/main   # another checkout's commands (an
                                                              # export of main: the figures before)

Measures, each as a new process started from this interpreter, --runs times with --interval
seconds between two runs:

- `dexp --help`, and `dexp experiments list` against a real coordinator (`python -m coordinator`
  on a real redis-server, started here, holding two experiments): the CPU (user + system) and the
  wall time of the whole process;
- the Python device quickstart of docs/DEVICES.md (its code block, run as it is): the experiment
  and the ticket its text asks for (`banners`, red/green/blue, eta 0.5, delta 0.1, epsilon 0.1, a
  fresh one for each run, on the coordinator's defaults), until it prints its first line;
- README's quickstart without Docker, `dexp demo` with its defaults: until its first line, until
  its first line about the experiment (the load generator's progress), and until the answer (the
  summary's best arm); the CPU is that of the demo and every process it started, read at that
  moment.

Each command runs as `python -m dexp` (what the `dexp` script runs) with the checkout first on
sys.path. Printed: the commits, the machine's load average before and after, and for each figure
the median with the smallest and largest run.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vote_path import ADMIN, start_coordinator, start_redis, stop

ROOT = Path(__file__).resolve().parents[1]
GUIDE_SECTION = "Quickstart"  # of docs/DEVICES.md: the Python device's
BANNERS = {"id": "banners", "arms": ["red", "green", "blue"], "eta": 0.5, "delta": 0.1}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Figures:
    """One measured thing's CPU and wall seconds over the runs."""

    name: str
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)

    def row(self) -> str:
        return f"{self.name:<44} {len(self.wall):>4}  {spread(self.cpu):<22} {spread(self.wall)}"


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} [{min(values):.2f}, {max(values):.2f}]"


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid` and every live descendant (Linux /proc), with the children each has
    already waited for."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(int(f) for f in fields[11:15]) / CLOCK_TICKS
    family, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in family} - family
        family |= more
        grew = bool(more)
    return sum(times.get(p, 0.0) for p in family)


def run_to_end(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """CPU (the process's own accounting, os.wait4) and wall seconds of one run, and its status."""
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        assert process.stderr is not None
        raise SystemExit(f"{' '.join(argv)}: status {process.returncode}\n{process.stderr.read()}")
    process.stderr.close()  # type: ignore[union-attr]
    return usage.ru_utime + usage.ru_stime, wall, process.returncode


def run_until(
    argv: list[str], env: dict[str, str], cwd: Path, marks: dict[str, Callable[[str], bool]]
) -> dict[str, tuple[float, float]]:
    """For each mark, the CPU of the process tree and the wall seconds when the first line of stdout
    it accepts was printed; then waits for the process to end (it must end with status 0)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    seen: dict[str, tuple[float, float]] = {}
    lines: list[str] = []
    try:
        for line in process.stdout:
            lines.append(line)
            for name, accepts in marks.items():
                if name not in seen and accepts(line):
                    seen[name] = (tree_cpu(process.pid), time.perf_counter() - start)
        status = process.wait(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if status != 0 or len(seen) < len(marks):
        tail = "".join(lines[-20:])
        raise SystemExit(f"{' '.join(argv)}: status {status}, marks {sorted(seen)}\n{tail}")
    return seen


def commit_of(path: Path) -> str:
    """The checkout's commit (with -dirty for uncommitted changes), if it is a git checkout."""
    done = subprocess.run(
        ["git", "-C", str(path), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"commit {done.stdout.strip()}" if done.returncode == 0 else "not a git checkout"


def device_quickstart_code(checkout: Path) -> str:
    """The Python block of docs/DEVICES.md's quickstart (as tests/services/test_device_guide.py
    extracts it)."""
    text = (checkout / "docs" / "DEVICES.md").read_text()
    start = text.index(f"\n## {GUIDE_SECTION}\n")
    end = text.find("\n## ", start + 1)
    (code,) = re.findall(r"^```python\n(.*?)^```$", text[start:end], flags=re.M | re.S)
    return code


def fresh_banners(client: httpx.Client) -> str:
    """The guide's experiment, new (deleted first if there), and one ticket for it."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    client.delete(f"/v1/experiments/{BANNERS['id']}", headers=headers)
    client.post(
        "/v1/experiments", json={**BANNERS, "epsilon": 0.1}, headers=headers
    ).raise_for_status()
    issued = client.post(
        f"/v1/experiments/{BANNERS['id']}/tickets", json={"count": 1}, headers=headers
    )
    issued.raise_for_status()
    ticket: str = issued.json()["tickets"][0]
    return ticket


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between two runs")
    parser.add_argument("--checkout", type=Path, default=ROOT, help="whose commands to time")
    parser.add_argument("--no-demo", action="store_true", help="leave out `dexp demo`")
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    base_env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(checkout),
        "COLUMNS": "100",
    }
    commit = commit_of(ROOT)
    timed = commit_of(checkout)
    load_before = os.getloadavg()
    help_figures = Figures("dexp --help")
    list_figures = Figures("dexp experiments list")
    device_figures = Figures("device quickstart: first line")
    demo_figures = {
        name: Figures(f"dexp demo: {name}") for name in ("first line", "first state", "answer")
    }
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as work:
        redis, redis_url = start_redis(work)
        try:
            coordinator, url = start_coordinator(redis_url, None)
            try:
                with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
                    fresh_banners(client)
                    headers = {"Authorization": f"Bearer {ADMIN}"}
                    demo = {"id": "other", "arms": ["A", "B"]}
                    client.post("/v1/experiments", json=demo, headers=headers).raise_for_status()
                    code = device_quickstart_code(checkout)
                    for run in range(args.runs):
                        if run:
                            time.sleep(args.interval)
                        cpu, wall, _ = run_to_end(
                            [python, "-m", "dexp", "--help"], base_env, checkout
                        )
                        help_figures.cpu.append(cpu)
                        help_figures.wall.append(wall)
                        time.sleep(args.interval)
                        env = {**base_env, "DEXP_COORDINATOR_URL": url}
                        argv = [python, "-m", "dexp", "experiments", "list"]
                        cpu, wall, _ = run_to_end(argv, env, checkout)
                        list_figures.cpu.append(cpu)
                        list_figures.wall.append(wall)
                        time.sleep(args.interval)
                        device_dir = Path(work) / f"device-{run}"
                        device_dir.mkdir()
                        script = device_dir / "quickstart.py"
                        script.write_text(code)
                        env = {
                            **base_env,
                            "HOME": str(device_dir),
                            "DEXP_COORDINATOR_URL": url,
                            "DEXP_TICKET": fresh_banners(client),
                        }
                        first = run_until(
                            [python, str(script)], env, device_dir, {"first": lambda _: True}
                        )["first"]
                        device_figures.cpu.append(first[0])
                        device_figures.wall.append(first[1])
            finally:
                stop(coordinator)
        finally:
            stop(redis)
        if not args.no_demo:
            marks: dict[str, Callable[[str], bool]] = {
                "first line": lambda _: True,
                "first state": lambda line: line.startswith("activations "),
                "answer": lambda line: (
                    re.match(r"experiment +demo: (identified|tied)", line) is not None
                ),
            }
            for _ in range(args.runs):
                time.sleep(args.interval)
                seen = run_until([python, "-m", "dexp", "demo"], base_env, checkout, marks)
                for name, (cpu, wall) in seen.items():
                    demo_figures[name].cpu.append(cpu)
                    demo_figures[name].wall.append(wall)
    load_after = os.getloadavg()
    print(
        f"bench at {commit}; timed: {checkout}, {timed}; Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} cores; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; {args.runs} runs, {args.interval:g} s apart"
    )
    print(f"{'':<44} {'runs':>4}  {'CPU s median [min, max]':<22} wall s median [min, max]")
    rows = [help_figures, list_figures, device_figures]
    if not args.no_demo:
        rows += list(demo_figures.values())
    for figures in rows:
        print(figures.row())


if __name__ == "__main__":
    main()
