"""The device example (examples/device_agent.py) end to end on real processes: redis-server, a
production coordinator (`python -m coordinator`), tickets issued with the admin API, and 2M - 1
copies of the example, each a process of its own whose environment holds no Redis variable at all,
until the experiment is identified. Each device learns of the identification from the coordinator
alone (the event stream, or its polls). One of them, started again with its state file and no
ticket, is the same agent and enrolls nobody."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from dexp.demo import LocalStack
from tests.e2e.test_tickets import production  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "device_agent.py"
RATES = ROOT / "examples" / "click_rates.csv"

pytestmark = pytest.mark.timeout(240)


def device_environment(coordinator: str, ticket: str | None, home: Path) -> dict[str, str]:
    """What a device process gets: the coordinator's URL and its ticket, and what Python needs to
    run; nothing of the test's own environment."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "DEXP_COORDINATOR_URL": coordinator,
        **({"DEXP_TICKET": ticket} if ticket is not None else {}),
    }


def test_devices_identify_the_best_banner_over_http_alone(
    production: tuple[LocalStack, str],  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    stack, admin = production
    with RATES.open(newline="") as rows:
        rates = {row["arm"]: float(row["click_rate"]) for row in csv.DictReader(rows)}
    http = httpx.Client(
        base_url=stack.coordinator_url,
        headers={"Authorization": f"Bearer {admin}"},
        timeout=30,
    )
    with http:
        run_devices(stack, http, rates, tmp_path)


def run_devices(
    stack: LocalStack, http: httpx.Client, rates: dict[str, float], tmp_path: Path
) -> None:
    best = max(rates, key=lambda arm: rates[arm])
    created = http.post(
        "/v1/experiments",
        json={"id": "banners", "arms": list(rates), "eta": 0.5, "delta": 0.1, "epsilon": 0.1},
    )
    assert created.status_code == 201, created.text
    threshold = int(created.json()["threshold"])
    assert threshold == 4
    devices = 2 * threshold - 1  # enough that no tie is possible
    issued = http.post("/v1/experiments/banners/tickets", json={"count": devices})
    assert issued.status_code == 201, issued.text
    tickets = issued.json()["tickets"]

    processes = [device(stack, i, ticket, tmp_path) for i, ticket in enumerate(tickets)]
    reports = [report_of(process) for process in processes]

    answer = http.get("/v1/experiments/banners/best-arm").json()
    assert answer["status"] == "identified"
    assert answer["best_arm"]["name"] == best
    state = http.get("/v1/experiments/banners").json()
    assert state["agents"] == devices  # one agent per device, none enrolled twice
    assert len({r["agent_id"] for r in reports}) == devices
    for report in reports:
        assert report["status"] == "identified" and report["best_arm"] == best, report
        assert not report["resumed"]
    # The losers' votes: at least M against each of the K - 1 arms that left.
    assert sum(r["votes_sent"] for r in reports) >= threshold * (len(rates) - 1)

    # A device started again with its state file and no ticket is the same agent, and ends.
    again = report_of(device(stack, 0, None, tmp_path))
    assert again["resumed"] and again["agent_id"] == reports[0]["agent_id"]
    assert again["status"] == "identified" and again["votes_sent"] == 0
    assert http.get("/v1/experiments/banners").json()["agents"] == devices


def device(stack: LocalStack, i: int, ticket: str | None, tmp_path: Path) -> subprocess.Popen[str]:
    """Device i: the example, its own seed and state file, an environment without Redis."""
    env = device_environment(stack.coordinator_url, ticket, tmp_path)
    assert not [name for name in env if "REDIS" in name.upper()]
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE),
            *("--experiment", "banners", "--seed", str(i), "--poll-seconds", "1"),
            *("--until", "done"),
            *("--state-file", str(tmp_path / f"device-{i}.json")),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def report_of(process: subprocess.Popen[str]) -> dict[str, object]:
    """The device's JSON report, once it has ended (killed if it has not within the deadline)."""
    try:
        out, err = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err[-3000:]
    document: dict[str, object] = json.loads(out.splitlines()[-1])
    return document


def test_help_describes_every_option() -> None:
    """`examples/device_agent.py --help` listed its options with no word about any (issue 37,
    point 8): each option now says what it is for."""
    shown = subprocess.run(
        [sys.executable, str(EXAMPLE), "--help"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "1000"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    # each option: "  --name METAVAR  its help", the help on the same line or the next ones
    entries = re.split(r"\n(?=  -)", shown.stdout.split("options:\n", 1)[1].split("\n\n")[0])
    options = [
        re.match(r"\s*(--?[a-z-]+(?:, --[a-z-]+)?)(?: [A-Z_]+| \{[a-z,]+\})?(.*)", e, re.S)
        for e in entries
    ]
    assert len(options) == 10 and all(options), shown.stdout  # --help and nine of its own
    undescribed = [m[1] for m in options if m and not m[2].strip()]
    assert not undescribed, f"--help says nothing of {undescribed}"
