"""The Python device SDK in an LDP experiment (agent/device.py's PrivateDeviceAgent, the logic in
agent/private_device.py) against a real coordinator over real HTTP and real Redis: devices, each
with a fresh state file, draw an arm from the published allocation, report once and identify the
best arm; a restarted device with the same state file re-sends its pending report (a lost reply)
as a duplicate and never sends beyond B; a spent device sends nothing. Plus the pure part on its
own: the draw, the reward checks, and what a 409 leaves on record."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from agent.device import DeviceAgent, PrivateDeviceAgent
from agent.private_device import PrivateProtocol, draw_arm, report_reward
from agent.protocol import Message, Transport, client_transport, run
from agent.state import AgentRecord
from clients.coordinator import CoordinatorError
from common import redis_keys as keys
from common.errors import ParameterError

from .helpers import ENROLLMENT_SECRET, admin_headers, coordinator, coordinator_settings

ARMS = ["A", "B", "C"]
MEANS = (0.8, 0.5, 0.3)


class LostReply(ConnectionError):
    """The request reached the coordinator, its reply did not reach the device."""


class Recording:
    """A transport that sends through `inner` and records each message; `drop` loses the next
    reply after the request was served."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.sent: list[Message] = []
        self.drop = False

    def __call__(self, message: Message) -> Any:
        self.sent.append(message)
        reply = self.inner(message)
        if self.drop:
            self.drop = False
            raise LostReply("the reply was lost")
        return reply


def private(agent: DeviceAgent) -> PrivateDeviceAgent:
    assert isinstance(agent, PrivateDeviceAgent)
    return agent


def counted(store: redis.Redis, exp: str) -> tuple[int, dict[str, int]]:
    """The reports Redis counted in all, and per agent (report_seq)."""
    total = sum(int(v) for v in store.hvals(keys.report_counts(exp)))
    per_agent = {k.decode(): int(v) for k, v in store.hgetall(keys.report_seq(exp)).items()}
    return total, per_agent


# -- against the coordinator ----------------------------------------------------------------------
def test_devices_each_reporting_once_identify_the_best_arm(
    redis_url: str, clean_redis: str, tmp_path: Path
) -> None:
    """Device after device (each a fresh DeviceAgent and state file, open enrollment), each
    drawing its arm from the allocation, a Bernoulli reward of mean 0.8, 0.5, 0.3 and one report,
    until the coordinator identifies an arm: arm 0, intervals that hold, one report per device
    (Redis's own count), and state files that hold the report count and never a reward. A device
    enrolled afterwards plays the identified arm and sends nothing."""
    settings = coordinator_settings(
        redis_url, publish_batch=5, enroll_rate=0, max_agents_per_client=0
    )
    rng = random.Random(7)
    exp = "ldp-devices"
    store = redis.Redis.from_url(clean_redis)
    with coordinator(settings) as server, httpx.Client(base_url=server.url) as http:
        body = {"id": exp, "arms": ARMS, "algorithm": "ldp", "dp_epsilon": 2.0}
        body |= {"epsilon": 0.25}  # arm 1 (0.5) is 0.3 below the best: only arm 0 is good
        created = http.post(
            "/v1/experiments", json={**body, "rewards": "bernoulli"}, headers=admin_headers()
        )
        assert created.status_code == 201, created.text
        devices = 0
        status = "exploring"
        while status == "exploring":
            assert devices < 3000, "no decision after 3,000 devices"
            agent = private(
                DeviceAgent.enroll(
                    server.url,
                    exp,
                    ENROLLMENT_SECRET,
                    tmp_path / f"device-{devices}.json",
                    seed=devices,
                    follow=False,
                )
            )
            try:
                assert not agent.resumed and agent.sent == 0 and agent.reports_left == 1
                (arm,) = agent.choose()
                assert sum(agent.allocation) == pytest.approx(1.0)
                reported = agent.observe([arm], [float(rng.random() < MEANS[arm])])
                status = agent.status
                assert agent.done  # its one report sent, or the experiment decided
                if reported:  # else decided before its report, or between its read and it
                    assert reported == [arm] and agent.sent == 1 and agent.reports_left == 0
            finally:
                agent.close()
            devices += 1
        doc = http.get(f"/v1/experiments/{exp}").json()
        assert doc["status"] == "identified" and doc["remaining_arms"] == [0]
        for estimate, mean in zip(doc["estimates"], MEANS, strict=True):
            assert estimate["ci"][0] <= mean <= estimate["ci"][1], estimate
        total, per_agent = counted(store, exp)
        assert total == len(per_agent) <= devices and set(per_agent.values()) == {1}
        for path in tmp_path.glob("device-*.json"):
            saved = json.loads(path.read_text())
            reports = saved.get("private", {"sent": 0, "pending": None})  # absent: none sent
            assert reports["pending"] is None and reports["sent"] <= 1
            assert not {"reward", "rewards", "bit"} & set(saved)

        late = private(DeviceAgent.enroll(server.url, exp, ENROLLMENT_SECRET, seed=1, follow=False))
        try:
            assert late.done and late.status == "identified"
            assert late.choose() == [0] and late.observe([0], [1.0]) == []
            assert late.sent == 0 and late.estimates == doc["estimates"] and late.lift
        finally:
            late.close()
        assert counted(store, exp)[0] == total  # nothing more counted
    print(f"{devices} devices to identification")


@pytest.fixture
def two_reports(client: httpx.Client) -> Iterator[str]:
    """An LDP experiment whose devices send up to B = 2 reports, and a ticket for one device."""
    body = {"id": "ldp-b2", "arms": ARMS, "algorithm": "ldp", "reports_per_agent": 2}
    created = client.post("/v1/experiments", json=body, headers=admin_headers())
    assert created.status_code == 201, created.text
    issued = client.post(
        "/v1/experiments/ldp-b2/tickets", json={"count": 1}, headers=admin_headers()
    )
    assert issued.status_code == 201, issued.text
    yield issued.json()["tickets"][0]


def test_a_restarted_device_resends_its_pending_report_and_never_sends_beyond_b(
    coordinator_url: str, store: redis.Redis, two_reports: str, tmp_path: Path
) -> None:
    exp, state_file = "ldp-b2", tmp_path / "device.json"
    first = private(DeviceAgent.enroll(coordinator_url, exp, two_reports, state_file, seed=3))
    transport = Recording(client_transport(first.client))
    first._transport = transport
    try:
        (arm,) = first.choose()
        transport.drop = True  # the report arrives, its reply is lost
        with pytest.raises(LostReply):
            first.observe([arm], [0.7])
        assert first.sent == 0 and first.reports_left == 1  # one pending
    finally:
        first.close()
    (lost,) = transport.sent
    assert lost.kind == "private_report" and lost.body is not None and lost.body["seq"] == 1
    saved = json.loads(state_file.read_text())
    pending = [lost.body["arm"], lost.body["bit"], 1]
    assert saved["private"] == {"sent": 0, "pending": pending}  # the bit, never the reward
    assert counted(store, exp) == (1, {first.agent_id: 1})  # it did arrive

    # restarted: the same report again (same arm, bit and number), a duplicate; then report 2
    again = private(DeviceAgent.enroll(coordinator_url, exp, None, state_file, seed=3))
    try:
        assert again.resumed and again.agent_id == first.agent_id
        assert again.protocol.outcomes == {"duplicate": 1}
        assert again.sent == 1 and again.reports_left == 1 and not again.done
        assert counted(store, exp) == (1, {first.agent_id: 1})  # nothing changed
        recording = Recording(client_transport(again.client))
        again._transport = recording
        (arm,) = again.choose()
        assert again.observe([arm], [0.2]) == [arm]
        assert again.sent == 2 and again.reports_left == 0 and again.done
        for reward in (1.0, 0.0):  # spent: nothing leaves any more
            (arm,) = again.choose()
            assert again.observe([arm], [reward]) == []
        assert [m.body["seq"] for m in recording.sent if m.body] == [2]
    finally:
        again.close()
    assert counted(store, exp) == (2, {first.agent_id: 2})
    assert json.loads(state_file.read_text())["private"] == {"sent": 2, "pending": None}

    third = private(DeviceAgent.enroll(coordinator_url, exp, None, state_file, seed=3))
    try:
        recording = Recording(client_transport(third.client))
        third._transport = recording
        assert third.resumed and third.done and third.sent == 2
        (arm,) = third.choose()
        assert arm in (0, 1, 2) and third.observe([arm], [0.5]) == []
        assert recording.sent == []
    finally:
        third.close()
    assert counted(store, exp) == (2, {first.agent_id: 2})


def test_a_report_whose_reply_was_lost_goes_again_at_the_next_observe(
    coordinator_url: str, store: redis.Redis, two_reports: str
) -> None:
    """In the same run: the next activation sends the pending report again, unchanged (a
    duplicate), instead of privatizing its own reward; the one after sends report 2."""
    agent = private(DeviceAgent.enroll(coordinator_url, "ldp-b2", two_reports, seed=5))
    transport = Recording(client_transport(agent.client))
    agent._transport = transport
    try:
        (arm,) = agent.choose()
        transport.drop = True
        with pytest.raises(LostReply):
            agent.observe([arm], [0.9])
        (other,) = agent.choose()
        assert agent.observe([other], [0.1]) == [arm]  # the pending one, not this activation's
        assert agent.protocol.outcomes == {"duplicate": 1} and agent.sent == 1
        (last,) = agent.choose()
        assert agent.observe([last], [0.4]) == [last] and agent.sent == 2 and agent.done
    finally:
        agent.close()
    bodies = [m.body for m in transport.sent]
    assert bodies[0] == bodies[1] and [b["seq"] for b in bodies if b] == [1, 1, 2]
    assert counted(store, "ldp-b2") == (2, {agent.agent_id: 2})


def test_a_reward_the_experiment_does_not_take_is_refused_and_nothing_leaves(
    coordinator_url: str, store: redis.Redis, two_reports: str
) -> None:
    agent = private(DeviceAgent.enroll(coordinator_url, "ldp-b2", two_reports, seed=4))
    try:
        (arm,) = agent.choose()
        for bad in (1.5, -0.1, float("nan")):
            with pytest.raises(ParameterError):
                agent.observe([arm], [bad])
        with pytest.raises(ParameterError):
            agent.observe([7], [0.5])
        assert agent.sent == 0 and agent.reports_left == 2
    finally:
        agent.close()
    assert counted(store, "ldp-b2") == (0, {})


# -- the pure part --------------------------------------------------------------------------------
def document(**overrides: Any) -> dict[str, Any]:
    return {
        "arms": ARMS,
        "dp_epsilon": 1.0,
        "reports_per_agent": 1,
        "rewards": "bounded",
        "allocation": [0.45, 0.45, 0.1],
        "remaining_arms": [0, 1, 2],
        "status": "exploring",
        "estimates": None,
        "lift": None,
        **overrides,
    }


def test_draws_follow_the_allocation_and_never_an_arm_out() -> None:
    rng = np.random.default_rng(11)
    draws = [draw_arm([0.5, 0.0, 0.3, 0.2], float(u)) for u in rng.random(20_000)]
    counts = np.bincount(draws, minlength=4) / len(draws)
    assert counts[1] == 0.0
    assert counts == pytest.approx([0.5, 0.0, 0.3, 0.2], abs=0.015)
    assert draw_arm([0.2, 0.8, 0.0], 0.0) == 0 and draw_arm([0.2, 0.8, 0.0], 0.999999) == 1
    protocol = PrivateProtocol(
        "x", AgentRecord("a", "t"), lambda: None, document(remaining_arms=[1, 2])
    )
    assert {protocol.choose(float(u)) for u in rng.random(500)} == {1, 2}  # arm 0 is out
    protocol.update(document(remaining_arms=[1], status="identified"))
    assert protocol.choose(0.0) == 1 == protocol.choose(0.99) and protocol.decided


def test_rewards_are_checked_and_clipped_to_a_declared_range() -> None:
    assert report_reward(0.25, "bounded", None) == 0.25
    assert report_reward(7.0, "bounded", (-1.0, 3.0)) == 1.0  # clipped, then mapped
    assert report_reward(1.0, "bounded", (-1.0, 3.0)) == 0.5
    for bad, family in ((0.5, "bernoulli"), (1.2, "bounded"), (-0.1, "bounded")):
        with pytest.raises(ParameterError):
            report_reward(bad, family, None)


def test_a_refused_report_is_dropped_and_its_number_used() -> None:
    """A 409 (decided, spent, out of order) can never count: the report is dropped, and its number
    stays used, so that the device never releases more than B bits whatever the answers."""
    saves: list[dict[str, Any]] = []
    record = AgentRecord("a", "t")
    protocol = PrivateProtocol(
        "x", record, lambda: saves.append(record.to_json()), document(reports_per_agent=2)
    )

    def refuse(message: Message) -> Any:
        raise CoordinatorError(409, "experiment 'x' is decided: no report counts any more")

    report = protocol.decide(0, 0.9, 0.5, 0.1)
    assert report is not None and report.seq == 1 and saves[-1]["private"]["pending"]
    assert protocol.decide(0, 0.9, 0.5, 0.1) is None  # one pending at a time
    assert run(protocol.deliver("decided"), refuse) == "refused"
    assert record.private_pending is None and protocol.sent == 1 and protocol.decided
    assert protocol.decide(1, 0.3, 0.5, 0.1) is None  # decided: nothing more
    assert saves[-1]["private"] == {"sent": 1, "pending": None}

    def forbidden(message: Message) -> Any:
        raise CoordinatorError(403, "not an LDP experiment")

    other = PrivateProtocol("x", AgentRecord("b", "t"), lambda: None, document())
    assert other.decide(2, 0.0, 0.5, 0.1) is not None
    with pytest.raises(CoordinatorError):
        run(other.deliver("decided"), forbidden)
    assert other.record.private_pending is not None  # kept on record: not an answer about it
