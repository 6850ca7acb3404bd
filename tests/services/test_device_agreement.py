"""The device protocol, one object per language (agent/protocol.py and sdk/js/src/protocol.ts,
each a DeviceProtocol without I/O), held to one recording; then the two SDKs' agents around them
held to each other against a real coordinator.

1. Recorded (no coordinator): each scenario of tests/device_scenarios/*.json (a restart, a
failover that loses votes, a lost reset, an epoch that takes a lost one's number, the deletion,
refusals, CDE's report) is replayed through the Python DeviceProtocol in-process and through the
built JavaScript one under node (tests/js/protocol_runner.mjs), with the coordinator's recorded
replies. At every step both must send exactly the recorded messages (method, path, body), return
the recorded result, and end with the same record, counters and view: two languages agreeing on
a wrong answer fail too. A recording: the state the agent starts from (`state`, a GET of the
experiment), its saved record, when its slow check is due (`next_check`, seconds), and the
steps: `decide` (votes the local agent decided), an exchange (`deliver_decided`, `settle`,
`reset`, `resend_pending`, `reconcile`, `refresh`) with its `replies` in order ({"refused":
status} is a CoordinatorError thrown in), `forget_lost_epoch`, `decided` (the arms it never
decides again this epoch); each with the messages it `sends` and what it `returns` ({"error":
status}: the refusal it raised).

2. Live: what the agents around the protocol objects add (when they call which exchange, their
state files, restarts) replayed through the Python SDK (agent/device.py, agent/library.py) and the
JavaScript one (sdk/js/dist/agent.js under node, driven by tests/js/device_driver.mjs), each
against the same real coordinator and Redis, through a recording proxy (tests/e2e/proxy.py) that
also loses replies when told to. A scenario is a sequence of protocol events: votes decided (the
agent plays arms of fixed rewards until it has voted), a reply lost (the coordinator takes the
request, the device gets a 502 and sends it again), a Redis failover (the experiment's keys
restored from an older copy, as tests/services/test_device.py does it), an admin reset (a new
epoch), a read of the state, a check of the agent's own votes (GET /v1/agents/me, due after a sure
sign of lost writes, or at a restart), a restart from the state file, and the file as a crash left
it (a vote decided and not sent, a CDE report drawn and not answered). Both SDKs must send the same
messages in the same order, keep the same record in their state files, count the same, and leave
the coordinator counting the same. Each scenario also states its outcome, so that the two agreeing
on a wrong answer fails too.

tests/test_js_agreement.py does this for the local algorithm with recorded draws. Here the draws
do not matter: with fixed rewards, SER3 votes an arm out at the end of a round whatever order it
played the round in, so both agents vote at the same activations without sharing a draw.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import httpx
import pytest
import redis

from agent.device import DeviceAgent
from agent.library import GlobalView
from agent.protocol import DeviceProtocol, Exchange
from agent.state import AgentRecord
from clients.coordinator import CoordinatorError
from tests.e2e.proxy import RecordingProxy
from tests.prerequisites import missing

from .helpers import ThreadedCoordinator, admin_headers, create_experiment
from .test_device import B_FIRST, FAILOVER_KEYS, copy_keys, play_until, restore_keys
from .test_js_sdk import Driver, tickets

# -- 1. the protocol objects, with recorded replies --------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "tests" / "device_scenarios"
RUNNER = ROOT / "tests" / "js" / "protocol_runner.mjs"
BUNDLE = ROOT / "sdk" / "js" / "dist" / "agent.js"
RECONCILE_SECONDS = 30.0  # the runner's too


def recordings() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(RECORDINGS.glob("*.json"))}


class Recorded:
    """The scenario's starting state, as GlobalView.fetch reads it."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def experiment(self, experiment: str) -> dict[str, Any]:
        return self.state


def drive(exchange: Exchange[Any], replies: list[Any], sent: list[Any]) -> Any:
    """`exchange` with the step's recorded replies; the messages it sends go into `sent`."""
    try:
        message = next(exchange)
        while True:
            sent.append([message.method, message.path, message.body])
            assert len(sent) <= len(replies), f"no recorded reply for message {len(sent)}"
            reply = replies[len(sent) - 1]
            if isinstance(reply, dict) and "refused" in reply:
                message = exchange.throw(CoordinatorError(reply["refused"], "recorded refusal"))
            else:
                message = exchange.send(reply)
    except StopIteration as stop:
        return stop.value


def python_replay(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario through agent/protocol.py; each step's outcome (the runner's shape)."""
    view = GlobalView.fetch(Recorded(scenario["state"]), "x")  # type: ignore[arg-type]
    record = AgentRecord.from_json(scenario["record"])
    lost = [0]

    def lost_epoch() -> None:
        lost[0] += 1

    protocol = DeviceProtocol(
        view,
        record,
        persist=lambda: None,
        lost_epoch=lost_epoch,
        jitter=lambda: 0.5,
        reconcile_seconds=RECONCILE_SECONDS,
        next_check=scenario["next_check"],
    )
    outcomes = []
    for step in scenario["steps"]:
        sent: list[Any] = []
        returns: Any = None
        exchanges = {
            "resend_pending": protocol.resend_pending,
            "deliver_decided": protocol.deliver_decided,
            "reconcile": lambda: protocol.reconcile(step["now"]),  # noqa: B023 - called at once
            "refresh": protocol.refresh,
            "settle": lambda: protocol.settle(step["done"], step["local_epoch"]),  # noqa: B023
            "reset": protocol.reset,
        }
        try:
            if step["do"] == "decide":
                protocol.decide(step["votes"])
            elif step["do"] == "forget_lost_epoch":
                returns = protocol.forget_lost_epoch()
            elif step["do"] == "decided":
                returns = sorted(record.decided(view.epoch))
            else:
                returns = drive(exchanges[step["do"]](), step.get("replies", []), sent)
        except CoordinatorError as exc:
            returns = {"error": exc.status}
        own = record.to_json()
        outcomes.append(
            {
                "sent": sent,
                "returns": returns,
                "record": {k: own.get(k) for k in ("acknowledged", "pending", "epoch_starts")}
                | {"report": own.get("report")},
                "counters": {
                    k: getattr(protocol, k)
                    for k in (
                        "votes_sent",
                        "votes_resent",
                        "reports_sent",
                        "settled_sent",
                        "resets_limited",
                        "checks",
                    )
                },
                "view": {
                    "epoch": view.epoch,
                    "version": view.version,
                    "remaining": sorted(view.remaining),
                    "replaced": view.replaced,
                    "losses": view.losses,
                },
                "lost": lost[0],
            }
        )
    return outcomes


@pytest.fixture(scope="module")
def javascript() -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Every scenario through the built SDK's DeviceProtocol under node, at once."""
    node = shutil.which("node")
    if node is None:
        missing("node (Debian's nodejs) runs the JavaScript protocol")
    if not BUNDLE.is_file():
        missing(f"{BUNDLE.relative_to(ROOT)} is not built (cd sdk/js && npm ci && npm run build)")
    recorded = recordings()
    done = subprocess.run(
        [node, str(RUNNER), str(BUNDLE)],
        input=json.dumps({"scenarios": list(recorded.values())}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    yield dict(zip(recorded, cast(list[Any], json.loads(done.stdout)), strict=True))


@pytest.mark.parametrize("name", list(recordings()))
def test_both_protocol_objects_send_the_recorded_messages(
    name: str, javascript: dict[str, list[dict[str, Any]]]
) -> None:
    """Step by step: the recorded messages from each language, the recorded result, and the
    same record, counters and view in both."""
    scenario = recordings()[name]
    python, node = python_replay(scenario), javascript[name]
    assert len(python) == len(node) == len(scenario["steps"])
    for i, (step, py, js) in enumerate(zip(scenario["steps"], python, node, strict=True)):
        where = f"{name}, step {i} ({step['do']})"
        assert py["sent"] == step.get("sends", []), f"{where}: Python sent {py['sent']}"
        assert js["sent"] == step.get("sends", []), f"{where}: JavaScript sent {js['sent']}"
        if "returns" in step:
            assert py["returns"] == step["returns"], f"{where}: Python returned {py['returns']}"
        assert js == py, f"{where}: the languages differ"


def test_every_scenario_kind_is_recorded() -> None:
    """The protocol's parts the issue names each have their recording."""
    recorded = recordings()
    assert {"restart", "failover_loses_votes", "lost_reset", "deletion", "refusals"} <= set(
        recorded
    )
    kinds = {step["do"] for scenario in recorded.values() for step in scenario["steps"]}
    assert kinds >= {"deliver_decided", "settle", "reset", "resend_pending", "reconcile"}


# -- 2. the agents, live ----------------------------------------------------------------------

EXPERIMENT = "device"  # test_device's keys: three arms
DE = {"arms": ["A", "B", "C"], "eta": 0.5, "delta": 0.1, "epsilon": 0.1}  # M = 4: one agent
CDE = {"arms": ["A", "B", "C"], "algorithm": "cde", "agents": 8, "privacy": 0.8, "eta": 0.1}
CDE |= {"delta": 0.05, "epsilon": 0.3}
NEVER = 1e6  # the slow check's period (s): a check only when a sign, or a restart, asks for it


@dataclass(frozen=True)
class Scenario:
    """`steps`: the events, separated by ";" (Run.step reads them). The rest is what both SDKs
    must end with: the coordinator's public state (`public`), each life's counters of the agent
    (`counters`, only the ones named), and its state file's acknowledged votes or CDE report."""

    steps: str
    public: dict[str, Any]
    counters: list[dict[str, int]]
    acknowledged: list[list[Any]] = field(default_factory=list)
    report: list[Any] | None = None
    experiment: dict[str, Any] = field(default_factory=lambda: DE)
    rewards: tuple[float, ...] = B_FIRST  # B voted out at the 54th activation, C at the 354th

    def events(self) -> list[list[str]]:
        return [event.split() for event in self.steps.split(";")]


SCENARIOS = {
    # issue 33 (b): a failover loses the reset, and epoch 0 comes back without C's vote: the
    # agent must not decide B again, and must send C again
    "a lost reset brings back the epoch before": Scenario(
        "enroll; play 1; copy; play settled; reset; refresh; play 4; "
        "restore; refresh; choose; play settled",
        {"epoch": 0, "votes": [0, 1, 1], "messages": 2, "ignored_messages": 0},
        [{"votesSent": 4, "votesResent": 1, "checks": 1}],
        [[1, 0, "counted"], [1, 1, "counted"], [2, 1, "counted"], [2, 0, "counted"]],
    ),
    # B's first reply lost (its second copy a duplicate), then both votes lost by a failover to
    # a copy taken before them (no vote, no message): the sign (counts going down) checked, both
    # sent again
    "votes lost by a failover, and a lost reply, sent again": Scenario(
        "enroll; copy; lose votes; play settled; restore; refresh; choose; play settled",
        {"epoch": 0, "votes": [0, 1, 1], "messages": 2, "ignored_messages": 0},
        [{"votesSent": 2, "votesResent": 2, "checks": 1}],
        [[1, 0, "counted"], [2, 0, "counted"]],
        rewards=(1.0, 0.0, 0.0),  # B and C out together
    ),
    # C decided and on record, not sent: the restart sends it, and checks its votes at once
    "a restart with a vote decided and not sent": Scenario(
        "enroll; play 1; crash with the vote 2 unsent; choose; play settled",
        {"epoch": 0, "votes": [0, 1, 1], "messages": 2, "ignored_messages": 0},
        [{"votesSent": 1, "checks": 0}, {"votesSent": 0, "votesResent": 1, "checks": 1}],
        [[1, 0, "counted"], [2, 0, "counted"]],
    ),
    # the lost epoch's votes forgotten, never sent again; the sign of the loss is checked once
    # the agent has votes in the new epoch (they are all there)
    "an epoch that took a lost one's number": Scenario(
        "enroll; copy; reset; refresh; play settled; restore; reset; refresh; choose; play settled",
        {"epoch": 1, "votes": [0, 1, 1], "messages": 2, "ignored_messages": 0},
        [{"votesSent": 4, "votesResent": 0, "checks": 1}],
        [[1, 1, "counted"], [2, 1, "counted"]],
    ),
    # the restart sends the report on record, never another; its reply lost, the second copy is
    # a duplicate (a message the coordinator ignores), which the record keeps as the answer
    "a CDE report drawn, not answered, its reply lost again": Scenario(
        "enroll; lose report; crash with the report 1 unanswered; choose",
        {"epoch": 0, "reports": [0, 1, 0], "messages": 2, "ignored_messages": 1},
        [{"reportsSent": 0}, {"reportsSent": 1, "checks": 0}],
        report=[1, "duplicate"],
        experiment=CDE,
    ),
}


class Side(Protocol):
    """One SDK's agent, as the scenarios drive it."""

    state_file: Path

    def enroll(self, ticket: str | None) -> None: ...
    def play(self, until: str | int, rewards: tuple[float, ...]) -> None: ...
    def refresh(self) -> None: ...
    def choose(self) -> None: ...
    def close(self) -> dict[str, Any]: ...


COUNTERS = ("votesSent", "votesResent", "reportsSent", "checks")
PUBLIC = ("epoch", "version", "remaining_arms", "status", "votes", "reports", "agents", "messages")
PUBLIC += ("ignored_messages",)


class PythonSide:
    def __init__(self, url: str, state_file: Path) -> None:
        self.url, self.state_file = url, state_file
        self.device: DeviceAgent | None = None

    @property
    def agent(self) -> DeviceAgent:
        assert self.device is not None
        return self.device

    def enroll(self, ticket: str | None) -> None:
        self.device = DeviceAgent.enroll(
            self.url, EXPERIMENT, ticket, self.state_file, follow=False, reconcile_seconds=NEVER
        )

    def play(self, until: str | int, rewards: tuple[float, ...]) -> None:
        agent = self.agent
        if until == "settled":
            play_until(agent, lambda: agent.settled, rewards=rewards)
        else:
            play_until(agent, lambda: agent.votes_sent >= int(until), rewards=rewards)

    def refresh(self) -> None:
        self.agent.refresh()

    def choose(self) -> None:
        self.agent.choose()

    def close(self) -> dict[str, Any]:
        inner = self.agent.agent
        counts = [inner.votes_sent, inner.votes_resent, inner.reports_sent, inner.checks]
        self.agent.close()
        return dict(zip(COUNTERS, counts, strict=True))


class NodeSide:
    def __init__(self, driver: Driver, url: str, state_file: Path) -> None:
        self.driver, self.url, self.state_file = driver, url, state_file

    def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        answer = self.driver(op, name="agent", **args)
        assert "error" not in answer, answer
        return answer

    def enroll(self, ticket: str | None) -> None:
        options = {"coordinator": self.url, "experiment": EXPERIMENT, "follow": False}
        options |= {"stateFile": str(self.state_file), "reconcileMs": NEVER * 1000}
        self("enroll", options=options | ({"ticket": ticket} if ticket else {}))

    def play(self, until: str | int, rewards: tuple[float, ...]) -> None:
        self("play", rewards=rewards, until=until if until == "settled" else {"votesSent": until})

    def refresh(self) -> None:
        self("refresh")

    def choose(self) -> None:
        self("choose")
        self("flush")  # the check it queued, answered

    def close(self) -> dict[str, Any]:
        view = self("flush")
        self("close")
        return {k: view[k] for k in COUNTERS}


@dataclass
class Run:
    """One scenario through one SDK, and what it showed."""

    scenario: Scenario
    side: Side
    client: httpx.Client  # the coordinator itself: the admin's requests and the checks' reads
    store: redis.Redis
    proxy: RecordingProxy
    starts: list[int] = field(default_factory=list)  # the epochs' starts, as they began
    counters: list[dict[str, Any]] = field(default_factory=list)  # per life of the agent
    copy: dict[str, bytes | None] = field(default_factory=dict)
    tickets: Iterator[str] = field(default_factory=lambda: iter(()))

    def public(self) -> dict[str, Any]:
        state: dict[str, Any] = self.client.get(f"/v1/experiments/{EXPERIMENT}").json()
        return state

    def start(self) -> None:
        self.store.flushall()
        self.proxy.requests.clear()
        create_experiment(self.client, id=EXPERIMENT, **self.scenario.experiment)
        self.starts.append(int(self.public()["epoch_started_at"]))
        self.tickets = iter(tickets(self.client, EXPERIMENT, 2))

    def step(self, event: list[str]) -> None:
        """One event: enroll (with a ticket); play N (until N votes decided) or play settled;
        refresh (read the state); choose (one call: a check of its votes, when due, comes
        with it); copy (what a replica holds now); restore (the failover to that copy); reset
        (an admin's); lose votes|report (the reply to the next one); crash with the vote ARM
        unsent, or with the report ARM unanswered (the agent stopped, its file as a crash
        between the record and the send leaves it, and a restart from it)."""
        side, (op, *args) = self.side, event
        if op == "enroll":
            side.enroll(next(self.tickets))
        elif op == "play":
            side.play(args[0] if args[0] == "settled" else int(args[0]), self.scenario.rewards)
        elif op in ("refresh", "choose"):
            getattr(side, op)()
        elif op == "copy":
            self.copy = copy_keys(self.store, FAILOVER_KEYS)
        elif op == "restore":
            restore_keys(self.store, self.copy)
        elif op == "reset":
            self.reset()
        elif op == "lose":
            self.proxy.lose.append(("POST", f"/v1/experiments/{EXPERIMENT}/{args[0]}"))
        elif op == "crash":
            self.counters.append(side.close())
            saved = json.loads(side.state_file.read_text())
            what, arm = args[2], int(args[3])
            if what == "vote":
                state = self.public()
                saved["pending"].append([arm, state["epoch"]])
                saved["epoch_starts"][str(state["epoch"])] = state["epoch_started_at"]
            else:
                saved["report"] = [arm, None]
            side.state_file.write_text(json.dumps(saved))
            side.enroll(None)
        else:
            raise AssertionError(f"unknown event {event}")

    def reset(self) -> None:
        """An admin reset, once Redis's clock is past every epoch start known (a condition):
        after a failover, a new epoch of a lost one's number then begins at another time."""
        deadline = time.monotonic() + 30
        while (lambda t: t[0] * 1000 + t[1] // 1000)(self.store.time()) <= max(self.starts):
            assert time.monotonic() < deadline, "Redis's clock stands still"
        reply = self.client.post(f"/v1/experiments/{EXPERIMENT}/reset", headers=admin_headers())
        assert reply.status_code == 200, reply.text
        self.starts.append(int(self.public()["epoch_started_at"]))

    def label(self, start: Any) -> str:
        """An epoch start by its rank among the epochs' starts (each SDK's run has its own)."""
        return f"start {self.starts.index(start)}" if start in self.starts else f"unknown {start}"

    def observed(self) -> dict[str, Any]:
        """What the run showed: the messages, in order, the state file's record, the counters,
        and the coordinator's public counts."""
        self.counters.append(self.side.close())
        messages = []
        for request in self.proxy.requests:
            body = json.loads(request.body) if request.body else None
            if isinstance(body, dict) and "epoch_started_at" in body:
                body["epoch_started_at"] = self.label(body["epoch_started_at"])
            messages.append((request.method, request.path, body, request.lost))
        saved = json.loads(self.side.state_file.read_text())
        state = self.public()
        return {
            "messages": messages,
            "acknowledged": saved["acknowledged"],
            "pending": saved["pending"],
            "report": saved.get("report"),
            "epoch_starts": {e: self.label(s) for e, s in saved["epoch_starts"].items()},
            "counters": self.counters,
            "public": {k: state.get(k) for k in PUBLIC}
            | {"epoch_started_at": self.label(state["epoch_started_at"])},
        }


@pytest.fixture(scope="module")
def proxy(coordinator_server: ThreadedCoordinator) -> Iterator[RecordingProxy]:
    recording = RecordingProxy()
    recording.start(coordinator_server.url)
    yield recording
    recording.stop()


def replay(scenario: Scenario, side: Side, **books: Any) -> dict[str, Any]:
    """The scenario through `side` on a fresh experiment; what it showed (Run.observed)."""
    run = Run(scenario, side, **books)
    run.start()
    for event in scenario.events():
        run.step(event)
    return run.observed()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_python_and_javascript_agents_follow_the_protocol_alike(
    name: str,
    client: httpx.Client,
    store: redis.Redis,
    proxy: RecordingProxy,
    tmp_path: Path,
) -> None:
    """The scenario through the Python SDK, then on a fresh experiment through the JavaScript
    SDK: the same messages in the same order (epoch starts by rank), the same record in the
    state file, the same counters per life of the agent, the same public state; and those are
    the scenario's."""
    scenario = SCENARIOS[name]
    books = {"client": client, "store": store, "proxy": proxy}
    python = replay(scenario, PythonSide(proxy.url, tmp_path / "py.json"), **books)
    with closing(Driver()) as driver:
        node = replay(scenario, NodeSide(driver, proxy.url, tmp_path / "js.json"), **books)
    for what in python:
        assert node[what] == python[what], f"{name}: the SDKs differ in {what}"
    public = python["public"]
    assert {k: public[k] for k in scenario.public} == scenario.public
    assert len(python["counters"]) == len(scenario.counters)
    lives = zip(python["counters"], scenario.counters, strict=True)
    assert [{k: c[k] for k in want} for c, want in lives] == scenario.counters
    assert python["acknowledged"] == scenario.acknowledged and python["pending"] == []
    assert python["report"] == scenario.report
