"""Webhooks against a real coordinator, Redis and a real HTTP receiver on 127.0.0.1.

The receiver (http.server in a thread) records every request and answers from a script: a list
of statuses, or a hang. Tests wait for conditions (a request arrived, a delivery's status), never
for a fixed time."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import redis

from .helpers import (
    Agent,
    admin_headers,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    redis_server,
)

ARMS = ["red", "green", "blue"]  # delta=0.2, eta=0.5: M = 3
FAST = {  # retries and sweeps in tens of ms, so that the tests take a second or two
    "webhook_backoff_seconds": 0.05,
    "webhook_poll_seconds": 0.05,
    "webhook_timeout_seconds": 5.0,
}


class Receiver:
    """An HTTP server on 127.0.0.1 that records each POST and answers `statuses` in turn (then
    200), or hangs while `hang` is set."""

    def __init__(self, statuses: list[int] | None = None) -> None:
        self.statuses = list(statuses or [])
        self.requests: list[tuple[dict[str, str], bytes, float]] = []
        self.changed = threading.Condition()
        self.hang = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.changed:
                    receiver.requests.append((dict(self.headers), body, time.monotonic()))
                    receiver.changed.notify_all()
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                while receiver.hang.is_set():
                    time.sleep(0.01)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait(self, n: int, timeout: float = 15.0) -> list[tuple[dict[str, str], bytes, float]]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.requests) >= n, timeout), (
                f"{len(self.requests)} requests, {n} expected"
            )
            return list(self.requests)


@contextmanager
def receiver(statuses: list[int] | None = None) -> Iterator[Receiver]:
    server = Receiver(statuses)
    server.thread.start()
    try:
        yield server
    finally:
        server.hang.clear()
        server.server.shutdown()
        server.server.server_close()


@pytest.fixture(scope="module")
def hooks_redis() -> Iterator[str]:
    """A Redis of this module's own: the session's coordinator (no DEXP_WEBHOOK_HOSTS) would
    otherwise sweep these experiments too, and fail their attempts to 127.0.0.1, as it should."""
    with redis_server() as server:
        yield server.url


@pytest.fixture(scope="module")
def hooks_url(hooks_redis: str) -> Iterator[str]:
    """A coordinator that may POST to 127.0.0.1 (DEXP_WEBHOOK_HOSTS=127.0.0.1), retrying fast."""
    settings = coordinator_settings(hooks_redis, webhook_hosts="127.0.0.1", **FAST)
    with coordinator(settings) as server:
        yield server.url


@pytest.fixture
def hooks(hooks_url: str, hooks_redis: str) -> Iterator[httpx.Client]:
    """A client of that coordinator, its Redis emptied before the test."""
    redis.Redis.from_url(hooks_redis).flushall()
    with httpx.Client(base_url=hooks_url, timeout=10.0, trust_env=False) as http:
        yield http


def add_webhook(client: httpx.Client, exp: str, url: str) -> dict[str, Any]:
    response = client.post(
        f"/v1/experiments/{exp}/webhooks", json={"url": url}, headers=admin_headers()
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def identify(client: httpx.Client, exp: str, agents: list[Agent]) -> None:
    """Every agent votes out red, then blue: green is identified."""
    for arm in (0, 2):
        for agent in agents:
            response = client.post(
                f"/v1/experiments/{exp}/votes",
                json={"arm": arm, "epoch": 0},
                headers=agent.headers,
            )
            assert response.status_code == 200, response.text


def webhooks(client: httpx.Client, exp: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/experiments/{exp}/webhooks", headers=admin_headers())
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["webhooks"]
    return listed


def deliveries(client: httpx.Client, exp: str) -> list[dict[str, Any]]:
    return [d for hook in webhooks(client, exp) for d in hook["deliveries"]]


def until(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return value


def verify(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """docs/WEBHOOKS.md's check, as a receiver writes it."""
    timestamp = headers["X-Dexp-Timestamp"]
    expected = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    fresh = abs(time.time() - int(timestamp)) < 300
    return fresh and hmac.compare_digest(
        "sha256=" + expected.hexdigest(), headers["X-Dexp-Signature"]
    )


def test_a_decision_is_delivered_once_signed(hooks: httpx.Client) -> None:
    create_experiment(hooks, id="wh", arms=ARMS, delta=0.2, eta=0.5)
    agents = enroll_agents(hooks, "wh", 3)
    with receiver() as target:
        created = add_webhook(hooks, "wh", target.url)
        assert len(created["secret"]) == 64 and created["id"].startswith("wh_")
        listed = hooks.get("/v1/experiments/wh/webhooks", headers=admin_headers()).json()
        assert "secret" not in json.dumps(listed) and created["secret"] not in json.dumps(listed)
        identify(hooks, "wh", agents)
        headers, body, _ = target.wait(1)[0]
        assert verify(created["secret"], headers, body)
        assert not verify("0" * 64, headers, body)
        document = json.loads(body)
        assert document["event"] == "identified" and headers["X-Dexp-Event"] == "identified"
        assert document["result"]["best_arm"] == {"index": 1, "name": "green"}
        public = hooks.get("/v1/experiments/wh").json()["result"]  # the one kept result
        assert {k: document["result"][k] for k in public} == public
        until(lambda: [d["status"] for d in deliveries(hooks, "wh")] == ["delivered"], "delivered")
        # a reset is an event too; the decision is not sent again
        reset = hooks.post("/v1/experiments/wh/reset", json={}, headers=admin_headers())
        assert reset.status_code == 200, reset.text
        headers, body, _ = target.wait(2)[1]
        assert json.loads(body)["event"] == "reset" and verify(created["secret"], headers, body)
        until(lambda: len(deliveries(hooks, "wh")) == 2, "two deliveries")
        assert len(target.requests) == 2


def test_a_failing_receiver_is_retried_with_back_off(hooks: httpx.Client) -> None:
    create_experiment(hooks, id="retry", arms=ARMS, delta=0.2, eta=0.5)
    agents = enroll_agents(hooks, "retry", 3)
    with receiver([500, 500]) as target:
        add_webhook(hooks, "retry", target.url)
        identify(hooks, "retry", agents)
        requests = target.wait(3)
        (delivery,) = until(
            lambda: [d for d in deliveries(hooks, "retry") if d["status"] == "delivered"],
            "the delivery delivered",
        )
        assert delivery["attempts"] == 3 and delivery["last_status"] == 200
        times = [t for _, _, t in requests]
        # back-off 0.05 s then 0.1 s (doubling): the second wait is the longer one, at least 0.1 s
        assert times[1] - times[0] >= 0.05 and times[2] - times[1] >= 0.1
        assert len({body for _, body, _ in requests}) == 1  # the same document each time
        metrics = hooks.get("/metrics").text
        errors = re.search(r'^dexp_webhook_attempts_total\{outcome="error"\} (\S+)', metrics, re.M)
        assert errors is not None and float(errors.group(1)) >= 2


def test_two_coordinators_on_one_redis_deliver_once(hooks: httpx.Client, hooks_redis: str) -> None:
    other = coordinator_settings(hooks_redis, webhook_hosts="127.0.0.1", **FAST)
    with coordinator(other), receiver() as target:
        create_experiment(hooks, id="two", arms=ARMS, delta=0.2, eta=0.5)
        agents = enroll_agents(hooks, "two", 3)
        add_webhook(hooks, "two", target.url)
        identify(hooks, "two", agents)
        target.wait(1)
        until(lambda: [d["status"] for d in deliveries(hooks, "two")] == ["delivered"], "sent")
        # both coordinators sweep every 0.05 s: after a reset's delivery (a later event), the
        # decision's was still sent once, and so was the reset's
        assert hooks.post("/v1/experiments/two/reset", json={}, headers=admin_headers()).is_success
        target.wait(2)
        until(lambda: len(deliveries(hooks, "two")) == 2, "the reset's delivery")
        until(lambda: all(d["status"] == "delivered" for d in deliveries(hooks, "two")), "sent")
        events = [json.loads(body)["event"] for _, body, _ in target.requests]
        assert sorted(events) == ["identified", "reset"], events


def test_private_targets_are_refused(hooks: httpx.Client, hooks_redis: str) -> None:
    create_experiment(hooks, id="ssrf", arms=ARMS, delta=0.2, eta=0.5)
    refused = [
        # with 127.0.0.1 listed, other private addresses are still refused
        (hooks, "http://192.168.0.1/", "192.168.0.1"),
        (hooks, "ftp://example.com/", "body.url"),
        (hooks, "http://user:pw@example.com/", "credentials"),
    ]
    # a coordinator without DEXP_WEBHOOK_HOSTS, on the same Redis: loopback is refused, by
    # address and by a name that resolves to it; so are link-local and private addresses
    with (
        coordinator(coordinator_settings(hooks_redis)) as plain,
        httpx.Client(base_url=plain.url, timeout=10.0, trust_env=False) as client,
    ):
        refused += [
            (client, "http://127.0.0.1:9/hook", "127.0.0.1"),
            (client, "http://localhost:9/hook", "localhost"),
            (client, "http://[::ffff:127.0.0.1]:9/hook", "::ffff:127.0.0.1"),
            (client, "http://169.254.169.254/latest/meta-data", "169.254.169.254"),
            (client, "http://10.1.2.3/", "10.1.2.3"),
        ]
        for http, url, why in refused:
            response = http.post(
                "/v1/experiments/ssrf/webhooks", json={"url": url}, headers=admin_headers()
            )
            assert response.status_code == 422, (url, response.text)
            assert why in response.json()["detail"], (url, response.text)
    assert webhooks(hooks, "ssrf") == []
    # no more than DEXP_MAX_WEBHOOKS (5); none without the admin token
    for _ in range(5):
        add_webhook(hooks, "ssrf", "http://127.0.0.1:9/hook")
    path, body = "/v1/experiments/ssrf/webhooks", {"url": "http://127.0.0.1:9/hook"}
    assert hooks.post(path, json=body, headers=admin_headers()).status_code == 409
    assert hooks.post(path, json=body).status_code == 401
    assert len(webhooks(hooks, "ssrf")) == 5


def test_a_hung_receiver_does_not_delay_votes(hooks: httpx.Client) -> None:
    create_experiment(hooks, id="slow", arms=ARMS, delta=0.2, eta=0.5)
    agents = enroll_agents(hooks, "slow", 6)
    with receiver() as target:
        target.hang.set()
        add_webhook(hooks, "slow", target.url)
        identify(hooks, "slow", agents[:3])
        target.wait(1)  # the receiver holds the coordinator's POST open from now on
        # a reset opens epoch 1; its votes answer while the decision's POST is still open
        assert hooks.post("/v1/experiments/slow/reset", json={}, headers=admin_headers()).is_success
        for agent in agents[3:]:
            response = hooks.post(
                "/v1/experiments/slow/votes", json={"arm": 0, "epoch": 1}, headers=agent.headers
            )
            assert response.status_code == 200, response.text
        # the first attempt has no outcome yet: it ends after the receiver answers, or after the
        # POST's timeout (5 s) with an error; a vote that waited for it would have seen it end
        (decision,) = [d for d in deliveries(hooks, "slow") if d["event"] == "identified"]
        assert decision["status"] == "pending" and decision["attempts"] == 1, decision
        assert decision["last_error"] is None and decision["last_status"] is None, decision
        target.hang.clear()
        until(
            lambda: [d["status"] for d in deliveries(hooks, "slow")] == ["delivered"] * 2,
            "both delivered once the receiver answers",
        )


def test_a_pending_retry_outlives_its_coordinator(hooks: httpx.Client, hooks_redis: str) -> None:
    """The coordinator that failed the first attempt stops before its retry is due; the retry,
    in Redis, is sent by the coordinator that runs."""
    slow = coordinator_settings(
        hooks_redis, webhook_hosts="127.0.0.1", **{**FAST, "webhook_backoff_seconds": 1.0}
    )
    with receiver([500]) as target:
        with (
            coordinator(slow) as first,
            httpx.Client(base_url=first.url, timeout=10.0, trust_env=False) as http,
        ):
            create_experiment(http, id="restart", arms=ARMS, delta=0.2, eta=0.5)
            agents = enroll_agents(http, "restart", 3)
            add_webhook(http, "restart", target.url)
            identify(http, "restart", agents)
            target.wait(1)
            until(lambda: deliveries(http, "restart")[0]["last_status"] == 500, "the 500 kept")
        (delivery,) = until(
            lambda: [d for d in deliveries(hooks, "restart") if d["status"] == "delivered"],
            "the retry delivered by the other coordinator",
        )
        assert delivery["attempts"] == 2 and len(target.wait(2)) == 2
