"""`dexp demo --linger`: the summary names the dashboard, which still answers after the run, for
as long as asked; Ctrl-C ends the wait early and cleanly. Real processes, on a small problem
(3 arms, M = 3) so that each run takes seconds. No bet on time: the waits have generous deadlines
only so that a hang cannot block the suite, and the one duration asserted is a lower bound."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time

import httpx
import pytest

from common.algorithms import AlgorithmConfig
from dexp.demo import DemoSummary, run_demo
from load_generator.generator import exit_code

MEANS = "0.9,0.5,0.1"
SMALL = [
    *("--means", MEANS, "--agents", "3", "--processes", "1"),
    *("--eta", "0.5", "--delta", "0.2", "--seed", "5"),
]


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def test_the_dashboard_answers_while_the_demo_lingers_and_ctrl_c_ends_it() -> None:
    """The JSON summary (stdout, printed while the stack runs) carries the dashboard's URL; the
    page answers while the demo lingers (600 s asked: it cannot have ended by itself); SIGINT ends
    the wait, every process stops (the URL is dead), and the exit status is the run's."""
    with subprocess.Popen(
        [sys.executable, "-m", "dexp", "demo", *SMALL, "--json", "--linger", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal delivers it, whatever this test process does with SIGINT: a child
        # inherits an ignored SIGINT, and Python then keeps ignoring it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    ) as demo:
        try:
            assert demo.stdout is not None and demo.stderr is not None
            line = demo.stdout.readline()  # the summary, one JSON object on one line
            assert line, demo.stderr.read()
            summary = json.loads(line)
            assert summary["status"] == "identified" and summary["correct"] is True
            dashboard = summary["dashboard"]
            assert dashboard.startswith("http://127.0.0.1:") and dashboard.endswith("/dashboard")
            assert demo.poll() is None  # lingering
            for _ in range(3):  # it answers, and keeps answering
                reply = httpx.get(dashboard, timeout=10)
                assert reply.status_code == 200 and "<html" in reply.text.lower()
            state = httpx.get(dashboard.replace("/dashboard", "/v1/experiments/demo"), timeout=10)
            assert state.json()["status"] == "identified"  # what the page shows: the outcome
            assert demo.poll() is None
            demo.send_signal(signal.SIGINT)
            status = demo.wait(timeout=60)
            err = demo.stderr.read()
        finally:
            if demo.poll() is None:
                demo.kill()
                demo.wait()
    assert status == 0, err  # the summary's: identified, eps-optimal
    assert "Traceback" not in err
    assert f"the stack stays up 600 s (dashboard: {dashboard})" in err
    assert "dexp demo: interrupted; stopping every process" in err
    assert not answers(dashboard)  # every process it started is stopped


def test_the_demo_ends_by_itself_after_its_linger() -> None:
    """In process: the summary is handed over while the dashboard answers, run_demo returns no
    sooner than `linger` seconds later, by itself, with the stack stopped."""
    seen: dict[str, float | bool] = {}
    linger = 2.0

    def on_summary(summary: DemoSummary) -> None:
        seen["up"] = answers(summary.dashboard)
        seen["at"] = time.monotonic()

    summary = run_demo(
        None,
        AlgorithmConfig(delta=0.2, eta=0.5),
        agents=3,
        processes=1,
        seed=5,
        means=MEANS,
        max_seconds=120,
        linger=linger,
        on_summary=on_summary,
        out=io.StringIO(),
    )
    ended = time.monotonic()
    assert seen["up"] is True
    assert ended - float(seen["at"]) >= linger
    assert exit_code(summary) == 0
    assert not answers(summary.dashboard)


@pytest.mark.parametrize("linger", ["-1", "1e9", "nan"])
def test_a_bad_linger_is_refused_before_anything_starts(linger: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "dexp", "demo", *SMALL, "--linger", linger],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert "linger" in run.stderr and "pids:" not in run.stderr
