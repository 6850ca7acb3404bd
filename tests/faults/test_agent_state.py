"""The agent's recovery bookkeeping without processes: its state files, the pending/acknowledged
record of its votes, and the re-sending of votes a coordinator lost (agent/state.py, library.py)."""

from __future__ import annotations

import json
import stat
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from agent.library import Agent, GlobalView
from agent.state import Acknowledged, AgentRecord, StateDir
from clients.coordinator import CoordinatorClient
from common.algorithms import AlgorithmConfig

ARMS = 4


class FakeCoordinator:
    """The calls an agent makes after enrolling: GET the experiment (public: vote counts, no voter
    sets), POST a vote, GET /v1/agents/me (its own votes), POST a DSER4 reset."""

    def __init__(self) -> None:
        self.version, self.epoch = 0, 0
        self.remaining = set(range(ARMS))
        self.voters: dict[int, set[str]] = {arm: set() for arm in range(ARMS)}
        self.calls: list[tuple[str, int]] = []
        self.me_calls = 0
        self.on_vote: Any = None
        self.resets: list[int] = []
        self.reset_limited = False

    def experiment(self, experiment: str) -> dict[str, Any]:
        return {
            "arms": [f"a{k}" for k in range(ARMS)],
            "params": asdict(AlgorithmConfig()),
            "sigma": None,
            "threshold": 2,
            "epoch": self.epoch,
            "version": self.version,
            "remaining_arms": sorted(self.remaining),
            "votes": [len(self.voters[arm]) for arm in range(ARMS)],
            "created_at": 1234,
        }

    def me(self, token: str) -> dict[str, Any]:
        agent = token.split(".")[0]
        self.me_calls += 1
        return {
            "agent_id": agent,
            "experiment": "demo",
            "index": 1,
            "epoch": self.epoch,
            "version": self.version,
            "voted_against": [arm for arm in range(ARMS) if agent in self.voters[arm]],
        }

    def reset(self, experiment: str, token: str, epoch: int) -> dict[str, Any] | None:
        self.resets.append(epoch)
        if self.reset_limited:
            return None  # the client's answer to a 429
        self.epoch += 1
        self.voters = {arm: set() for arm in range(ARMS)}
        self.remaining = set(range(ARMS))
        return {"epoch": self.epoch}

    def vote(
        self, experiment: str, token: str, arm: int, epoch: int, started: int | None = None
    ) -> dict[str, Any]:
        agent = token.split(".")[0]
        self.calls.append((agent, arm))
        if self.on_vote is not None:
            self.on_vote(agent, arm)
        if agent in self.voters[arm]:  # common.votes.decide_vote's order
            outcome = "duplicate"
        elif arm not in self.remaining:
            outcome = "arm_out"
        else:
            self.voters[arm].add(agent)
            outcome = "counted"
        return {
            "outcome": outcome,
            "votes": len(self.voters[arm]),
            "version": self.version,
            "epoch": self.epoch,
        }


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
        "epoch_starts",
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
    assert agent.check_reason() is None
    assert agent.reconcile() == 0 and coordinator.me_calls == 0  # no reason: no request
    # The failover: the new primary lacks the vote on arm 1, and the elimination (version 0).
    coordinator.voters[1].clear()
    coordinator.voters[2].clear()
    coordinator.remaining.add(2)
    coordinator.version = 0
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.view.regressions == 1
    assert agent.view.remaining == frozenset(range(ARMS))  # the older state is taken
    assert agent.check_reason() == "regression"
    assert agent.reconcile() == 2
    assert coordinator.me_calls == 1
    assert coordinator.voters[1] == {"demo-a1"} and coordinator.voters[2] == {"demo-a1"}
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.check_reason() is None  # checked since the regression, counts are back
    assert agent.votes_sent == 2 and agent.votes_resent == 2


def test_a_public_count_below_the_acknowledged_one_is_a_loss() -> None:
    """No regression of the version (e.g. other votes moved it on), but arm 1 shows fewer votes
    than this agent's acknowledged vote did: it asks, and re-sends exactly the lost vote."""
    coordinator = FakeCoordinator()
    coordinator.voters[1].update({"x", "y"})
    agent = make_agent(coordinator)
    agent._send([1, 3])
    assert [v.votes for v in agent.record.acknowledged] == [3, 1]
    coordinator.voters[1] = {"x"}  # this agent's vote and y's lost
    coordinator.version = 5  # forward: no regression to see
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.view.regressions == 0
    assert agent.view.losses == 1  # the view saw arm 1's count go down: every agent checks
    assert agent.check_reason() == "loss"
    agent.view.lost_at = -1  # without that process-wide sign, the agent's own count tells
    assert agent.check_reason() == "count"
    assert agent.reconcile() == 1
    assert coordinator.calls == [("demo-a1", 1), ("demo-a1", 3), ("demo-a1", 1)]
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.check_reason() is None


def test_a_vote_present_under_a_lower_count_is_not_sent_again() -> None:
    """Other agents' votes were lost, not this one's: one check, nothing re-sent, no re-check."""
    coordinator = FakeCoordinator()
    coordinator.voters[0].update({"x", "y"})
    agent = make_agent(coordinator)
    agent._send([0])
    coordinator.voters[0] = {"demo-a1"}
    coordinator.version = 3
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.reconcile() == 0
    assert coordinator.me_calls == 1
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.check_reason() is None


def test_the_slow_check_runs_only_with_acknowledged_votes_and_when_due() -> None:
    coordinator = FakeCoordinator()
    agent = make_agent(coordinator)
    assert agent.next_check - agent.reconcile_seconds > 0  # never before one period
    assert agent.check_reason(now=agent.next_check + 1) is None  # no vote yet: nothing to check
    agent._send([2])
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.check_reason(now=agent.next_check - 1) is None
    coordinator.voters[2] = {"other"}  # lost, silently: another vote keeps the count at 1
    coordinator.version = 1
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    due = agent.next_check
    assert agent.check_reason(now=due - 1) is None  # no count went down: only the slow check
    assert agent.check_reason(now=due) == "period"
    assert agent.reconcile(now=due) == 1
    assert coordinator.voters[2] == {"other", "demo-a1"}
    assert agent.view.losses == 1  # news for the process: its other agents check too
    period = agent.reconcile_seconds
    assert due + 0.5 * period <= agent.next_check <= due + 1.5 * period
    assert agent.check_reason(now=due) is None  # its own check is done


def test_a_vote_reply_with_a_lower_count_makes_every_agent_of_the_process_check() -> None:
    coordinator = FakeCoordinator()
    first = make_agent(coordinator)
    second = Agent(
        coordinator,  # type: ignore[arg-type]
        first.view,  # one view per process
        "demo-a2",
        "demo-a2.secret",
        np.random.default_rng(1),
    )
    coordinator.voters[2].update({"x", "y"})
    first._send([0])
    second._send([1])
    first._send([2])  # its reply: 3 votes on arm 2
    coordinator.voters[0].clear()  # the failover: votes lost, version unchanged
    coordinator.voters[1].clear()
    coordinator.voters[2] = {"x"}
    assert first.view.losses == 0
    second._send([2])  # its reply: 2 votes on arm 2, after 3 seen
    assert first.view.losses == 1
    assert first.check_reason() == "loss" and second.check_reason() == "loss"
    assert first.reconcile() == 2  # arms 0 and 2
    assert second.reconcile() == 1  # arm 1
    assert coordinator.me_calls == 2
    assert coordinator.voters[2] == {"x", "demo-a1", "demo-a2"}
    assert first.check_reason() is None and second.check_reason() is None


def test_a_lost_vote_on_an_arm_eliminated_meanwhile_is_recorded_as_arm_out() -> None:
    coordinator = FakeCoordinator()
    agent = make_agent(coordinator)
    agent._send([3])
    coordinator.voters[3].clear()  # lost ...
    coordinator.remaining.discard(3)  # ... and the arm left anyway, on other agents' votes
    coordinator.version = 0  # ... and the version went back
    agent.view.version = 1
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.reconcile() == 1
    assert agent.record.acknowledged == [Acknowledged(3, 0, "arm_out")]
    agent.view.refresh(coordinator)  # type: ignore[arg-type]
    assert agent.reconcile(now=agent.next_check - 1) == 0  # not in a voter set, the books say so


def test_a_vote_acknowledged_after_the_last_read_is_not_missing() -> None:
    coordinator = FakeCoordinator()
    agent = make_agent(coordinator)
    coordinator.voters[0].add("other")  # the state read below predates the vote
    agent._send([0])
    coordinator.voters[0].clear()
    assert agent.check_reason() is None  # the view predates the vote: its count proves nothing
    assert agent.missing_votes(set(), before_seq=agent.view.snapshot_seq) == []


def test_a_rate_limited_dser4_reset_resets_the_local_statistics_only() -> None:
    coordinator = FakeCoordinator()
    coordinator.reset_limited = True
    agent = make_agent(coordinator)
    agent.local.wants_reset = lambda: True  # type: ignore[method-assign]
    agent.view.config = AlgorithmConfig(subroutine="ser4", phi=0.5)
    assert agent.view.config.global_reset
    restarted: list[object] = []
    agent.local.reset = restarted.append  # type: ignore[method-assign]
    agent.choose()
    assert coordinator.resets == [0] and coordinator.epoch == 0  # asked once, not retried
    assert restarted == [agent.view.remaining] and agent.resets_limited == 1
    coordinator.reset_limited = False
    agent.choose()
    assert coordinator.epoch == 1 and agent.view.epoch == 1 and agent.resets_limited == 1


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


def _client(handler: Any) -> CoordinatorClient:
    client = CoordinatorClient("http://coordinator", retry_max_seconds=0.01)
    client.http = httpx.Client(
        base_url="http://coordinator", transport=httpx.MockTransport(handler)
    )
    return client


def test_the_client_gives_up_a_rate_limited_reset_but_waits_for_a_rate_limited_vote() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if request.url.path.endswith("/reset") or len(calls) == 2:
            return httpx.Response(429, headers={"Retry-After": "0"}, json={"detail": "slow down"})
        return httpx.Response(200, json={"outcome": "counted", "votes": 1})

    client = _client(handler)
    assert client.reset("demo", "demo-a1.secret", 0) is None
    assert calls == ["/v1/experiments/demo/reset"]  # once: not retried
    assert client.vote("demo", "demo-a1.secret", 1, 0)["outcome"] == "counted"
    assert calls[1:] == ["/v1/experiments/demo/votes"] * 2  # the 429 waited, then retried
    assert client.retries == 1
