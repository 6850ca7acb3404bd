"""The JavaScript SDK (sdk/js/dist/agent.js) under Node against a real coordinator (real Redis,
real HTTP): agents enrolled with tickets reach `identified` on the best arm, following the global
set over the coordinator's event stream; stopped in the middle and started again without tickets,
they are the same agents (their state files), enroll nobody, and finish the run.

tests/test_js_agreement.py proves the local algorithm step by step; this file proves the protocol
(enroll, the shared event stream, votes, the state file, resuming) end to end."""

from __future__ import annotations

import json
import selectors
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from agent.device import DeviceAgent
from common.subroutines.fixed_budget import samples_per_arm
from tests.prerequisites import missing

from .helpers import (
    ENROLLMENT_SECRET,
    admin_headers,
    coordinator,
    coordinator_settings,
    create_experiment,
    free_port,
)
from .test_device import FAILOVER_KEYS, copy_keys, reset_after_a_failover, restore_keys

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk" / "js"
BUNDLE = SDK / "dist" / "agent.js"
RUNNER = ROOT / "tests" / "js" / "node_agents.mjs"
DRIVER = ROOT / "tests" / "js" / "device_driver.mjs"
RATES = [0.2, 0.5, 0.8]  # Bernoulli means: arm 2 is the best, by 0.3
AGENTS = 8
SEED = 26  # the rewards, the activations and the agents' draws (seeded here, crypto in a page)
STOP = 3  # messages: once this many are sent (an observe may send two), the first run closes


def node() -> str:
    path = shutil.which("node")
    if path is None:
        missing("node (Debian's nodejs) runs the JavaScript agent")
    return path


def run_agents(job: dict[str, Any]) -> dict[str, Any]:
    """The runner under node; its JSON report (the process must end by itself)."""
    done = subprocess.run(
        [node(), str(RUNNER)],
        input=json.dumps({"sdk": str(BUNDLE), **job}),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def tickets(client: httpx.Client, experiment: str, count: int) -> list[str]:
    reply = client.post(
        f"/v1/experiments/{experiment}/tickets", json={"count": count}, headers=admin_headers()
    )
    assert reply.status_code == 201, reply.text
    issued: list[str] = reply.json()["tickets"]
    return issued


def test_version_is_package_json_s() -> None:
    """The module's VERSION is the package's: the served file and the docs quote it."""
    version = json.loads((SDK / "package.json").read_text())["version"]
    report = subprocess.run(
        [
            node(),
            "--input-type=module",
            "-e",
            f"import {{VERSION}} from '{BUNDLE.as_uri()}'; process.stdout.write(VERSION)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert report.returncode == 0, report.stderr
    assert report.stdout == version


# (algorithm, subroutine, what else the experiment says): every mode an agent runs, M = 3 or 4
MODES = {
    "de-ser3": {"subroutine": "ser3", "eta": 0.5, "delta": 0.1},
    "de-stitched-lucb": {"subroutine": "stitched-lucb", "eta": 0.5, "delta": 0.1},
    "dser4": {"subroutine": "ser4", "phi": 0.002, "eta": 0.5, "delta": 0.1},
    "ce": {"algorithm": "ce", "xi": 0.05, "eta": 0.5, "delta": 0.1},
    "dp-mase": {"algorithm": "dp-mase", "beta": 0.5, "dp_epsilon": 1.0, "delta": 0.1},
    # CDE: every agent plays each arm T = 34 times, then reports once; the first arm with M = 4
    # reports of the 8 is the answer (certified failure for N = 8 in the experiment's document)
    "cde": {"algorithm": "cde", "privacy": 0.8, "eta": 0.1, "delta": 0.05, "agents": 8},
}


@pytest.mark.parametrize("mode", list(MODES))
def test_node_agents_identify_the_best_arm_and_resume_from_their_files(
    mode: str, coordinator_url: str, client: httpx.Client, tmp_path: Path
) -> None:
    """Eight Node agents play three Bernoulli arms (0.2, 0.5, 0.8). Stopped once three messages
    (votes, or CDE's reports) are sent, the run under way, and run again without tickets, each
    resumes its agent (same id, `resumed`), the coordinator still counts 8 agents, and the run
    ends identified on arm 2, which every agent learnt from the coordinator. The agents of a
    process share one event stream."""
    experiment = f"js-{mode}"
    epsilon = 0.3 if mode == "cde" else 0.1
    created = create_experiment(
        client, id=experiment, arms=["low", "mid", "high"], epsilon=epsilon, **MODES[mode]
    )
    assert created["threshold"] in (3, 4, 5), created["threshold"]
    job = {"coordinator": coordinator_url, "experiment": experiment, "dir": str(tmp_path)}
    job |= {"agents": AGENTS, "rates": RATES, "seed": SEED}

    first = run_agents(
        job | {"tickets": tickets(client, experiment, AGENTS), "stopAfterVotes": STOP}
    )
    assert not any(agent["resumed"] for agent in first["agents"])
    sent = sum(agent["votesSent"] + agent["reportsSent"] for agent in first["agents"])
    assert sent >= STOP  # stopped mid-run
    middle = client.get(f"/v1/experiments/{experiment}").json()
    assert (middle["agents"], middle["status"]) == (AGENTS, "exploring")
    kept = [json.loads((tmp_path / f"agent-{i}.json").read_text()) for i in range(AGENTS)]

    second = run_agents(job | {"tickets": None, "stopAfterVotes": None})
    ids = [agent["agentId"] for agent in first["agents"]]
    assert [agent["agentId"] for agent in second["agents"]] == ids
    assert all(agent["resumed"] for agent in second["agents"])
    assert {agent["status"] for agent in second["agents"]} == {"identified"}
    assert {agent["bestArm"] for agent in second["agents"]} == {2}
    state = client.get(f"/v1/experiments/{experiment}").json()
    assert state["agents"] == AGENTS  # no new enrollment
    assert (state["status"], state["remaining_arms"]) == ("identified", [2])
    assert second["follower"]["streams"] >= 1 and second["follower"]["subscribers"] == AGENTS
    for i, saved in enumerate(kept):  # what a device keeps: its votes and local statistics
        assert saved["agent_id"] == ids[i] and saved["experiment"] == experiment
        assert oct((tmp_path / f"agent-{i}.json").stat().st_mode & 0o777) == "0o600"
        assert saved["pending"] == []  # every vote decided was acknowledged before the close
        assert saved["local"]["sub"], saved  # the local statistics, resumed by the second run
    if mode == "cde":  # one report per agent, whatever the restarts
        assert sum(agent["reportsSent"] for agent in first["agents"] + second["agents"]) <= AGENTS
    elif mode != "dser4":  # (DSER4's resets start epochs in which an agent votes again)
        voted = [{arm for arm, _, _ in saved["acknowledged"]} for saved in kept]
        again = [agent["votesSent"] for agent in second["agents"]]
        assert all(n <= 2 - len(v) for n, v in zip(again, voted, strict=True))  # never twice
    if mode == "ce":
        assert sum(agent["settledSent"] for agent in second["agents"]) >= 1
    if mode == "dser4":  # an agent's SER4 coin reset the experiment: a new epoch for everyone
        assert state["epoch"] >= 1 and {a["epoch"] for a in second["agents"]} == {state["epoch"]}


# -- one agent at a time, the test acting between its steps (tests/js/device_driver.mjs) ---------
class Driver:
    """A node process holding agents, one JSON command per line; each answer is waited for with a
    generous deadline (a hung SDK fails the test instead of hanging it)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [node(), str(DRIVER), str(BUNDLE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self.selector.register(self.process.stdout, selectors.EVENT_READ)

    def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        if not self.selector.select(timeout=120):
            raise AssertionError(f"{op}: no answer from the SDK in 120 s")
        line = self.process.stdout.readline()
        assert line, self.process.stderr.read() if self.process.stderr else "node ended"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> str:
        try:
            _, err = self.process.communicate(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.communicate()
        self.selector.close()
        return err


@pytest.fixture
def driver() -> Iterator[Driver]:
    running = Driver()
    try:
        yield running
    finally:
        running.close()


EXPERIMENT = "device"  # tests/services/test_device.py's: three arms, M = 4
A_PAYS = [1.0, 0.0, 0.0]  # arm A pays 1, the others 0: an agent votes B and C out, then settles


@pytest.fixture
def device_tickets(client: httpx.Client) -> Iterator[str]:
    body = {"id": EXPERIMENT, "arms": ["A", "B", "C"], "eta": 0.5, "delta": 0.1, "epsilon": 0.1}
    reply = client.post("/v1/experiments", json=body, headers=admin_headers())
    assert reply.status_code == 201, reply.text
    return iter(tickets(client, EXPERIMENT, 5))


def options(url: str, state: Path | None, ticket: str | None, **more: Any) -> dict[str, Any]:
    chosen: dict[str, Any] = {"coordinator": url, "experiment": EXPERIMENT, "pollMs": 200}
    if state is not None:
        chosen["stateFile"] = str(state)
    if ticket is not None:
        chosen["ticket"] = ticket
    return chosen | more


def public(client: httpx.Client) -> dict[str, Any]:
    state: dict[str, Any] = client.get(f"/v1/experiments/{EXPERIMENT}").json()
    return state


def test_a_restarted_node_agent_is_the_same_agent_and_never_votes_twice(
    coordinator_url: str,
    client: httpx.Client,
    device_tickets: Iterator[str],
    driver: Driver,
    tmp_path: Path,
) -> None:
    """As the Python device's test: settled after voting B and C out, closed, started again
    without a ticket from its file, it is the same agent, never decides on B or C again, and the
    coordinator saw two votes, none twice, from one agent."""
    state = tmp_path / "agent.json"
    first = driver(
        "enroll", name="a", options=options(coordinator_url, state, next(device_tickets))
    )
    played = driver("play", name="a", rewards=A_PAYS, until="settled")
    assert played["settled"] and played["votesSent"] == 2
    driver("close", name="a")
    saved = json.loads(state.read_text())
    assert sorted(arm for arm, _, _ in saved["acknowledged"]) == [1, 2] and saved["pending"] == []
    assert state.stat().st_mode & 0o077 == 0  # a bearer token: private

    again = driver("enroll", name="b", options=options(coordinator_url, state, None))
    assert again.get("resumed"), again
    assert again["resumed"] and again["agentId"] == first["agentId"]
    replay = driver("play", name="b", rewards=A_PAYS, activations=5)  # settled: it waits
    assert replay["votesSent"] == 0 and replay["settled"]
    assert (public(client)["agents"], public(client)["messages"]) == (1, 2)
    assert public(client)["ignored_messages"] == 0 and public(client)["votes"] == [0, 1, 1]


def test_a_vote_decided_but_not_sent_is_sent_at_the_next_start(
    coordinator_url: str,
    client: httpx.Client,
    device_tickets: Iterator[str],
    driver: Driver,
    tmp_path: Path,
) -> None:
    """A page closed between deciding a vote and sending it (the vote is on record as pending):
    the next start sends it before anything else, once, and records its acknowledgement."""
    state = tmp_path / "agent.json"
    driver("enroll", name="a", options=options(coordinator_url, state, next(device_tickets)))
    driver("close", name="a")
    saved = json.loads(state.read_text())
    started = public(client)["epoch_started_at"]
    saved |= {"pending": [[1, 0]], "epoch_starts": {"0": started}}
    state.write_text(json.dumps(saved))

    again = driver("enroll", name="b", options=options(coordinator_url, state, None))
    assert again["resumed"] and again["votesResent"] == 1, again
    assert public(client)["votes"] == [0, 1, 0]
    driver("flush", name="b")  # its last writes saved
    kept = json.loads(state.read_text())
    assert kept["pending"] == [] and kept["acknowledged"] == [[1, 0, "counted"]]


def test_a_cde_report_drawn_but_not_answered_is_sent_again_unchanged(
    coordinator_url: str, client: httpx.Client, driver: Driver, tmp_path: Path
) -> None:
    """CDE: a report on record without the coordinator's answer (the page closed as it was
    sent) is sent at the next start, the same arm, once; then the agent plays nothing more."""
    body = {"id": EXPERIMENT, "arms": ["A", "B", "C"], "algorithm": "cde", "agents": 8}
    created = create_experiment(client, **body, privacy=0.8, eta=0.1, delta=0.05, epsilon=0.3)
    state = tmp_path / "agent.json"
    ticket = tickets(client, EXPERIMENT, 1)[0]
    driver("enroll", name="a", options=options(coordinator_url, state, ticket))
    driver("close", name="a")
    saved = json.loads(state.read_text())
    state.write_text(json.dumps(saved | {"report": [1, None]}))

    again = driver("enroll", name="b", options=options(coordinator_url, state, None))
    assert again["resumed"] and again["settled"], again  # reported: nothing more to play
    assert public(client)["reports"] == [0, 1, 0] and created["threshold"] > 1
    assert driver("choose", name="b")["arms"] == []
    driver("close", name="b")
    assert json.loads(state.read_text())["report"] == [1, "counted"]


def test_a_node_agent_plays_a_bernoulli_experiments_published_t_and_refuses_other_rewards(
    coordinator_url: str, client: httpx.Client, driver: Driver, tmp_path: Path
) -> None:
    """CDE with rewards declared Bernoulli: the experiment publishes the exact T
    (common.subroutines.fixed_budget.samples_per_arm with bernoulli, the T the simulators use),
    below the bounded one; a reward of 0.5 is refused with a clear error that records nothing,
    and the agent then reports after exactly T activations per arm."""
    body = {"id": EXPERIMENT, "arms": ["A", "B", "C"], "algorithm": "cde", "agents": 8}
    created = create_experiment(
        client, **body, rewards="bernoulli", privacy=0.8, eta=0.1, delta=0.05, epsilon=0.3
    )
    pulls = samples_per_arm(0.3, 0.1, 3, None, bernoulli=True)
    assert created["rewards"] == "bernoulli" and created["pulls_per_arm"] == pulls
    assert pulls < samples_per_arm(0.3, 0.1, 3, None)
    ticket = tickets(client, EXPERIMENT, 1)[0]
    driver("enroll", name="a", options=options(coordinator_url, tmp_path / "a.json", ticket))
    refused = driver("play", name="a", rewards=[0.5, 0.0, 1.0], activations=1)
    assert refused["error"] == "RangeError", refused
    assert "declared Bernoulli, every reward must be 0 or 1" in refused["message"]
    assert "nothing was recorded" in refused["message"]
    played = driver("play", name="a", rewards=[1.0, 0.0, 0.0], until="settled")
    assert played["played"] == 3 * pulls and played["settled"], played
    assert public(client)["reports"] is not None and sum(public(client)["reports"]) == 1
    driver("close", name="a")


def test_the_python_and_javascript_agents_resume_each_others_state_files(
    coordinator_url: str,
    client: httpx.Client,
    device_tickets: Iterator[str],
    driver: Driver,
    tmp_path: Path,
) -> None:
    """One device, two SDKs, one agent: the Python SDK enrolls, votes B and C out and settles;
    the JavaScript SDK resumes its file (no local statistics in it: they start afresh), learns
    until it settles again, and never votes on B or C again; the Python SDK resumes the file the
    JavaScript one wrote. One enrollment, two votes in all."""
    state = tmp_path / "agent.json"
    python = DeviceAgent.enroll(
        coordinator_url, EXPERIMENT, next(device_tickets), state, seed=1, follow=False
    )
    try:
        while not python.settled:
            arms = python.choose()
            python.observe(arms, [A_PAYS[arm] for arm in arms])
        agent_id = python.agent_id
    finally:
        python.close()

    js = driver("enroll", name="js", options=options(coordinator_url, state, None))
    assert js["resumed"] and js["agentId"] == agent_id and not js["settled"]
    played = driver("play", name="js", rewards=A_PAYS, until="settled")
    assert played["played"] > 0 and played["settled"] and played["votesSent"] == 0
    driver("close", name="js")

    with DeviceAgent.enroll(
        coordinator_url, EXPERIMENT, None, state, seed=2, follow=False
    ) as resumed:
        assert resumed.resumed and resumed.agent_id == agent_id
        assert resumed.agent.local.voted == {1, 2}
    state_now = public(client)
    assert (state_now["agents"], state_now["messages"], state_now["votes"]) == (1, 2, [0, 1, 1])


def test_a_node_agent_sends_again_an_acknowledged_vote_a_failover_lost(
    coordinator_url: str,
    client: httpx.Client,
    store: redis.Redis,
    device_tickets: Iterator[str],
    driver: Driver,
    tmp_path: Path,
) -> None:
    """The experiment's keys restored from a copy taken before the votes (what a Sentinel or
    Cluster failover can do): the agent's check of its own votes (GET /v1/agents/me) finds both
    missing and sends them again."""
    settings = options(coordinator_url, tmp_path / "a.json", next(device_tickets))
    driver("enroll", name="a", options=settings | {"reconcileMs": 200})
    copy = copy_keys(store, FAILOVER_KEYS)
    assert driver("play", name="a", rewards=A_PAYS, until="settled")["votesSent"] == 2
    assert public(client)["votes"] == [0, 1, 1]
    restore_keys(store, copy)
    assert public(client)["votes"] == [0, 0, 0]  # the acknowledged votes are lost
    deadline = time.monotonic() + 60
    while public(client)["votes"] != [0, 1, 1]:
        assert time.monotonic() < deadline, "the lost votes were never sent again"
        answer = driver("play", name="a", rewards=A_PAYS, activations=20)
    assert answer["votesResent"] == 2 and answer["votesSent"] == 2 and answer["checks"] >= 1


def test_a_node_agent_tells_an_epoch_that_took_a_lost_ones_number(
    coordinator_url: str,
    client: httpx.Client,
    store: redis.Redis,
    device_tickets: Iterator[str],
    driver: Driver,
    tmp_path: Path,
) -> None:
    """As tests/services/test_device.py's test of that name: a reset, votes, a failover back to
    before the reset, a reset again (epoch 1 at the same version, another start). The agent
    follows nothing; its check of its own votes shows the new start: it forgets the lost epoch's
    votes (never re-sent), restarts, and votes B and C out again in the new epoch."""
    settings = options(coordinator_url, tmp_path / "a.json", next(device_tickets))
    driver("enroll", name="a", options=settings | {"follow": False, "reconcileMs": 50})
    copy = copy_keys(store, FAILOVER_KEYS)
    assert client.post(f"/v1/experiments/{EXPERIMENT}/reset", headers=admin_headers())
    lost_start = public(client)["epoch_started_at"]
    assert driver("refresh", name="a")["epoch"] == 1
    assert driver("play", name="a", rewards=A_PAYS, until="settled")["votesSent"] == 2
    assert public(client)["votes"] == [0, 1, 1]
    state = reset_after_a_failover(client, store, copy, lost_start)
    assert (state["epoch"], state["version"]) == (1, 1)  # only the start tells

    deadline, answer = time.monotonic() + 60, {}
    while public(client)["votes"] != [0, 1, 1]:
        assert time.monotonic() < deadline, ("the agent never voted in the new epoch", answer)
        answer = driver("play", name="a", rewards=A_PAYS, activations=20)
    assert answer["votesResent"] == 0 and answer["votesSent"] == 4, answer


def test_a_deleted_experiment_ends_the_node_agent(
    coordinator_url: str,
    client: httpx.Client,
    device_tickets: Iterator[str],
    driver: Driver,
    tmp_path: Path,
) -> None:
    agent = driver("enroll", name="a", options=options(coordinator_url, None, next(device_tickets)))
    assert agent["status"] == "exploring"
    driver("watch", name="a")
    assert client.delete(f"/v1/experiments/{EXPERIMENT}", headers=admin_headers()).status_code
    deadline = time.monotonic() + 60
    while driver("wait", name="a", timeoutMs=1000)["status"] != "deleted":
        assert time.monotonic() < deadline, "the deletion never reached the agent"
    assert driver("choose", name="a")["error"] == "ExperimentGone"
    assert driver("watched", name="a")["statuses"][-1] == "deleted"  # onChange told it too


def test_node_refusals_are_clear_and_change_nothing(
    coordinator_url: str,
    client: httpx.Client,
    device_tickets: Iterator[str],
    driver: Driver,
    tmp_path: Path,
) -> None:
    """A second holder of the same state file, a used ticket, no ticket, another experiment's
    file: each refused with what to do, no file written or changed, no agent enrolled."""
    ticket = next(device_tickets)
    assert "agentId" in driver(
        "enroll", name="a", options=options(coordinator_url, tmp_path / "one.json", ticket)
    )
    twice = driver(
        "enroll",
        name="b",
        options=options(coordinator_url, tmp_path / "one.json", next(device_tickets)),
    )
    assert twice["error"] == "AgentLocked", twice
    used = driver(
        "enroll", name="c", options=options(coordinator_url, tmp_path / "two.json", ticket)
    )
    assert (
        used["error"] == "EnrollmentRefused"
        and "ticket is unknown, used, expired" in used["message"]
    )
    none = driver(
        "enroll", name="d", options=options(coordinator_url, tmp_path / "three.json", None)
    )
    assert none["error"] == "EnrollmentRefused" and "a ticket is needed" in none["message"]
    assert not (tmp_path / "two.json").exists() and not (tmp_path / "three.json").exists()
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            {"format": 1, "experiment": "another", "created_at": 1, "agent_id": "x", "token": "y"}
        )
    )
    foreign = driver(
        "enroll", name="e", options=options(coordinator_url, other, next(device_tickets))
    )
    assert foreign["error"] == "EnrollmentRefused" and "experiment another" in foreign["message"]
    assert json.loads(other.read_text())["agent_id"] == "x"  # left as it was
    assert public(client)["agents"] == 1
    # development: the open-enrollment secret works as a ticket
    assert "agentId" in driver(
        "enroll", name="f", options=options(coordinator_url, None, ENROLLMENT_SECRET)
    )
    assert public(client)["agents"] == 2


def test_the_node_agent_polls_when_the_stream_is_refused_and_fails_over(
    redis_url: str, clean_redis: str, driver: Driver
) -> None:
    """A coordinator at its bound of event streams (DEXP_MAX_SUBSCRIBERS = 1, held by another
    client) refuses the agent's stream (503): the agent follows by ETag polls and still learns of
    each change. Its first coordinator URL is dead (a closed port): requests fail over to the
    second."""
    with coordinator(coordinator_settings(redis_url, max_subscribers=1)) as server:
        client = httpx.Client(base_url=server.url)
        body = {"id": EXPERIMENT, "arms": ["A", "B", "C"], "eta": 0.5, "delta": 0.1, "epsilon": 0.1}
        assert client.post("/v1/experiments", json=body, headers=admin_headers()).status_code == 201
        dead = f"http://127.0.0.1:{free_port()}"
        with (
            httpx.Client(timeout=None) as holder,
            holder.stream("GET", f"{server.url}/v1/experiments/{EXPERIMENT}/events") as held,
        ):
            assert held.status_code == 200
            urls = f"{dead},{server.url}"
            issued = tickets(client, EXPERIMENT, 5)
            agents = [f"a{i}" for i in range(4)]
            for name, ticket in zip(agents, issued, strict=False):
                answer = driver("enroll", name=name, options=options(urls, None, ticket))
                assert "agentId" in answer, answer
            deadline = time.monotonic() + 60
            while driver("follower", coordinator=urls, experiment=EXPERIMENT)["refused"] < 1:
                assert time.monotonic() < deadline, "the stream was never refused"
                driver("wait", name="a0", timeoutMs=200)
            for name in agents:
                driver("play", name=name, rewards=A_PAYS, until="settled")
            deadline = time.monotonic() + 60
            while driver("wait", name="a0", timeoutMs=500)["status"] != "identified":
                assert time.monotonic() < deadline, "the identification never reached the agent"
            follower = driver("follower", coordinator=urls, experiment=EXPERIMENT)
            assert follower["streams"] == 0 and follower["polls"] >= 1, follower
            assert public(client)["remaining_arms"] == [0]
        client.close()


def test_the_node_event_stream_parser_reads_the_standard_format(driver: Driver) -> None:
    lines = [
        "retry: 2000",
        ": heartbeat",
        "id: 17-0",
        "event: state",
        'data: {"version": 3,',
        'data:"epoch": 0}',
        "",
        "",
        ": heartbeat",
        "",
        "data: plain",
        "retry: soon",
        "",
        "event: deleted",
        "id",
        'data: {"experiment": "demo"}',
        "",
    ]
    parsed = driver("parse", lines=lines)
    assert parsed["events"] == [
        {"type": "state", "data": '{"version": 3,\n"epoch": 0}', "id": "17-0"},
        {"type": "message", "data": "plain", "id": "17-0"},
        {"type": "deleted", "data": '{"experiment": "demo"}', "id": ""},
    ]
    assert parsed["retry"] == 2000
