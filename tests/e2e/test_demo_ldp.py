"""`dexp demo --algorithm ldp --json`, end to end with real processes (redis-server, the
coordinator, agent processes, the load generator): simulated users visit once each and send one
private report; the run identifies the best arm, and the summary carries the estimates, the lift
and the privacy. A small problem (3 arms, dp_epsilon 2, delta 0.2; every report published at once:
tests/conftest.py) so that the run takes seconds. Bad ldp arguments stop before anything starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MEANS = (0.9, 0.5, 0.1)
USERS = 500  # about twice the reports the identification takes in simulation, at most


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dexp", "demo", *args],
        capture_output=True,
        text=True,
        timeout=240,  # a safety net only: the run ends on the identification
        stdin=subprocess.DEVNULL,
    )


def test_the_ldp_demo_identifies_the_best_arm_with_one_visit_per_user() -> None:
    run = demo(
        *("--algorithm", "ldp", "--dp-epsilon", "2", "--means", ",".join(map(str, MEANS))),
        *("--epsilon", "0.3", "--delta", "0.2"),
        *("--agents", str(USERS), "--processes", "2", "--seed", "1", "--json"),
    )
    assert run.returncode == 0, run.stderr
    summary = json.loads(run.stdout)
    assert summary["status"] == "identified" and summary["identified_arm"] == 0
    assert summary["correct"] is True and summary["algorithm"] == "ldp"
    assert summary["dp_epsilon"] == 2.0 and summary["reports_per_agent"] == 1
    assert summary["certified_epsilon"] == 2.0 and summary["certified_failure"] == 0.2
    # one visit per user: never more activations, nor reports, than users
    assert summary["visits_per_user"] == 1 and summary["agents"] == USERS
    assert summary["activations_delivered"] <= USERS
    assert sum(e["reports"] for e in summary["estimates"]) <= USERS
    for estimate, mean in zip(summary["estimates"], MEANS, strict=True):
        low, high = estimate["ci"]
        assert low <= mean <= high, estimate
    assert [lift["vs"] for lift in summary["lift"]] == [1, 2]
    for lift in summary["lift"]:
        low, high = lift["ci"]
        assert low <= MEANS[0] - MEANS[lift["vs"]] <= high, lift
    assert summary["allocation"] == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--reports-per-agent", "2"], "--reports-per-agent"),  # DE's agents vote
        (["--algorithm", "ldp", "--dp-epsilon", "0"], "dp_epsilon"),
        (["--algorithm", "ldp", "--reports-per-agent", "0"], "reports_per_agent"),
    ],
)
def test_bad_ldp_arguments_are_one_line_and_status_2(args: list[str], named: str) -> None:
    run = demo("--means", "0.9,0.5,0.1", *args)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and named in run.stderr, run.stderr
    assert "pids:" not in run.stderr and run.stdout == ""
