"""The device example (examples/device_agent.py) end to end on real processes: redis-server, a
production coordinator (`python -m coordinator`), tickets issued with the admin API, and 2M - 1
copies of the example, each a process of its own whose environment holds no Redis variable at all,
until the experiment is identified. Each device learns of the identification from the coordinator
alone (the event stream, or its polls)."""

from __future__ import annotations

import csv
import json
import os
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


def device_environment(coordinator: str, ticket: str, home: Path) -> dict[str, str]:
    """What a device process gets: the coordinator's URL and its ticket, and what Python needs to
    run; nothing of the test's own environment."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "DEXP_COORDINATOR_URL": coordinator,
        "DEXP_TICKET": ticket,
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

    processes = []
    for i, ticket in enumerate(tickets):
        env = device_environment(stack.coordinator_url, ticket, tmp_path)
        assert not [name for name in env if "REDIS" in name.upper()]
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(EXAMPLE),
                    *("--experiment", "banners", "--seed", str(i), "--poll-seconds", "1"),
                    *("--state-file", str(tmp_path / f"device-{i}.json")),
                ],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    reports = []
    try:
        for process in processes:
            out, err = process.communicate(timeout=180)
            assert process.returncode == 0, err[-3000:]
            reports.append(json.loads(out.splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()

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
