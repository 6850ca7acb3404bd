"""`dexp demo --coordinators N` and `--redis-cluster N`, as real processes (`python -m dexp demo`):

- two coordinators, the one that counted the most votes killed (SIGKILL) mid-run: the demo warns
  once, naming it, goes on, and ends identified with the right arm (exit 0). The agent processes
  that voted through it must fail over for the run to end: each arm needs 29 of the 32 agents;
- both coordinators killed: the demo stops with status 7, naming the last one;
- a Redis Cluster of 3 masters, with two coordinators: identified, the summary says so;
- the supervision of a cluster with replicas: a dead master is survived once its replica serves
  its slots; a master with no replica left is not (ProcessDied once the wait is over);
- out-of-range values: status 2 and one line, before anything starts.
"""

from __future__ import annotations

import contextlib
import json
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dexp.cli import app
from dexp.demo import DEMO_FAILED, LocalStack, ProcessDied, wait_until
from dexp.redis_cluster import start_cluster

DEMO = [sys.executable, "-m", "dexp", "demo"]
SMALL = ["--means", "0.9,0.5,0.1", "--eta", "0.5", "--delta", "0.2"]  # M = 3 on 3 arms
COUNTED = re.compile(r'^dexp_votes_total\{outcome="counted"\} ([\d.]+)$', re.MULTILINE)


class Demo:
    """`python -m dexp demo ...` running, its stderr read line by line in a thread."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [*DEMO, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.out: list[str] = []
        self.readers = [
            threading.Thread(target=self._read_err, daemon=True),
            threading.Thread(target=self._read_out, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.err.append(line)
            self.lines.put(line)

    def _read_out(self) -> None:
        assert self.process.stdout is not None
        self.out += self.process.stdout

    @property
    def text(self) -> str:
        return "".join(self.err)

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """The first stderr line (from the start) that matches `pattern`."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.text)
            if found:
                return found
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n{self.text}"
            assert self.process.poll() is None, f"exited {self.process.returncode}:\n{self.text}"
            with contextlib.suppress(queue.Empty):
                self.lines.get(timeout=0.5)

    def finish(self, timeout: float = 90.0) -> tuple[int, str]:
        """Exit status and stdout."""
        status = self.process.wait(timeout=timeout)
        for reader in self.readers:
            reader.join(timeout=5)
        return status, "".join(self.out)

    def close(self) -> None:
        """Interrupted if still running (Ctrl-C: the demo stops what it started), killed if that
        takes too long; its pipes closed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for reader in self.readers:
            reader.join(timeout=5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@contextlib.contextmanager
def demo(*args: str) -> Iterator[Demo]:
    running = Demo(*args)
    try:
        yield running
    finally:
        running.close()


def started(run: Demo) -> tuple[dict[str, str], dict[str, int]]:
    """The coordinators' URLs and every process's pid, from the demo's first line."""
    line = run.wait_for(r"dexp demo: coordinators (.*)\n").group(0)
    urls = re.search(r"coordinators (.*?) \(dashboard", line)
    assert urls is not None, line
    pids = {name: int(pid) for name, pid in re.findall(r"(coordinator-\d+|agent-\d+) (\d+)", line)}
    names = sorted(n for n in pids if n.startswith("coordinator-"))
    return dict(zip(names, urls.group(1).split(", "), strict=True)), pids


def counted(url: str) -> int:
    """Votes one coordinator process counted (its own /metrics)."""
    with contextlib.suppress(httpx.HTTPError):
        found = COUNTED.search(httpx.get(f"{url}/metrics", timeout=5).text)
        return int(float(found.group(1))) if found else 0
    return 0


def test_two_coordinators_one_killed_mid_run_the_demo_goes_on_and_identifies() -> None:
    """Problem 1 (10 arms, M = 29), 32 agents in 2 processes, 2 coordinators, 8,000 activations a
    second: once 20 votes are counted, the coordinator that counted more of them is killed."""
    with demo(
        *("--coordinators", "2", "--agents", "32", "--processes", "2"),
        *("--rate", "8000", "--seed", "7", "--json"),
    ) as run:
        urls, pids = started(run)
        run.wait_for("enrolled with tickets")
        deadline = time.monotonic() + 60
        while sum((votes := {n: counted(u) for n, u in urls.items()}).values()) < 20:
            assert time.monotonic() < deadline and run.process.poll() is None, run.text
            time.sleep(0.1)
        victim = max(votes, key=lambda n: votes[n])
        survivor = next(n for n in urls if n != victim)
        subprocess.run(["kill", "-KILL", str(pids[victim])], check=True)
        status, stdout = run.finish()
    text = run.text
    assert status == 0, text
    assert "Traceback" not in text
    warnings = [line for line in text.splitlines() if "warning: coordinator-" in line]
    assert len(warnings) == 1, text
    warning = warnings[0]
    assert warning.startswith(f"dexp demo: warning: {victim} (")
    assert f"pid {pids[victim]}) exited during the run: killed by SIGKILL (status -9)" in warning
    assert "1 of 2 coordinators still run" in warning
    assert f"last lines of {victim}'s log (" in text
    summary = json.loads(stdout)
    assert summary["status"] == "identified" and summary["identified_arm"] == 0, summary
    assert summary["correct"] is True
    assert summary["coordinators"] == 2 and summary["coordinators_alive"] == 1
    assert summary["redis"] == {"mode": "single", "nodes": 1}
    [survived] = summary["survived"]
    assert survived.startswith(f"{victim} (") and "killed by SIGKILL" in survived
    assert survivor not in survived


def test_the_demo_stops_with_status_7_once_every_coordinator_is_dead() -> None:
    with demo(
        *SMALL,
        *("--coordinators", "2", "--agents", "6", "--processes", "1", "--rate", "40"),
        *("--seed", "3"),
    ) as run:
        _, pids = started(run)
        run.wait_for("enrolled with tickets")
        subprocess.run(["kill", "-KILL", str(pids["coordinator-1"])], check=True)
        run.wait_for("warning: coordinator-1 ")
        subprocess.run(["kill", "-KILL", str(pids["coordinator-0"])], check=True)
        status, stdout = run.finish(timeout=30)
    text = run.text
    assert status == DEMO_FAILED, text
    assert "Traceback" not in text and stdout == ""
    last = text.strip().splitlines()[-1]
    assert last.startswith("dexp demo: stopped: coordinator-0 (")
    assert "exited during the run: killed by SIGKILL (status -9)" in last
    kept = re.search(r"every process's log is kept in (\S+)", text)
    assert kept is not None and (Path(kept.group(1)) / "coordinator-1.log").exists()
    shutil.rmtree(kept.group(1))


def test_a_demo_on_a_redis_cluster_with_two_coordinators_identifies() -> None:
    with demo(
        *SMALL,
        *("--redis-cluster", "3", "--coordinators", "2", "--agents", "32", "--seed", "5"),
        "--json",
    ) as run:
        status, stdout = run.finish(timeout=120)
    assert status == 0, run.text
    assert "Redis Cluster redis://" in run.text and "(3 masters, 0 replica(s) each)" in run.text
    summary = json.loads(stdout)
    assert summary["status"] == "identified" and summary["identified_arm"] == 0, summary
    assert summary["redis"] == {"mode": "cluster", "nodes": 3, "masters": 3, "replicas": 0}
    assert summary["coordinators"] == 2 and summary["coordinators_alive"] == 2
    assert summary["survived"] == []


def test_a_dead_cluster_master_is_survived_once_its_replica_serves_its_slots(
    tmp_path: Path,
) -> None:
    """3 masters, 1 replica each, supervised as the demo does (heal wait cut to 3 s): a master
    killed is a warning, then "healthy again" once its replica took over; that new master, which
    has no replica left, killed in turn: ProcessDied naming it once the 3 s are over."""
    stack = LocalStack(tmp_path, phase="during the run", heal_seconds=3.0)
    warnings: list[list[str]] = []
    stack.warn = warnings.append
    cluster = start_cluster(3, 1, directory=tmp_path / "cluster")
    stack.adopt_cluster(cluster, 1)
    try:
        stack.check_alive()
        first = cluster.masters()[0]
        first_name = f"redis-{cluster.nodes.index(first)}"
        first.process.kill()
        first.process.wait()
        stack.check_alive()  # no ProcessDied: a warning
        [lines] = warnings
        assert lines[0].startswith(f"warning: {first_name} (redis-server --port {first.port}, pid")
        assert "exited during the run: killed by SIGKILL (status -9)" in lines[0]
        assert "it must serve every slot from a live master again within 3 s" in lines[0]
        assert lines[1] == f"last lines of {first_name}'s log ({first.directory / 'redis.log'}):"

        def healed() -> bool:
            stack.check_alive()
            return stack.heal_deadline is None

        wait_until(healed, "the cluster to heal", timeout=20)
        assert warnings[-1] == [f"the Redis Cluster is healthy again after {first_name} died"]
        promoted = [n for n in cluster.masters() if n.port != first.port]
        assert len(promoted) == 3  # the replica of the dead master is one of them
        orphan = next(n for n in promoted if cluster.nodes.index(n) >= 3)  # started as a replica
        orphan_name = f"redis-{cluster.nodes.index(orphan)}"
        orphan.process.kill()
        orphan.process.wait()
        killed = time.monotonic()
        with pytest.raises(ProcessDied) as died:
            while time.monotonic() - killed < 10:
                stack.check_alive()
                time.sleep(0.2)
        assert time.monotonic() - killed >= 3.0
        assert died.value.name == orphan_name
        assert str(died.value).startswith(f"{orphan_name} (redis-server --port {orphan.port}")
        assert "and the Redis Cluster did not heal within 3 s" in str(died.value)
    finally:
        stack.stop()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--coordinators", "0"], "coordinators=0 is invalid: 1 to 16 coordinator processes"),
        (["--coordinators", "17"], "coordinators=17 is invalid: 1 to 16"),
        (["--redis-cluster", "2"], "redis-cluster=2 is invalid: 0 (one redis-server) or 3 to 16"),
        (["--redis-cluster", "17"], "redis-cluster=17 is invalid"),
        (["--redis-cluster", "-1"], "redis-cluster=-1 is invalid"),
        (["--redis-replicas", "1"], "replicas need a Redis Cluster (--redis-cluster N)"),
        (["--redis-cluster", "3", "--redis-replicas", "3"], "0 to 2 replicas per master"),
    ],
)
def test_out_of_range_values_exit_2_with_one_line(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, ["demo", *args])
    assert result.exit_code == 2, result.output
    [only] = result.stderr.splitlines()
    assert only.startswith("error: ") and line in only, only
