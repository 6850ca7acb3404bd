"""`dexp demo` supervises what it started, enrolls the production way, and agent processes meet the
coordinator's limits plainly: real processes (redis-server, the coordinator under uvicorn, agent
processes, the load generator), on small problems (3 arms, M = 3) so that each test takes seconds.

- an agent process killed mid-run: the demo stops at once, names it with its status and log tail,
  and exits with status 7;
- an agent process at open enrollment's per-client cap keeps the agents it got, says so in one
  line (no traceback) and does not ask again; one that got none exits with status 3;
- a 429 from the vote rate limit is waited out as Retry-After asks;
- the demo runs more agents than its coordinator's per-client cap (tickets are not subject to it).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from clients.coordinator import CoordinatorClient
from common.algorithms import AlgorithmConfig
from dexp.demo import DEMO_FAILED, local_stack, run_demo, wait_until
from load_generator.generator import LoadGenerator, exit_code
from load_generator.settings import LoadSettings

CONFIG = AlgorithmConfig(delta=0.2, eta=0.5)  # M = 3 on 3 arms
ARMS = ["arm-0", "arm-1", "arm-2"]
MEANS = "0.9,0.5,0.1"
# Every wait is for a condition; this deadline only keeps a hang from blocking the suite (a loaded
# machine starts and runs the processes several times slower).
DEADLINE = 120.0
ROUNDS = re.compile(r"(\d+) discovery rounds")  # an agent process's status line


def agents(url: str) -> int:
    return int(httpx.get(f"{url}/v1/experiments/demo", timeout=5).json()["agents"])


def enrollments(url: str) -> dict[str, int]:
    """The coordinator's answers to enrollments (POST /v1/agents) so far, by status code (its
    /metrics; the labels in any order)."""
    answers: dict[str, int] = {}
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        labels, _, count = line.partition("} ")
        if labels.startswith("dexp_http_requests_total{") and all(
            label in labels for label in ('route="/v1/agents"', 'method="POST"')
        ):
            code = re.search(r'code="(\d+)"', labels)
            assert code is not None, line
            answers[code.group(1)] = int(float(count))
    return answers


def rounds_since_hosting(log: str) -> int:
    """Discovery rounds an agent process ran after it logged its agents (its status lines after
    that line: the last one's count less the first one's; 0 before two of them)."""
    counts = [int(n) for n in ROUNDS.findall(log.rpartition(" agent(s) in demo on ")[2])]
    return counts[-1] - counts[0] if counts else 0


def play(url: str, redis_url: str, seed: int) -> LoadGenerator:
    return LoadGenerator(
        LoadSettings(
            coordinator_url=url,
            redis_url=redis_url,
            problem="",
            means=MEANS,
            seed=seed,
            max_seconds=DEADLINE,
            settle_seconds=0.5,
            stall_seconds=DEADLINE / 2,
        )
    )


def test_a_demo_whose_agent_process_dies_stops_at_once_and_names_it() -> None:
    """`dexp demo` at 40 activations a second (a run of minutes); agent-1 is killed once every
    agent enrolled and agent-1 logged its agents. The demo stops on the death itself (its last
    line names agent-1, not a stall of the run), names agent-1 with its signal and the last lines
    of its log, keeps the logs, and exits with status 7, without a traceback. No time bound is
    asserted: the waits' timeouts only keep a hang from blocking the suite."""
    lines: queue.Queue[str] = queue.Queue()
    err: list[str] = []
    pids: dict[str, int] = {}
    logs = Path()
    with subprocess.Popen(
        [
            *(sys.executable, "-m", "dexp", "demo", "--means", MEANS),
            *("--agents", "6", "--processes", "2", "--eta", "0.5", "--delta", "0.2"),
            *("--rate", "40", "--seed", "3"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as demo:

        def read() -> None:
            assert demo.stderr is not None
            for line in demo.stderr:
                err.append(line)
                lines.put(line)

        def running() -> None:
            assert demo.poll() is None, "".join(err)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + DEADLINE
            while "enrolled with tickets" not in "".join(err):
                assert time.monotonic() < deadline, (
                    f"not enrolled in {DEADLINE:g} s: {''.join(err)}"
                )
                running()
                with contextlib.suppress(queue.Empty):
                    line = lines.get(timeout=1)
                    if "pids: " in line:
                        found = re.findall(r"(agent-\d|coordinator|redis) (\d+)", line)
                        pids = {name: int(pid) for name, pid in found}
                        logs = Path(line.rpartition("; logs in ")[2].strip())
            # agent-1 hosts its agents, and said so: the log tail the demo shows has that line
            wait_until(
                lambda: " agent(s) in demo on " in (logs / "agent-1.log").read_text(),
                "agent-1's line 'N agent(s) in demo on ...'",
                timeout=DEADLINE,
                alive=running,
            )
            os.kill(pids["agent-1"], signal.SIGKILL)
            status = demo.wait(timeout=DEADLINE)
            reader.join(timeout=5)
            assert demo.stdout is not None
            summary = demo.stdout.read()
        finally:
            if demo.poll() is None:  # Ctrl-C: the demo stops what it started (a kill would not)
                demo.send_signal(signal.SIGINT)
                try:
                    demo.wait(timeout=DEADLINE)
                except subprocess.TimeoutExpired:
                    demo.kill()
                    demo.wait()
    text = "".join(err)
    assert status == DEMO_FAILED, text
    assert "Traceback" not in text
    last = text.strip().splitlines()[-1]
    assert last.startswith("dexp demo: stopped: agent-1 (")
    assert f"pid {pids['agent-1']}) exited during the run: killed by SIGKILL (status -9)" in last
    assert "last lines of agent-1's log (" in text
    assert re.search(r"  \| .*agent\(s\) in demo on ", text), text  # the tail itself
    kept = re.search(r"every process's log is kept in (\S+)", text)
    assert kept is not None and (Path(kept.group(1)) / "agent-1.log").exists()
    shutil.rmtree(kept.group(1))
    assert summary == ""  # no summary: the run stopped


def test_an_agent_process_at_the_per_client_cap_keeps_its_agents_and_says_so_once(
    tmp_path: Path,
) -> None:
    """Open enrollment, DEXP_MAX_AGENTS_PER_CLIENT=5, two processes of 4 agents: 5 enroll. Each
    process short of its agents logs one line naming the limit and the fix, never a traceback,
    keeps running with the agents it got, and does not ask again; the run ends identified with the
    5. A third process, which gets none, exits with status 3 and that line."""
    with local_stack(
        CONFIG,
        ARMS,
        8,
        2,
        seed=4,
        workdir=tmp_path,
        coordinator_env={"DEXP_MAX_AGENTS_PER_CLIENT": "5"},
        # a status line (its discovery rounds) as often as a round
        agent_env={"DEXP_DISCOVER_SECONDS": "0.2", "DEXP_STATUS_SECONDS": "0.2"},
    ) as stack:
        url = stack.coordinator_url

        def settled() -> bool:
            logs = [stack.log_path(n).read_text() for n in ("agent-0", "agent-1")]
            return agents(url) == 5 and all("agent(s) in demo" in log for log in logs)

        wait_until(settled, "5 agents", timeout=DEADLINE, alive=stack.check_alive)
        wait_until(  # several discovery rounds after the limit: none asks again (below)
            lambda: all(
                rounds_since_hosting(stack.log_path(n).read_text()) >= 5
                for n in ("agent-0", "agent-1")
            ),
            "5 discovery rounds of each agent process after it logged its agents",
            timeout=DEADLINE,
            alive=stack.check_alive,
        )
        assert agents(url) == 5
        stack.check_alive()  # both still run
        answers = enrollments(url)
        short = 0
        for name in ("agent-0", "agent-1"):
            log = stack.log_path(name).read_text()
            assert "Traceback" not in log
            capped = [line for line in log.splitlines() if "DEXP_MAX_AGENTS_PER_CLIENT" in line]
            hosted = re.search(r"(\d+) agent\(s\) in demo on ", log)
            assert hosted is not None, log
            if hosted.group(1) == "4":
                assert capped == []
                continue
            short += 1
            [line] = capped
            assert '"level":"ERROR"' in line
            assert re.search(r"hosts the [1-3] of its 4 agent\(s\) it got", line)
            assert "dexp tickets issue demo --count " in line
            assert "raise DEXP_MAX_AGENTS_PER_CLIENT on the coordinator" in line
        assert short >= 1
        # Each short process was refused once, and never asked again.
        assert {code: n for code, n in answers.items() if code != "201"} == {"403": short}, answers
        with play(url, stack.redis_url, seed=4) as generator:
            summary = generator.run()
        assert summary.status == "identified" and summary.correct, summary
        assert summary.agents == 5
        # A third process gets no agent at all: one line, status 3.
        args, env = stack.specs["agent-0"]
        stack.spawn("agent-2", args, {**env, "AGENTS_PER_REPLICA": "3"})
        assert stack.named["agent-2"].wait(timeout=DEADLINE) == 3
        log = stack.log_path("agent-2").read_text()
        assert "Traceback" not in log
        [line] = log.splitlines()
        assert "this process got none of its 3 agent(s)" in line
        assert "DEXP_MAX_AGENTS_PER_CLIENT" in line


def test_a_429_is_waited_out_as_retry_after_asks(tmp_path: Path) -> None:
    """DEXP_VOTE_RATE=0.25 a second, burst 1: an agent's second vote within 4 s gets 429 with
    Retry-After. The client waits that long, and the vote is counted; agent processes under the
    same limit end their run identified, logging the waits (no traceback)."""
    env = {"DEXP_VOTE_RATE": "0.25", "DEXP_VOTE_BURST": "1"}
    with local_stack(CONFIG, ARMS, 4, 1, seed=6, workdir=tmp_path, coordinator_env=env) as stack:
        url = stack.coordinator_url
        # The client on its own, on an experiment of its own: two votes in a row.
        admin = {"Authorization": f"Bearer {stack.admin_token}"}
        created = httpx.post(
            f"{url}/v1/experiments", json={"id": "rl", "arms": ARMS}, headers=admin, timeout=10
        )
        assert created.status_code == 201, created.text
        ticket = httpx.post(
            f"{url}/v1/experiments/rl/tickets", json={"count": 1}, headers=admin, timeout=10
        ).json()["tickets"][0]
        client = CoordinatorClient(url)
        try:
            token = client.enroll(ticket, "rl")["token"]
            assert client.vote("rl", token, 2, 0)["counted"]
            first = httpx.post(
                f"{url}/v1/experiments/rl/votes",
                json={"arm": 1, "epoch": 0},
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            assert first.status_code == 429
            retry_after = float(first.headers["Retry-After"])
            assert retry_after >= 1
            started = time.monotonic()
            reply = client.vote("rl", token, 1, 0)
            waited = time.monotonic() - started
        finally:
            client.close()
        assert reply["counted"] and client.rate_limited >= 1
        assert waited >= retry_after - 1.0  # the coordinator's wait, rounded up to a second
        # Agent processes under the same limit.
        with play(url, stack.redis_url, seed=6) as generator:
            summary = generator.run()
        assert summary.status == "identified" and exit_code(summary) == 0, summary
        log = stack.log_path("agent-0").read_text()
        assert "Traceback" not in log
        waits = re.findall(r"rate-limited by the coordinator \(429: .*?\): waiting ([\d.]+)s", log)
        assert waits, log
        assert all(float(w) >= 1.0 for w in waits)  # never sooner than Retry-After (>= 1 s)
        assert "as Retry-After asks" in log


def test_the_demo_runs_more_agents_than_its_coordinator_admits_per_client(tmp_path: Path) -> None:
    """DEXP_MAX_AGENTS_PER_CLIENT=20 and a slow open enrollment (1 a second, burst 5) on the
    demo's coordinator: 40 agents from one machine enroll all the same, with tickets."""
    summary = run_demo(
        None,
        CONFIG,
        agents=40,
        processes=2,
        seed=5,
        means=MEANS,
        max_seconds=DEADLINE,
        workdir=tmp_path,
        coordinator_env={
            "DEXP_MAX_AGENTS_PER_CLIENT": "20",
            "DEXP_ENROLL_RATE": "1",
            "DEXP_ENROLL_BURST": "5",
        },
    )
    assert summary.status == "identified" and summary.correct, summary
    assert summary.agents == 40
    for name in ("agent-0", "agent-1"):
        log = (tmp_path / f"{name}.log").read_text()
        assert "20 agent(s) in demo" in log and "Traceback" not in log
        assert "ERROR" not in log
