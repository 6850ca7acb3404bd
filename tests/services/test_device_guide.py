"""docs/DEVICES.md cannot rot: its quickstart is extracted and run against a real coordinator (a
process of its own, with no Redis variable in its environment), and every HTTP exchange of its
section "Another language", the event stream and the state file it shows are checked against the
coordinator's /openapi.json, a real event stream and a real state file."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.events import SSEParser
from agent.state import AgentRecord, StateFile
from common import redis_keys as keys
from coordinator.settings import Settings

from .helpers import admin_headers, bearer, coordinator, coordinator_settings

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "DEVICES.md"
EXPERIMENT = "banners"  # the guide's
ARMS = ["red", "green", "blue"]


def blocks(language: str, under: str = "") -> list[str]:
    """The fenced blocks of `language` in the guide, in the section `under` if given."""
    text = GUIDE.read_text()
    if under:  # that section only
        start = text.index(f"\n## {under}\n")
        end = text.find("\n## ", start + 1)
        text = text[start : end if end >= 0 else len(text)]
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.M | re.S)


def create_banners(client: httpx.Client) -> list[str]:
    """The guide's experiment (M = 4), and five tickets for it."""
    body = {"id": EXPERIMENT, "arms": ARMS, "eta": 0.5, "delta": 0.1, "epsilon": 0.1}
    reply = client.post("/v1/experiments", json=body, headers=admin_headers())
    assert reply.status_code == 201, reply.text
    assert reply.json()["threshold"] == 4
    issued = client.post(
        f"/v1/experiments/{EXPERIMENT}/tickets", json={"count": 5}, headers=admin_headers()
    )
    assert issued.status_code == 201, issued.text
    tickets: list[str] = issued.json()["tickets"]
    return tickets


def run_quickstart(script: Path, url: str, ticket: str | None, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(script)],
        env=run_environment(url, ticket, cwd),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_environment(url: str, ticket: str | None, cwd: Path) -> dict[str, str]:
    """A device's environment: the coordinator's URL, its ticket, and nothing of Redis."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "HOME": str(cwd),
        "LANG": "C.UTF-8",
        "DEXP_COORDINATOR_URL": url,
        **({"DEXP_TICKET": ticket} if ticket else {}),
    }
    assert not [name for name in env if "REDIS" in name.upper()]
    return env


def finish(process: subprocess.Popen[str]) -> str:
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err[-3000:]
    return out.strip()


@pytest.fixture
def default_batch(redis_url: str, clean_redis: str) -> Iterator[str]:
    """A coordinator that publishes the public counts in batches as a default one does
    (DEXP_PUBLISH_BATCH's default, 10; a 1 s cadence for the eliminations, to stay short): what a
    newcomer runs the quickstart against. Yields its URL."""
    batch = Settings.model_fields["publish_batch"].default
    assert batch == 10
    settings = coordinator_settings(redis_url, publish_batch=batch, publish_cadence_seconds=1)
    with coordinator(settings) as server:
        yield server.url


def test_one_quickstart_device_ends_and_shows_its_votes_counted(
    default_batch: str, tmp_path: Path
) -> None:
    """Issue 37: the quickstart's one device ran forever and showed nothing (one device never
    reaches the threshold; its votes wait for the publication batch). It ends once it has its own
    answer and prints its votes as the coordinator counted them (GET /v1/agents/me), which the
    public counts do not show yet (2 of 10 messages waiting). Three other agents then vote the
    same two arms out; run again without a ticket, it is the same agent, already settled, and
    prints its votes with the arms out and the experiment identified."""
    (code,) = blocks("python", under="Quickstart")
    assert len([line for line in code.splitlines() if line.strip()]) <= 25  # "about 20 lines"
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    with httpx.Client(base_url=default_batch, timeout=10, trust_env=False) as client:
        tickets = create_banners(client)
        out = finish(run_quickstart(script, default_batch, tickets[0], tmp_path))
        by_agent = client.get(
            f"/v1/experiments/{EXPERIMENT}/voters", headers=admin_headers()
        ).json()["by_agent"]
        ((agent_id, voted),) = by_agent.items()
        assert len(voted) == 2  # its local answer: the third arm
        counted = "counted: " + " ".join(f"{ARMS[arm]}:counted" for arm in voted)
        assert out.splitlines()[-2:] == [counted, "exploring (2 of 10 messages to publish)"]
        document = client.get(f"/v1/experiments/{EXPERIMENT}").json()
        assert (document["votes"], document["messages"]) == ([0, 0, 0], 0)  # not published yet
        waiting = client.get(f"/v1/experiments/{EXPERIMENT}/waiting")
        assert waiting.json() == {"experiment": EXPERIMENT, "waiting": 2, "publish_batch": 10}
        assert waiting.headers["cache-control"] == "no-store"

        for ticket in tickets[1:4]:
            agent = client.post(
                "/v1/agents", json={"experiment": EXPERIMENT}, headers=bearer(ticket)
            ).json()
            for arm in voted:
                vote = client.post(
                    f"/v1/experiments/{EXPERIMENT}/votes",
                    json={"arm": arm, "epoch": 0},
                    headers=bearer(agent["token"]),
                )
                assert vote.status_code == 200, vote.text
        deadline = time.monotonic() + 30  # the eliminations' tick (1 s)
        while client.get(f"/v1/experiments/{EXPERIMENT}").json()["status"] != "identified":
            assert time.monotonic() < deadline, "never identified"
            time.sleep(0.1)
        again = finish(run_quickstart(script, default_batch, None, tmp_path)).splitlines()
        out_now = "counted: " + " ".join(f"{ARMS[arm]}:arm_out" for arm in voted)
        assert again[-2:] == [out_now, "identified (0 of 10 messages to publish)"]
        assert json.loads((tmp_path / "dexp-banners.json").read_text())["agent_id"] == agent_id
        assert client.get(f"/v1/experiments/{EXPERIMENT}").json()["agents"] == 4  # no new agent


def test_the_example_device_alone_ends_on_its_own_counted_votes(
    default_batch: str, tmp_path: Path
) -> None:
    """examples/device_agent.py, one device with its defaults (issue 37): it ends once it has its
    own answer and reports its three votes counted, 3 of 10 messages waiting for publication."""
    with httpx.Client(base_url=default_batch, timeout=10, trust_env=False) as client:
        arms = [
            row.split(",")[0]
            for row in (ROOT / "examples" / "click_rates.csv").read_text().split()[1:]
        ]
        body = {"id": EXPERIMENT, "arms": arms, "eta": 0.5, "delta": 0.1, "epsilon": 0.1}
        assert client.post("/v1/experiments", json=body, headers=admin_headers()).is_success
        issued = client.post(
            f"/v1/experiments/{EXPERIMENT}/tickets", json={"count": 1}, headers=admin_headers()
        )
        (ticket,) = issued.json()["tickets"]
        example = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "device_agent.py"), "--seed", "1"],
            env=run_environment(default_batch, ticket, tmp_path),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        report = json.loads(finish(example).splitlines()[-1])
        ((_, voted),) = (
            client.get(f"/v1/experiments/{EXPERIMENT}/voters", headers=admin_headers())
            .json()["by_agent"]
            .items()
        )
    assert (report["status"], report["settled"], report["votes_sent"]) == ("exploring", True, 3)
    assert report["counted"] == [{"arm": arms[arm], "outcome": "counted"} for arm in voted]
    assert (report["waiting"], report["publish_batch"]) == (3, 10)


def exchange(block: str) -> dict[str, Any]:
    """An ```http block: the request (method, path, headers, JSON body) and the response (status,
    headers, JSON body, if any)."""
    request, _, response = block.partition("\nHTTP/1.1 ")
    head, _, body = request.partition("\n\n")
    start, *header_lines = head.splitlines()
    method, path, _ = start.split(" ")
    status_line, _, response_rest = response.partition("\n")
    response_head, _, response_body = response_rest.partition("\n\n")
    return {
        "method": method.lower(),
        "path": path,
        "headers": dict(line.split(": ", 1) for line in header_lines),
        "body": json.loads(body) if body.strip() else None,
        "status": status_line.split(" ")[0],
        "response_headers": dict(line.split(": ", 1) for line in response_head.splitlines()),
        "response_body": json.loads(response_body) if response_body.strip() else None,
    }


def schema(spec: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """A schema, its $ref (and a nullable anyOf's) followed."""
    if "anyOf" in node:
        node = next(n for n in node["anyOf"] if n.get("type") != "null")
    if "$ref" in node:
        node = spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def check_fields(spec: dict[str, Any], node: dict[str, Any], document: dict[str, Any]) -> None:
    """The document has every required field and only fields the schema knows."""
    found = schema(spec, node)
    assert set(found.get("required", ())) <= set(document) <= set(found["properties"]), document


def test_the_ldp_quickstart_reports_once_and_a_restart_sends_nothing(
    coordinator_url: str, client: httpx.Client, store: Any, tmp_path: Path
) -> None:
    """The guide's LDP device (section "LDP: one visit, one private report"): one arm drawn, one
    report counted; run again without a ticket, the same agent, which sends nothing more."""
    (code,) = blocks("python", under="LDP: one visit, one private report")
    script = tmp_path / "ldp.py"
    script.write_text(code)
    body = {"id": "offers", "arms": ARMS, "algorithm": "ldp"}
    assert client.post("/v1/experiments", json=body, headers=admin_headers()).status_code == 201
    issued = client.post(
        "/v1/experiments/offers/tickets", json={"count": 1}, headers=admin_headers()
    )
    (ticket,) = issued.json()["tickets"]
    name, sent, left, status = finish(
        run_quickstart(script, coordinator_url, ticket, tmp_path)
    ).split()
    assert name in ARMS and (sent, left, status) == ("1", "0", "exploring")
    again = finish(run_quickstart(script, coordinator_url, None, tmp_path)).split()
    assert again[0] in ARMS and again[1:] == ["1", "0", "exploring"]
    assert {int(v) for v in store.hvals(keys.report_seq("offers"))} == {1}
    assert sum(int(v) for v in store.hvals(keys.report_counts("offers"))) == 1


def test_the_guides_http_calls_are_the_coordinators(
    coordinator_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    spec = client.get("/openapi.json").json()
    exchanges = [exchange(b) for b in blocks("http", under="Another language")]
    documented = {(e["method"], e["path"]) for e in exchanges}
    assert documented == {
        ("post", "/v1/agents"),
        ("get", f"/v1/experiments/{EXPERIMENT}"),
        ("get", f"/v1/experiments/{EXPERIMENT}/events"),
        ("post", f"/v1/experiments/{EXPERIMENT}/votes"),
        ("post", f"/v1/experiments/{EXPERIMENT}/settled"),
        ("post", f"/v1/experiments/{EXPERIMENT}/reset"),
        ("post", f"/v1/experiments/{EXPERIMENT}/report"),
        ("post", f"/v1/experiments/{EXPERIMENT}/reports"),
        ("get", "/v1/agents/me"),
        ("get", f"/v1/experiments/{EXPERIMENT}/waiting"),
    }
    for e in exchanges:
        route = e["path"].replace(f"/{EXPERIMENT}", "/{experiment}")
        operation = spec["paths"][route][e["method"]]
        where = f"{e['method'].upper()} {e['path']}"
        assert e["status"] in operation["responses"], where
        response = operation["responses"][e["status"]]
        headers = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "header"}
        for name in e["headers"]:
            if name == "Authorization":
                assert operation.get("security"), where
            elif name == "If-None-Match":
                assert "304" in operation["responses"], where
            else:
                assert name in {"Content-Type", "Accept", *headers}, (where, name)
        if "text/event-stream" not in response.get("content", {}):  # checked on a real one below
            for name in e["response_headers"]:
                assert name == "Content-Type" or name in response.get("headers", {}), (where, name)
        if e["body"] is not None:
            node = operation["requestBody"]["content"]["application/json"]["schema"]
            check_fields(spec, node, e["body"])
        if e["response_body"] is not None:
            check_fields(
                spec, response["content"]["application/json"]["schema"], e["response_body"]
            )

    # The event stream: a real one's headers and first event have the documented form.
    create_banners(client)
    (stream_exchange,) = [e for e in exchanges if e["path"].endswith("/events")]
    (text,) = blocks("text", under="Another language")
    parser = SSEParser()
    events = [e for e in map(parser.feed, text.splitlines()) if e is not None]
    assert [e.type for e in events] == ["state", "state", "deleted"] and parser.retry
    assert json.loads(events[-1].data) == {"experiment": EXPERIMENT}
    with client.stream("GET", f"/v1/experiments/{EXPERIMENT}/events") as stream:
        for name, value in stream_exchange["response_headers"].items():
            assert stream.headers[name] == value, name
        real = SSEParser()
        first = next(e for e in map(real.feed, stream.iter_lines()) if e is not None)
    assert real.retry is not None and first.type == "state" and first.id
    for event in events[:2]:
        assert set(json.loads(event.data)) == set(json.loads(first.data))

    # The state file: the fields the SDK writes.
    (shown,) = blocks("json", under="The state file")
    state = StateFile(tmp_path / "agent.json")
    state.save(EXPERIMENT, 1, AgentRecord("a", "a.t", pending=[(1, 0)]))
    assert set(json.loads(shown)) == set(json.loads(state.path.read_text()))
