"""The device protocol, one object per language, held to one recording: each scenario of
tests/device_scenarios/*.json (a restart, a failover that loses votes, a lost reset, an epoch
that takes a lost one's number, the deletion, refusals, CDE's report) is replayed through
agent/protocol.py's DeviceProtocol here and through sdk/js/src/protocol.ts's under node
(tests/js/protocol_runner.mjs, the built SDK), with the coordinator's recorded replies. At every
step both must send exactly the recorded messages (method, path, body), return the same, and
end with the same record, counters and view: two SDKs agreeing on a wrong answer fail too.

A scenario: the state the agent starts from (`state`, a GET of the experiment), its saved
record, when its slow check is due (`next_check`, seconds), and the steps: `decide` (votes the
local agent decided), an exchange (`deliver_decided`, `settle`, `reset`, `resend_pending`,
`reconcile`, `refresh`) with its `replies` in order ({"refused": status} is a CoordinatorError
thrown in), `forget_lost_epoch`, `decided` (the arms it never decides again this epoch); each
with the messages it `sends` and what it `returns` ({"error": status}: the refusal it raised).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from agent.library import GlobalView
from agent.protocol import DeviceProtocol, Exchange
from agent.state import AgentRecord
from clients.coordinator import CoordinatorError
from tests.prerequisites import missing

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "tests" / "device_scenarios"
RUNNER = ROOT / "tests" / "js" / "protocol_runner.mjs"
BUNDLE = ROOT / "sdk" / "js" / "dist" / "agent.js"
RECONCILE_SECONDS = 30.0  # the runner's too


def scenarios() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(SCENARIOS.glob("*.json"))}


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
    recorded = scenarios()
    done = subprocess.run(
        [node, str(RUNNER), str(BUNDLE)],
        input=json.dumps({"scenarios": list(recorded.values())}),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    yield dict(zip(recorded, cast(list[Any], json.loads(done.stdout)), strict=True))


@pytest.mark.parametrize("name", list(scenarios()))
def test_both_protocols_send_the_recorded_messages(
    name: str, javascript: dict[str, list[dict[str, Any]]]
) -> None:
    """Step by step: the recorded messages from each language, the recorded result, and the
    same record, counters and view in both."""
    scenario = scenarios()[name]
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
    recorded = scenarios()
    assert {"restart", "failover_loses_votes", "lost_reset", "deletion", "refusals"} <= set(
        recorded
    )
    kinds = {step["do"] for scenario in recorded.values() for step in scenario["steps"]}
    assert kinds >= {"deliver_decided", "settle", "reset", "resend_pending", "reconcile"}
