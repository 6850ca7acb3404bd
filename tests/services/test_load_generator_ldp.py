"""The load generator and real agent processes (`python -m agent`) play an ldp experiment with
"one visit per user" traffic: each simulated user is activated at most B times (the default for
ldp), drawn fresh from a skewed activation distribution, and sends one private report per visit;
the coordinator identifies the right arm, and its own counts show that no user reported more than
B times; and a restarted agent sends the report on its record, never another."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from agent.library import Agent, GlobalView
from agent.state import AgentRecord
from clients.coordinator import CoordinatorClient
from common import redis_keys as keys
from load_generator.generator import LoadGenerator, exit_code, format_summary
from load_generator.settings import LoadSettings

from .helpers import ENROLLMENT_SECRET, coordinator, coordinator_settings, create_experiment

USERS = 300


@pytest.fixture
def ldp_url(redis_url: str, clean_redis: str) -> Iterator[str]:
    """A coordinator that enrolls a few hundred agents from one address at once."""
    settings = coordinator_settings(redis_url, enroll_rate=0, max_agents_per_client=0)
    with coordinator(settings) as server:
        yield server.url


def start_agents(url: str, redis_url: str, exp: str, n: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DEXP_COORDINATOR_URL": url,
        "DEXP_REDIS_URL": redis_url,
        "DEXP_EXPERIMENT": exp,
        "DEXP_ENROLLMENT_SECRET": ENROLLMENT_SECRET,
        "AGENTS_PER_REPLICA": str(n),
        "DEXP_SEED": "11",
        "DEXP_ALLOCATION_SECONDS": "0.2",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "agent"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )


def wait_for_agents(http: httpx.Client, exp: str, n: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60  # a safety net: a loaded machine starts them slowly
    while http.get(f"/v1/experiments/{exp}").json()["agents"] < n:
        assert process.poll() is None, "the agent process ended"
        assert time.monotonic() < deadline, "the agents did not enroll"
        time.sleep(0.05)


@pytest.mark.parametrize("reports_per_agent", [1, 2])
def test_one_visit_per_user_identifies_the_best_arm_within_b_reports_each(
    ldp_url: str, clean_redis: str, reports_per_agent: int
) -> None:
    exp = "crowd"
    with httpx.Client(base_url=ldp_url, timeout=10.0, trust_env=False) as http:
        create_experiment(
            http,
            id=exp,
            arms=["A", "B", "C"],
            algorithm="ldp",
            dp_epsilon=2.0,
            reports_per_agent=reports_per_agent,
            epsilon=0.3,
            delta=0.1,
            rewards="bernoulli",
        )
        process = start_agents(ldp_url, clean_redis, exp, USERS)
        try:
            wait_for_agents(http, exp, USERS, process)
            settings = LoadSettings(
                coordinator_url=ldp_url,
                redis_url=clean_redis,
                experiment=exp,
                problem="",
                means="0.9,0.5,0.1",
                activation="zipf:1.2",  # skewed: a few users would come back again and again
                seed=3,
                settle_seconds=0,
                agent_wait_seconds=20,
                max_seconds=45,
                batch=20,
                max_backlog=200,
                stall_seconds=15,
            )
            out = io.StringIO()
            with LoadGenerator(settings, out=out) as generator:
                summary = generator.run()
            document: dict[str, Any] = http.get(f"/v1/experiments/{exp}").json()
        finally:
            process.kill()
            process.wait()
    text = format_summary(summary, as_json=False)
    assert summary.status == "identified", text
    assert summary.identified_arm == 0 and summary.correct and exit_code(summary) == 0
    assert summary.visits_per_user == reports_per_agent
    # one visit, one report: never more activations than users x B
    assert summary.activations_delivered <= USERS * reports_per_agent
    # the coordinator's own counts: each user's reports, and the total
    store = redis.Redis.from_url(clean_redis)
    try:
        per_user = [int(n) for n in store.hvals(keys.report_seq(exp))]
    finally:
        store.close()
    assert per_user and max(per_user) <= reports_per_agent
    assert sum(per_user) >= document["reports_total"] > 0  # published <= counted
    assert document["reports_total"] <= summary.activations_delivered
    # the summary carries the estimates and the lift, with intervals that hold the true means
    assert summary.estimates == document["estimates"] and summary.lift == document["lift"]
    for estimate, mean in zip(summary.estimates, (0.9, 0.5, 0.1), strict=True):
        assert estimate["ci"][0] <= mean <= estimate["ci"][1], estimate
    assert [item["vs"] for item in summary.lift or []] == [1, 2]
    assert "estimates" in text and "lift              A (index 0) - arm" in text


def test_a_restarted_agent_sends_its_report_on_record_and_never_another(
    client: httpx.Client, coordinator_url: str, clean_redis: str
) -> None:
    """An agent whose process died between making a report and hearing the coordinator's answer:
    restarted from its record, it sends that same report (a duplicate if it had arrived), then
    makes no more than B = 2 in all (later visits play nothing)."""
    create_experiment(client, id="r", arms=["A", "B"], algorithm="ldp", reports_per_agent=2)
    coordinator_client = CoordinatorClient(coordinator_url)
    try:
        view = GlobalView.fetch(coordinator_client, "r")
        saved: list[dict[str, Any]] = []
        first = Agent.enroll(coordinator_client, view, ENROLLMENT_SECRET, np.random.default_rng(1))
        first.persist = lambda: saved.append(first.record.to_json())
        (arm,) = first.choose()
        first.observe([arm], [1.0])
        assert first.record.private_sent == 1 and first.record.private_pending is None
        # the record as written just before that report was sent: made, not answered
        died = AgentRecord.from_json(saved[0])
        assert died.private_pending is not None and died.private_sent == 0
        restarted = Agent(
            coordinator_client,
            view,
            died.agent_id,
            died.token,
            np.random.default_rng(2),
            record=died,
        )
        restarted.resend_pending()
        assert died.private_sent == 1 and died.private_pending is None
        for _ in range(5):  # five more visits: one more report, then B is spent
            arms = restarted.choose()
            if arms:
                restarted.observe(arms, [0.0])
        assert died.private_sent == 2 and restarted.choose() == []
    finally:
        coordinator_client.close()
    store = redis.Redis.from_url(clean_redis)
    try:
        assert int(store.hget(keys.report_seq("r"), died.agent_id) or 0) == 2
    finally:
        store.close()
    doc = client.get("/v1/experiments/r").json()
    assert sum(doc["reports"]) == 2  # the copy sent after the restart was a duplicate
