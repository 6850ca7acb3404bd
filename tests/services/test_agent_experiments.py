"""One agent process hosting agents of several experiments (DEXP_EXPERIMENT=a,b or `*`), on a real
Redis and the real coordinator over HTTP: the AgentService runs its loop in a thread, fed by
activations written to the agents' streams as the load generator writes them. Small problems
(3 arms, M = 2) so that each run ends in a second or two."""

from __future__ import annotations

import itertools
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest
import redis
from pydantic import ValidationError

import agent.streams as streams_module
from agent.enrollment import EnrollmentFailed
from agent.host import AgentService
from agent.settings import AgentSettings
from clients.redis import NotedRetry, connect_redis
from common import redis_keys as keys
from common.wire import encode_rewards
from load_generator.streams import trim_acknowledged

from .helpers import (
    ENROLLMENT_SECRET,
    activation_streams,
    admin_headers,
    config_for_threshold,
    create_experiment,
)

ARMS = ["A", "B", "C"]
MEANS = np.array([0.9, 0.5, 0.1])
CONFIG = config_for_threshold(2)  # M = 2: three agents per experiment can end it
PER_EXPERIMENT = 3


def make_experiment(client: httpx.Client, experiment: str) -> None:
    create_experiment(client, id=experiment, arms=ARMS, delta=CONFIG.delta, eta=CONFIG.eta)


def settings(coordinator_url: str, redis_url: str, experiment: str, **extra: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "coordinator_url": coordinator_url,
        "redis_url": redis_url,
        "experiment": experiment,
        "AGENTS_PER_REPLICA": PER_EXPERIMENT,
        "enrollment_secret": ENROLLMENT_SECRET,
        "seed": 5,
        "poll_seconds": 0.5,
        "discover_seconds": 0.2,
        "redis_retry_max_seconds": 0.2,
        **extra,
    }
    return AgentSettings(**values)


@contextmanager
def running(service: AgentService) -> Iterator[AgentService]:
    """The service's loop in a thread; stopped (and its state directory released) at the end.
    An exception in the loop fails the test."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            service.run()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield service
        assert thread.is_alive() and not errors, errors
    finally:
        service.stop()
        thread.join(timeout=10)
    assert not thread.is_alive() and not errors, errors


def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait for `check`; the timeout is a safety net, never the expected wait."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not after {timeout:g} s"
        time.sleep(0.05)


def agents(client: httpx.Client, experiment: str) -> int:
    return int(client.get(f"/v1/experiments/{experiment}").json()["agents"])


def enrolled(client: httpx.Client, experiment: str) -> list[str]:
    """The experiment's agent ids, as the coordinator's admin sees them."""
    reply = client.get(f"/v1/experiments/{experiment}/agents", headers=admin_headers())
    assert reply.status_code == 200, reply.text
    return sorted(a["agent_id"] for a in reply.json()["agents"])


def hosted_ids(service: AgentService) -> dict[str, list[str]]:
    return {
        e: sorted(a.agent_id for a in h.agents.values())
        for e, h in service.discovery.hosted.items()
    }


def feed(
    redis_url: str, client: httpx.Client, experiments: list[str], timeout: float = 60.0
) -> None:
    """Activations for every agent of `experiments` (Bernoulli rewards, MEANS), with a bounded
    backlog, until each experiment is identified."""
    rng = np.random.default_rng(3)
    r = redis.Redis.from_url(redis_url)
    left = set(experiments)
    deadline = time.monotonic() + timeout
    try:
        while left:
            assert time.monotonic() < deadline, f"not identified: {sorted(left)}"
            for experiment in sorted(left):
                best = client.get(f"/v1/experiments/{experiment}/best-arm").json()
                if best["status"] != "exploring":
                    left.discard(experiment)
                    continue
                streams = activation_streams(r, experiment)
                if sum(trim_acknowledged(r, streams)) > 300 * len(streams):
                    continue
                rewards = (rng.random((100 * len(streams), len(MEANS))) < MEANS).astype(float)
                rows = encode_rewards(rewards, bounded=True)
                pipe = r.pipeline(transaction=False)
                for i, row in enumerate(rows):
                    pipe.xadd(streams[i % len(streams)], {"t": i, "r": row})
                pipe.execute()
            time.sleep(0.05)
    finally:
        r.close()
    for experiment in experiments:
        best = client.get(f"/v1/experiments/{experiment}/best-arm").json()
        assert best["status"] == "identified" and best["best_arm"]["index"] == 0, best


def test_one_process_hosts_agents_of_two_experiments_and_both_end(
    client: httpx.Client, coordinator_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dexp")
    make_experiment(client, "shop")
    make_experiment(client, "checkout")
    with running(AgentService(settings(coordinator_url, redis_url, "shop,checkout,shop"))) as svc:
        assert agents(client, "shop") == agents(client, "checkout") == PER_EXPERIMENT
        ids = hosted_ids(svc)
        assert ids == {"shop": enrolled(client, "shop"), "checkout": enrolled(client, "checkout")}
        assert all(i.startswith("shop-") for i in ids["shop"])
        feed(redis_url, client, ["shop", "checkout"])
        # An experiment of the list deleted: dropped, the process carries on; created again, it
        # gets new agents (the old ones' tokens died with it).
        assert client.delete("/v1/experiments/shop", headers=admin_headers()).status_code == 204
        until(lambda: "shop" not in svc.discovery.hosted, "shop dropped")
        make_experiment(client, "shop")
        until(
            lambda: "shop" in svc.discovery.hosted and agents(client, "shop") == PER_EXPERIMENT,
            "again",
        )
        assert set(hosted_ids(svc)["shop"]).isdisjoint(ids["shop"])
        assert hosted_ids(svc)["checkout"] == ids["checkout"]
    log = caplog.text
    assert "experiment shop was deleted: its 3 agent(s) here are dropped" in log
    assert "Traceback" not in log


def test_star_follows_experiments_created_and_deleted(
    client: httpx.Client, coordinator_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dexp")
    make_experiment(client, "first")
    service = AgentService(settings(coordinator_url, redis_url, "*"))
    discoveries = [0]  # rounds of discovery completed
    real_discover = service.discovery.discover

    def counted(report: bool = True) -> dict[str, str]:
        found = real_discover(report)
        discoveries[0] += 1
        return found

    service.discovery.discover = counted  # type: ignore[method-assign]
    with running(service):
        assert agents(client, "first") == PER_EXPERIMENT  # enrolled at start
        make_experiment(client, "later")  # as an operator does with the CLI
        until(lambda: agents(client, "later") == PER_EXPERIMENT, "agents of the new experiment")
        until(lambda: set(service.discovery.hosted) == {"first", "later"}, "both hosted")
        assert client.delete("/v1/experiments/first", headers=admin_headers()).status_code == 204
        until(lambda: set(service.discovery.hosted) == {"later"}, "the deleted experiment dropped")
        dropped = discoveries[0]
        feed(redis_url, client, ["later"])  # the other one keeps working
        # rounds of discovery since the drop, and the loop's reads between them
        until(lambda: discoveries[0] >= dropped + 2, "two rounds of discovery since the drop")
        r = redis.Redis.from_url(redis_url)
        try:  # nothing of the deleted experiment came back (no stream recreated, no agent)
            # its own slot {first} and its streams' shard tags {first~s<k>}
            assert not list(r.scan_iter(match="dexp:{first[}~]*"))
        finally:
            r.close()
    assert "experiment first was deleted" in caplog.text
    assert "Traceback" not in caplog.text


def test_tickets_of_several_experiments_in_one_file(
    client: httpx.Client,
    coordinator_url: str,
    redis_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each agent takes a ticket of its own experiment; an experiment short of tickets gets a
    clear line and the others are hosted; open enrollment (on at this coordinator) is never
    used; tickets appended to the file later are used."""
    caplog.set_level(logging.INFO, logger="dexp")
    for experiment in ("red", "blue", "green"):
        make_experiment(client, experiment)

    def issue(experiment: str, count: int) -> list[str]:
        reply = client.post(
            f"/v1/experiments/{experiment}/tickets", json={"count": count}, headers=admin_headers()
        )
        assert reply.status_code == 201, reply.text
        return list(reply.json()["tickets"])

    red, blue = issue("red", 2), issue("blue", 1)
    tickets = tmp_path / "tickets.txt"
    tickets.write_text("\n".join([blue[0], red[0], "ticket.blue.forged", "junk", red[1]]) + "\n")
    options = {"tickets_file": str(tickets), "AGENTS_PER_REPLICA": 2}
    service = AgentService(settings(coordinator_url, redis_url, "red,blue,green", **options))
    with running(service):
        assert [agents(client, e) for e in ("red", "blue", "green")] == [2, 1, 0]
        assert hosted_ids(service) == {
            "red": enrolled(client, "red"),
            "blue": enrolled(client, "blue"),
        }
        assert all(i.startswith("blue-") for i in enrolled(client, "blue"))
        tickets.write_text(tickets.read_text() + issue("blue", 1)[0] + "\n")  # appended
        until(lambda: agents(client, "blue") == 2, "blue's second agent, from the new ticket")
        assert len(hosted_ids(service)["blue"]) == 2 and agents(client, "green") == 0
    lines = caplog.text.splitlines()
    [green] = [line for line in lines if "experiment green: no ticket" in line]
    assert "dexp tickets issue green --count 2" in green
    [blue_out] = [line for line in lines if "experiment blue: out of tickets" in line]
    assert "1 of the 2 agent(s) to enroll got one" in blue_out
    assert "dexp tickets issue blue --count 1" in blue_out
    assert "1 ticket(s) ignored: not of the form ticket.<experiment>.<secret>" in caplog.text
    assert not any(t in caplog.text for t in [*red, *blue])  # never a ticket in full


def test_a_restart_reuses_the_agents_of_every_experiment(
    client: httpx.Client, coordinator_url: str, redis_url: str, tmp_path: Path
) -> None:
    """A state directory written by a one-experiment process serves a process of two (same
    layout), and a restart of that one re-uses the agents of both."""
    make_experiment(client, "alpha")
    make_experiment(client, "beta")
    state = {"state_dir": str(tmp_path / "state")}
    with running(AgentService(settings(coordinator_url, redis_url, "alpha", **state))) as one:
        alone = hosted_ids(one)
    with running(AgentService(settings(coordinator_url, redis_url, "alpha,beta", **state))) as two:
        first = hosted_ids(two)
        assert two.discovery.hosted["alpha"].restored == PER_EXPERIMENT
        assert two.discovery.hosted["beta"].restored == 0
    assert first["alpha"] == alone["alpha"]
    with running(
        AgentService(settings(coordinator_url, redis_url, "beta,alpha", **state))
    ) as again:
        assert hosted_ids(again) == first
        assert again.discovery.hosted["beta"].restored == PER_EXPERIMENT
    assert agents(client, "alpha") == agents(client, "beta") == PER_EXPERIMENT  # nobody new
    assert {p.name for p in (tmp_path / "state").glob("agent-*.json")} == {
        f"agent-{i}.json" for ids in first.values() for i in ids
    }


def test_agents_restored_from_an_older_versions_state_are_replaced(
    client: httpx.Client, coordinator_url: str, redis_url: str, tmp_path: Path
) -> None:
    """Agents saved by an older version: enrolled, but their streams under the name without a
    secret (keys.unsecret_activations) and no stream secret kept for them. Restored, the streams
    this version names from their tokens do not exist (NOGROUP), and the process may create none:
    each agent leaves (its old stream goes with it), is forgotten with its saved state, and a new
    one enrolls in its place (agent/discovery.py, Discovery.replace). The process runs on: no
    crash, and the experiment is not dropped and restored over and over."""
    make_experiment(client, "older")
    state = {"state_dir": str(tmp_path / "state")}
    with running(AgentService(settings(coordinator_url, redis_url, "older", **state))) as first:
        old = {a.agent_id: a.token for a in first.discovery.hosted["older"].agents.values()}
    store = redis.Redis.from_url(redis_url)
    for agent, token in old.items():  # as an older version left them
        stream = keys.activations("older", agent, keys.stream_secret(token))
        store.rename(stream, keys.unsecret_activations("older", agent))
        store.hdel(keys.stream_secrets("older"), agent)
    restarted = AgentService(settings(coordinator_url, redis_url, "older", **state))
    hosted = restarted.discovery.hosted["older"]
    assert hosted.restored == PER_EXPERIMENT
    with running(restarted):

        def replaced() -> bool:
            ids = set(hosted_ids(restarted).get("older", []))
            fresh = len(ids) == PER_EXPERIMENT and not ids & set(old)
            return fresh and enrolled(client, "older") == sorted(ids)

        until(replaced, "new agents in the place of the older version's")
        assert restarted.discovery.hosted["older"] is hosted  # never dropped
    assert set(activation_streams(store, "older")) == {
        keys.activations("older", a.agent_id, keys.stream_secret(a.token))
        for a in hosted.agents.values()
    }
    assert not any(store.exists(keys.unsecret_activations("older", a)) for a in old)  # they left
    assert {p.name for p in (tmp_path / "state").glob("agent-*.json")} == {
        f"agent-{a.agent_id}.json" for a in hosted.agents.values()
    }
    store.close()


def test_a_fixed_list_none_of_which_can_be_hosted_stops_the_process(
    client: httpx.Client, coordinator_url: str, redis_url: str
) -> None:
    with pytest.raises(EnrollmentFailed, match="experiment nowhere does not exist"):
        AgentService(settings(coordinator_url, redis_url, "nowhere"))


def test_the_experiment_list_is_validated() -> None:
    assert AgentSettings(experiment=" a, b ,a").experiments == ["a", "b"]
    assert AgentSettings(experiment="*").every_experiment
    assert AgentSettings(experiment="demo").experiments == ["demo"]
    for bad in ("*,demo", "demo,", "a b", "x" * 65, "", "a.b"):
        with pytest.raises(ValidationError):
            AgentSettings(experiment=bad)


def test_a_bad_experiment_list_exits_2_with_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agent"],
        env={"DEXP_EXPERIMENT": "demo,not valid!", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("dexp agent: invalid configuration, not starting: DEXP_EXPERIMENT: ")
    assert "'not valid!' is not an experiment id" in line


def test_among_many_streams_the_played_experiments_are_read_and_the_others_swept(
    client: httpx.Client, coordinator_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond READ_CHUNK streams (here 4: 3 experiments x 3 agents), the turns between sweeps
    read only the hot experiment's streams, every non-blocking read names READ_CHUNK streams at
    most, a sweep reads every stream, sweeps start SWEEP_SECONDS apart at least, and an activation
    of a cold experiment is read at the next sweep. Sweeps are told apart by the service's own
    bookkeeping (the next sweep's time, set as one starts), not by the time between reads."""
    monkeypatch.setattr(streams_module, "READ_CHUNK", 4)
    for experiment in ("played", "cold", "quiet"):
        make_experiment(client, experiment)
    service = AgentService(settings(coordinator_url, redis_url, "played,cold,quiet"))
    sweeps: list[float] = []  # per sweep, the next one's earliest time (its start + SWEEP_SECONDS)
    complete: list[int] = []  # the sweeps done (their numbers, from 1)
    # per read of new entries: the experiments it names, its block, the sweep it is part of (its
    # number, from 1; 0 for a blocking read), and the streams it got entries of
    reads: list[tuple[set[str], int | None, int, set[str], set[str]]] = []
    real_xread = service.reader._xread
    real = service.redis.xreadgroup

    def sweep_or_turn(streams: list[str], start: str, block: int | None) -> list[Any]:
        if start != ">" or block is not None:
            return real_xread(streams, start, block)
        sweeps.append(service.reader.next_sweep)  # StreamReader._turn: only a sweep reads so
        reply = real_xread(streams, start, block)
        complete.append(len(sweeps))
        return reply

    def recorded(group: str, consumer: str, streams: dict[str, str], **options: Any) -> Any:
        reply = real(group, consumer, streams, **options)
        if ">" in streams.values():
            block = options.get("block")
            assert block is not None or len(streams) <= 4, len(streams)
            experiments = {service.discovery.streams[s][0].experiment for s in streams}
            got = {
                s.decode() if isinstance(s, bytes) else s for s, entries in reply or [] if entries
            }
            reads.append((experiments, block, 0 if block else len(sweeps), set(streams), got))
        return reply

    service.reader._xread = sweep_or_turn  # type: ignore[method-assign]
    service.redis.xreadgroup = recorded  # type: ignore[method-assign]
    every = set(service.discovery.streams)
    with running(service):
        feed(redis_url, client, ["played"])
        blocking = [e for e, block, *_ in reads if block is not None]
        assert blocking and all(e == {"played"} for e in blocking), blocking[:5]
        # the quiet experiment's streams are named only by sweeps; each sweep names every
        # stream, in chunks; sweeps start SWEEP_SECONDS apart at least
        until(lambda: len(complete) >= 2, "two sweeps")
        assert all(block is None for e, block, *_ in reads if "quiet" in e)
        for sweep in list(complete):
            named = set().union(*(names for *_, n, names, _ in reads if n == sweep))
            assert named == every, sweep
        assert all(b - a >= streams_module.SWEEP_SECONDS for a, b in itertools.pairwise(sweeps))
        # One activation for an agent of the cold experiment: read at the next sweep (or at the
        # one under way, if it had not read that stream yet), and by a sweep only.
        r = redis.Redis.from_url(redis_url)
        try:
            stream = next(s for s in service.discovery.hosted["cold"].agents)
            under_way = len(sweeps)
            r.xadd(stream, {"t": 0, "r": encode_rewards(np.array([[1.0, 0.0, 0.0]]), True)[0]})
            until(
                lambda: trim_acknowledged(r, [stream]) == [0],
                "the cold activation read and acknowledged",
            )
        finally:
            r.close()
        [(block, sweep)] = [(block, n) for _, block, n, _, got in reads if stream in got]
        assert block is None and under_way <= sweep <= under_way + 1, (sweep, under_way)


def test_redis_retries_are_noted_so_that_lost_replies_are_read_again(redis_url: str) -> None:
    """A command sent again by redis-py after its connection broke (its reply, for a read, may
    have been lost with entries now pending) is noted, which makes the loop read the pending
    entries again."""
    r = cast(redis.Redis, connect_redis(redis_url))
    admin = redis.Redis.from_url(redis_url)
    try:
        retry = r.get_retry()
        assert isinstance(retry, NotedRetry) and r.ping() and not retry.retried
        with ThreadPoolExecutor(1) as pool:
            # a blocking command in flight (its 60 s are a safety net: an entry ends it)
            waiting = pool.submit(r.blpop, ["nothing"], 60)

            def blocked() -> list[str]:
                return [c["id"] for c in admin.client_list() if c.get("cmd") == "blpop"]

            until(lambda: len(blocked()) == 1, "the command sent")
            [first] = blocked()
            admin.client_kill_filter(_id=first)  # its connection breaks
            until(lambda: blocked() not in ([], [first]), "the command sent again")
            admin.rpush("nothing", "entry")
            assert waiting.result(timeout=30) == (b"nothing", b"entry")  # answered all the same
        assert retry.retried
    finally:
        r.close()
        admin.close()
