"""/metrics under a real Prometheus: a real server (Debian's `prometheus`, on 127.0.0.1, a free
port, a one-second scrape) scrapes the real coordinator during a run, loads the alert rules of
deploy/monitoring, and is asked every query of the Grafana dashboard.

What it shows: the scrape is valid Prometheus text (`promtool check metrics`: names, units, help),
every series the dashboard and the rules name exists in what Prometheus scraped, the run's events
are counted where an operator looks for them (route templates, refusals by reason, enrollments by
way, experiments by status), no raw path or experiment id becomes a label, and every alert rule
evaluates without error on the real series.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.prerequisites import missing
from tests.test_deploy_monitoring import (
    ALERTS,
    alert_expressions,
    dashboard,
    dashboard_expressions,
    series_names,
)

from .helpers import (
    ENROLLMENT_SECRET,
    admin_headers,
    bearer,
    config_for_threshold,
    create_experiment,
    enroll_agents,
    free_port,
)

DEADLINE_SECONDS = 120.0  # generous: the machine is shared; every wait is for a condition


def binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        missing(f"{name} is missing (Debian's prometheus package; scripts/test installs it)")
    return found


@pytest.fixture
def prometheus(coordinator_url: str, tmp_path: Path) -> Iterator[httpx.Client]:
    """A Prometheus scraping the coordinator every second, with deploy/monitoring's rules."""
    server = binary("prometheus")
    target = coordinator_url.removeprefix("http://")
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["alerts.yml"],
        "scrape_configs": [
            {"job_name": "dexp-coordinator", "static_configs": [{"targets": [target]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [
        server,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0) as http:
            until(lambda: ready(http, process), "Prometheus ready", tmp_path / "prometheus.log")
            yield http
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def ready(http: httpx.Client, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise AssertionError(f"prometheus exited with {process.returncode}")
    try:
        return http.get("/-/ready").status_code == 200
    except httpx.TransportError:
        return False


def until(condition: Any, what: str, log: Path | None = None) -> Any:
    """Wait for `condition()` to be truthy (returned), under one generous deadline."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = log.read_text()[-2000:] if log else ""
            raise AssertionError(f"not seen within {DEADLINE_SECONDS} s: {what}\n{tail}")
        time.sleep(0.2)


def query(http: httpx.Client, expr: str) -> list[dict[str, Any]]:
    answer = http.get("/api/v1/query", params={"query": expr}).json()
    assert answer["status"] == "success", f"{expr}: {answer}"
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def value(http: httpx.Client, expr: str) -> float:
    result = query(http, expr)
    return sum(float(r["value"][1]) for r in result)


def run(client: httpx.Client) -> None:
    """What operators see happen: an experiment created, agents enrolled openly and by ticket,
    votes until one arm is identified, a bad token, an oversized body, a reset."""
    config = config_for_threshold(2)
    create_experiment(client, id="watched", arms=["a", "b"], delta=config.delta, eta=config.eta)
    agents = enroll_agents(client, "watched", 2)
    tickets = client.post(
        "/v1/experiments/watched/tickets",
        json={"count": 2, "ttl_seconds": 600},
        headers=admin_headers(),
    )
    assert tickets.status_code == 201, tickets.text
    ticket = tickets.json()["tickets"][0]
    enrolled = client.post("/v1/agents", json={"experiment": "watched"}, headers=bearer(ticket))
    assert enrolled.status_code == 201, enrolled.text
    for agent in agents:
        vote = client.post(
            "/v1/experiments/watched/votes", json={"arm": 1, "epoch": 0}, headers=agent.headers
        )
        assert vote.status_code == 200, vote.text
    assert client.get("/v1/experiments/watched").json()["status"] == "identified"
    bad = client.post(
        "/v1/experiments/watched/votes",
        json={"arm": 0, "epoch": 0},
        headers=bearer("watched-0000000000.not-a-token"),
    )
    assert bad.status_code == 401
    big = client.post(
        "/v1/agents", content=b"x" * 70_000, headers=bearer(ENROLLMENT_SECRET) | json_type()
    )
    assert big.status_code == 413
    create_experiment(client, id="second", arms=["a", "b"], delta=config.delta, eta=config.eta)
    reset = client.post("/v1/experiments/second/reset", json={}, headers=admin_headers())
    assert reset.status_code == 200, reset.text


def json_type() -> dict[str, str]:
    return {"Content-Type": "application/json"}


def test_prometheus_scrapes_what_the_dashboard_and_the_alerts_name(
    client: httpx.Client, coordinator_url: str, prometheus: httpx.Client, tmp_path: Path
) -> None:
    before = {
        "ticket": value(prometheus, 'dexp_enrollments_total{via="ticket"}'),
        "unauthorized": value(prometheus, 'dexp_refusals_total{reason="unauthorized"}'),
    }
    run(client)
    # the run is in Prometheus once a scrape after it is: a ticket enrollment more
    until(
        lambda: value(prometheus, 'dexp_enrollments_total{via="ticket"}') >= before["ticket"] + 1,
        "the run's ticket enrollment in a scrape",
    )
    exprs = dashboard_expressions(dashboard())
    named = set().union(*map(series_names, exprs + alert_expressions()))
    scraped = set(prometheus.get("/api/v1/label/__name__/values").json()["data"])
    assert named - scraped == set()
    for expr in exprs:
        query(prometheus, expr)  # every panel's query is answered by the real server

    # counted where an operator looks: templates, not paths; refusals by reason
    votes = query(prometheus, 'dexp_http_requests_total{method="POST", code="200"}')
    routes = {r["metric"]["route"] for r in votes}
    assert "/v1/experiments/{experiment}/votes" in routes
    assert not [r for r in routes if "watched" in r or "second" in r]
    assert value(prometheus, 'dexp_refusals_total{reason="unauthorized"}') >= (
        before["unauthorized"] + 1
    )
    assert value(prometheus, 'dexp_refusals_total{reason="body_too_large"}') >= 1
    assert value(prometheus, 'dexp_resets_total{outcome="applied"}') >= 1
    labels = set(prometheus.get("/api/v1/labels").json()["data"])
    assert not labels & {"experiment", "agent", "path", "agent_id"}
    # the store's figures (refreshed at most every few seconds): this run's two experiments
    until(
        lambda: (
            value(prometheus, 'dexp_experiments{status="identified"}') == 1
            and value(prometheus, 'dexp_experiments{status="exploring"}') == 1
            and value(prometheus, "dexp_agents_enrolled") == 3
        ),
        "experiments by status and agents enrolled",
    )

    # every alert rule evaluated on the real series, without error, and none firing
    def evaluated() -> list[dict[str, Any]] | None:
        groups = prometheus.get("/api/v1/rules").json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = rules and all(r["lastEvaluation"] > "0001-01-01T00:00:00Z" for r in rules)
        return rules if done else None

    rules = until(evaluated, "every alert rule evaluated")
    assert len(rules) == len(alert_expressions())
    assert [
        (r["name"], r["health"], r.get("lastError", "")) for r in rules if r["health"] != "ok"
    ] == []
    assert [r["name"] for r in rules if r["state"] == "firing"] == []

    # the scrape itself follows Prometheus's conventions
    scrape = httpx.get(f"{coordinator_url}/metrics").text
    check = subprocess.run(
        [binary("promtool"), "check", "metrics"], input=scrape, capture_output=True, text=True
    )
    assert check.returncode == 0 and not check.stdout.strip(), check.stdout + check.stderr
