"""The agent's recovery bookkeeping without processes: its state files, the pending/acknowledged
record of its votes, and the re-sending of votes a coordinator lost (agent/state.py, library.py)."""

from __future__ import annotations

import json
import stat
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agent.library import Agent, GlobalView
from agent.state import Acknowledged, AgentRecord, StateDir
from common.algorithms import AlgorithmConfig

ARMS = 4


class FakeCoordinator:
    """The two calls an agent makes after enrolling: GET the experiment, POST a vote."""

    def __init__(self) -> None:
        self.version, self.epoch = 0, 0
        self.remaining = set(range(ARMS))
        self.voters: dict[int, set[str]] = {arm: set() for arm in range(ARMS)}
        self.calls: list[tuple[str, int]] = []
        self.on_vote: Any = None

    def experiment(self, experiment: str) -> dict[str, Any]:
        return {
            "arms": [f"a{k}" for k in range(ARMS)],
            "params": asdict(AlgorithmConfig()),
            "sigma": None,
            "threshold": 2,
            "epoch": self.epoch,
            "version": self.version,
            "remaining_arms": sorted(self.remaining),
            "voters": [sorted(self.voters[arm]) for arm in range(ARMS)],
            "created_at": 1234,
        }

    def vote(self, experiment: str, token: str, arm: int, epoch: int) -> dict[str, Any]:
        agent = token.split(".")[0]
        self.calls.append((agent, arm))
        if self.on_vote is not None:
            self.on_vote(agent, arm)
        if arm not in self.remaining:
            outcome = "arm_out"
        elif agent in self.voters[arm]:
            outcome = "duplicate"
        else:
            self.voters[arm].add(agent)
            outcome = "counted"
        return {"outcome": outcome, "version": self.version, "epoch": self.epoch}


def make_agent(
    coordinator: FakeCoordinator, record: AgentRecord | None = None, persist: Any = None
) -> Agent:
    view = GlobalView.fetch(coordinator, "demo")  # type: ignore[arg-type]
    return Agent(
        coordinator,  # type: ignore[arg-type]
        view,
        "demo-a1",
        "demo-a1.secret",
        np.random.default_rng(0),
        record=record,
        persist=persist,
    )


def test_state_dir_round_trip_private_and_atomic(tmp_path: Path) -> None:
    state = StateDir(tmp_path, "demo")
    record = AgentRecord("demo-a1", "demo-a1.secret", [Acknowledged(2, 0, "counted")], [(3, 0)])
    state.save(record, created_at=1234, slot=0, durable=True)
    state.save(AgentRecord("demo-a0", "demo-a0.secret"), created_at=1234, slot=1)
    [path] = list(tmp_path.glob("agent-demo-a1.json"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds a bearer token
    assert not list(tmp_path.glob(".*"))  # no temp file left behind
    loaded = state.load(1234)
    assert [r.agent_id for r in loaded] == ["demo-a1", "demo-a0"]  # slot order
    assert loaded[0].acknowledged == [Acknowledged(2, 0, "counted")]
    assert loaded[0].pending == [(3, 0)]
    assert loaded[0].decided(0) == {2, 3}
    assert state.load(999) == []  # another incarnation of the experiment: other agents
    # Privacy: credentials and vote bookkeeping only, no statistics.
    document = json.loads(path.read_text())
    assert set(document) == {
        "format",
        "experiment",
        "created_at",
        "slot",
        "agent_id",
        "token",
        "acknowledged",
        "pending",
    }


def test_a_vote_is_pending_on_disk_before_it_is_sent(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    state = StateDir(tmp_path, "demo")
    seen_on_disk: list[list[tuple[int, int]]] = []
    coordinator.on_vote = lambda agent, arm: seen_on_disk.append(state.load(1234)[0].pending)
    agent = make_agent(coordinator)
    agent.persist = lambda: state.save(agent.record, 1234, 0)
    agent._send([1])
    assert seen_on_disk == [[(1, 0)]]  # decided and saved, then sent
    [saved] = state.load(1234)
    assert saved.pending == []
    assert saved.acknowledged == [Acknowledged(1, 0, "counted")]


def test_a_restarted_agent_resends_pending_votes_and_never_decides_twice() -> None:
    coordinator = FakeCoordinator()
    coordinator.voters[1].add("demo-a1")  # the dead process's vote arrived, its reply did not
    record = AgentRecord(
        "demo-a1", "demo-a1.secret", [Acknowledged(2, 0, "counted")], [(1, 0), (3, 7)]
    )
    coordinator.voters[2].add("demo-a1")
    agent = make_agent(coordinator, record)
    assert agent.local.voted == {1, 2}  # never decided again
    assert agent.resend_pending() == 1
    assert coordinator.calls == [("demo-a1", 1)]
    assert record.pending == []  # the vote of another epoch is dropped
    assert {(v.arm, v.outcome) for v in record.acknowledged} == {(2, "counted"), (1, "duplicate")}
    assert agent.local._votes([1, 2, 3]) == [3]


def test_votes_a_failover_lost_are_sent_again() -> None:
    coordinator = FakeCoordinator()
    agent = make_agent(coordinator)
    agent._send([1, 2])
    coordinator.version = 1
    coordinator.remaining.discard(2)  # arm 2 eliminated: the agent refreshes
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.missing_votes() == []
    # The failover: the new primary lacks the vote on arm 1, and the elimination (version 0).
    coordinator.voters[1].clear()
    coordinator.voters[2].clear()
    coordinator.remaining.add(2)
    coordinator.version = 0
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.view.regressions == 1
    assert agent.view.remaining == frozenset(range(ARMS))  # the older state is taken
    assert sorted(agent.missing_votes()) == [1, 2]
    assert agent.reconcile() == 2
    assert coordinator.voters[1] == {"demo-a1"} and coordinator.voters[2] == {"demo-a1"}
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.missing_votes() == []  # nothing sent twice
    assert agent.votes_sent == 2 and agent.votes_resent == 2


def test_a_lost_vote_on_an_arm_eliminated_meanwhile_is_recorded_as_arm_out() -> None:
    coordinator = FakeCoordinator()
    agent = make_agent(coordinator)
    agent._send([3])
    coordinator.voters[3].clear()  # lost ...
    coordinator.remaining.discard(3)  # ... and the arm left anyway, on other agents' votes
    coordinator.version = 1
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.reconcile() == 1
    assert agent.record.acknowledged == [
        Acknowledged(3, 0, "arm_out", agent.record.acknowledged[0].seq)
    ]
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.missing_votes() == []  # not in a voter set, and the books say so


def test_a_vote_acknowledged_after_the_last_read_is_not_missing() -> None:
    coordinator = FakeCoordinator()
    agent = make_agent(coordinator)
    coordinator.voters[0].add("other")  # the state read below predates the vote
    agent._send([0])
    assert agent.missing_votes() == []


def test_a_state_dir_serves_one_live_process(tmp_path: Path) -> None:
    first = StateDir(tmp_path, "demo")
    first.lock()
    try:
        StateDir(tmp_path, "demo").lock()
    except RuntimeError as exc:
        assert "in use" in str(exc)
    else:
        raise AssertionError("a second process could take the same state directory")
    finally:
        first._lock.close()
    again = StateDir(tmp_path, "demo")
    again.lock()  # free again once the holder is gone
    again._lock.close()
