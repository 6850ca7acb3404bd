"""The JavaScript SDK's LDP agent (sdk/js/src/private.ts) under Node against a real coordinator:
a report whose reply was lost is saved as pending, sent again unchanged at the next start (a
duplicate: Redis counts it once), the device never sends beyond B, and its state file is the
Python SDK's (agent/private_device.py resumes it)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import redis

from agent.device import DeviceAgent, PrivateDeviceAgent
from common import redis_keys as keys

from .helpers import create_experiment
from .test_js_sdk import Driver, driver, tickets  # noqa: F401 - the driver fixture

EXPERIMENT = "ldp-js"
REWARDS = [1.0, 0.0, 1.0]


def test_a_node_ldp_agent_resends_a_lost_reply_s_report_and_never_sends_beyond_b(
    coordinator_url: str,
    client: httpx.Client,
    store: redis.Redis,
    driver: Driver,  # noqa: F811
    tmp_path: Path,
) -> None:
    create_experiment(
        client, id=EXPERIMENT, arms=["A", "B", "C"], algorithm="ldp", reports_per_agent=2
    )
    state = tmp_path / "agent.json"
    (ticket,) = tickets(client, EXPERIMENT, 1)
    options = {"coordinator": coordinator_url, "experiment": EXPERIMENT, "follow": False}
    first = driver(
        "enroll", name="a", options=options | {"stateFile": str(state), "ticket": ticket}
    )
    assert (first["sent"], first["reportsLeft"], first["resumed"]) == (0, 2, False), first
    driver("lose", name="a")
    lost = driver("play", name="a", rewards=REWARDS, activations=1)
    assert lost.get("message") == "the reply was lost", lost
    driver("close", name="a")  # (closed with the report pending: the next start sends it)
    saved = json.loads(state.read_text())
    assert saved["private"]["sent"] == 0 and saved["private"]["pending"][2] == 1
    assert not {"local", "rewards"} & set(saved)
    agent = first["agentId"]
    seqs = keys.report_seq(EXPERIMENT)
    assert store.hgetall(seqs) == {agent.encode(): b"1"}  # it arrived

    again = driver("enroll", name="b", options=options | {"stateFile": str(state)})
    assert again["resumed"] and again["agentId"] == agent
    assert again["outcomes"] == {"duplicate": 1} and again["sent"] == 1, again
    assert store.hgetall(seqs) == {agent.encode(): b"1"}  # nothing changed
    played = driver("play", name="b", rewards=REWARDS, activations=3)
    assert (played["sent"], played["reportsLeft"], played["settled"]) == (2, 0, True), played
    assert played["outcomes"] == {"duplicate": 1, "counted": 1}
    assert len(driver("choose", name="b")["arms"]) == 1  # still an arm to show
    driver("close", name="b")
    assert store.hgetall(seqs) == {agent.encode(): b"2"}
    assert sum(int(n) for n in store.hvals(keys.report_counts(EXPERIMENT))) == 2
    assert json.loads(state.read_text())["private"] == {"sent": 2, "pending": None}

    # in one run: the activation after a lost reply sends the pending report again, not its own
    (second,) = tickets(client, EXPERIMENT, 1)
    other = driver("enroll", name="c", options=options | {"ticket": second})
    driver("lose", name="c")
    assert "message" in driver("play", name="c", rewards=REWARDS, activations=1)
    again_c = driver("play", name="c", rewards=REWARDS, activations=1)
    assert again_c["outcomes"] == {"duplicate": 1} and again_c["sent"] == 1, again_c
    driver("close", name="c")
    assert store.hget(seqs, other["agentId"]) == b"1"

    # the Python SDK resumes the same device from the page's file, and sends nothing more
    python = DeviceAgent.enroll(coordinator_url, EXPERIMENT, None, state, follow=False)
    try:
        assert isinstance(python, PrivateDeviceAgent) and python.resumed
        assert python.agent_id == agent and python.done and python.sent == 2
        (arm,) = python.choose()
        assert python.observe([arm], [1.0]) == []
    finally:
        python.close()
    assert store.hget(seqs, agent) == b"2"
