"""The load generator's lease (one generator per experiment), its live figures in the coordinator's
GET /v1/experiments/{id}, the per-epoch message count, and a summary whose figures are this run's
and this epoch's: over real HTTP (uvicorn -> FastAPI -> real Redis), with real agent processes
(`python -m agent`) where a run must play."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from common import redis_keys as keys
from load_generator.__main__ import main as load_generator_main
from load_generator.backlog import BacklogGauge
from load_generator.generator import (
    HELD_BACKLOGS,
    LoadGenerator,
    Summary,
    exit_code,
    format_summary,
)
from load_generator.settings import LoadSettings
from load_generator.streams import trim_acknowledged

from .helpers import (
    ENROLLMENT_SECRET,
    activation_streams,
    admin_headers,
    create_experiment,
    enroll_agents,
)

ARMS = ["A", "B", "C"]
M3 = {"delta": 0.2, "eta": 0.5}  # DE: M = 3
M5 = {"delta": 0.05, "eta": 0.5}  # DE: M = ceil(log 0.05 / log 0.5) = 5
MEANS = "0.9,0.5,0.1"
# DEXP_LEASE_SECONDS of a newcomer here: it waits 1 + 1 s before it gives up. A holder's lease is
# HELD_LEASE long (renewed every second from a thread): no stall of a loaded machine lets it lapse
# while a newcomer waits, so the newcomer meets a lease that is held, not one that expired.
LEASE = 1.0
HELD_LEASE = 30.0
PUBLIC_FIELDS = {
    "run",
    "host",
    "started_at",
    "updated_at",
    "epoch",
    "activations",
    "delivered",
    "backlog",
    "activations_per_second",
}


def experiment(client: httpx.Client, exp: str) -> dict[str, Any]:
    response = client.get(f"/v1/experiments/{exp}")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def vote(client: httpx.Client, exp: str, headers: dict[str, str], arm: int, epoch: int) -> None:
    response = client.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=headers
    )
    assert response.status_code == 200, response.text


def settings(coordinator_url: str, redis_url: str, exp: str, **overrides: Any) -> LoadSettings:
    values: dict[str, Any] = {
        "coordinator_url": coordinator_url,
        "redis_url": redis_url,
        "experiment": exp,
        "problem": "",
        "means": MEANS,
        "seed": 1,
        "settle_seconds": 0,
        "agent_wait_seconds": 20,
        "max_seconds": 30,
        "batch": 100,
        "max_backlog": 600,
        "stall_seconds": 10,
        "lease_seconds": LEASE,
    }
    values.update(overrides)
    return LoadSettings(**values)


def generator_env(monkeypatch: pytest.MonkeyPatch, load: LoadSettings) -> None:
    """`load` as the DEXP_* environment `python -m load_generator` reads."""
    for name, value in load.model_dump().items():
        if value is not None and name != "json_output":
            monkeypatch.setenv(f"DEXP_{name.upper()}", str(value))


@pytest.fixture
def agent_process(coordinator_url: str, clean_redis: str) -> Iterator[Callable[[str, int], None]]:
    """Starts `python -m agent` hosting n agents of an experiment, and waits for them to enroll;
    every process is killed at the end."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(exp: str, n: int) -> None:
        env = {
            **os.environ,
            "DEXP_COORDINATOR_URL": coordinator_url,
            "DEXP_REDIS_URL": clean_redis,
            "DEXP_EXPERIMENT": exp,
            "DEXP_ENROLLMENT_SECRET": ENROLLMENT_SECRET,
            "AGENTS_PER_REPLICA": str(n),
            "DEXP_SEED": "11",
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "agent"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        processes.append(process)
        deadline = time.monotonic() + 60  # a safety net: a loaded machine starts them slowly
        with httpx.Client(base_url=coordinator_url, timeout=5, trust_env=False) as http:
            while experiment(http, exp)["agents"] < n:
                assert process.poll() is None, "the agent process ended"
                assert time.monotonic() < deadline, "the agents did not enroll"
                time.sleep(0.05)

    yield start
    for process in processes:
        process.kill()  # its Redis is emptied before the next test: nothing to finish
        process.wait()


def check_run_figures(summary: Summary) -> None:
    """Every figure of a run is this run's, and none is negative."""
    assert summary.activations_delivered >= summary.activations_processed >= 0
    assert summary.activations_processed >= summary.sample_complexity >= 0
    assert summary.activations_per_second >= 0 and summary.wall_seconds >= 0
    assert summary.epoch_messages <= summary.messages
    assert summary.run_messages <= summary.messages


# -- one load generator per experiment ---------------------------------------------------------
def test_a_second_generator_is_refused_while_the_first_completes(
    client: httpx.Client,
    coordinator_url: str,
    clean_redis: str,
    agent_process: Callable[[str, int], None],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The first generator holds the lease while it waits for agents and plays; a second one on
    the same experiment waits out its own lease's TTL (plus a second), then exits 6 with one line
    naming the first run. The first completes, with figures of its own, and its live figures are
    in the coordinator's experiment document while it runs (without the pid), null after.

    The first cannot finish before the second gave up, whatever the machine's speed: its agents
    are started only then."""
    create_experiment(client, id="two", arms=ARMS, **M3)
    first = LoadGenerator(
        settings(
            coordinator_url, clean_redis, "two", lease_seconds=HELD_LEASE, agent_wait_seconds=60
        ),
        out=io.StringIO(),
    )
    with first, ThreadPoolExecutor(1) as pool:
        running = pool.submit(first.run)
        deadline = time.monotonic() + 30
        while experiment(client, "two")["load_generator"] is None:
            assert not running.done(), running.result()
            assert time.monotonic() < deadline, "the first generator took no lease"
            time.sleep(0.02)
        live = experiment(client, "two")["load_generator"]
        assert first.lease is not None and live["run"] == first.lease.run
        assert set(live) == PUBLIC_FIELDS  # no pid
        assert live["host"] == socket.gethostname() and live["epoch"] == 0
        assert live["started_at"] <= live["updated_at"] <= time.time() * 1000 + 1000

        generator_env(monkeypatch, settings(coordinator_url, clean_redis, "two"))
        started = time.monotonic()
        assert load_generator_main([]) == 6
        waited = time.monotonic() - started
        assert not running.done()  # the first still waits for its agents, lease held
        agent_process("two", 3)
        summary = running.result(timeout=60)
    # it waited its own DEXP_LEASE_SECONDS + 1 s, not the holder's lease (30 s)
    assert LEASE + 1 <= waited < HELD_LEASE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert re.fullmatch(
        rf"error: another load generator \(run {first.lease.run} on host "
        rf"{re.escape(socket.gethostname())}, started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, "
        r"[\d,]+ activations so far\) is feeding experiment two; stop it, or wait for it to end",
        line,
    ), line

    assert summary.status == "identified" and summary.correct is True, summary
    assert exit_code(summary) == 0 and not summary.ended_before_run
    assert summary.run == first.lease.run
    check_run_figures(summary)
    assert summary.activations_processed > 0
    assert (summary.first_epoch, summary.epoch, summary.epochs_seen) == (0, 0, 1)
    final = experiment(client, "two")
    assert final["load_generator"] is None  # released at the end
    # the result stays, with the run's figures read from its lease at the decision
    result = final["result"]
    assert result["best_arm"]["index"] == summary.identified_arm and result["epoch"] == 0
    assert result["decided_at"] == final["eliminations"][-1]["time"]
    assert result["load_generator"]["run"] == first.lease.run
    # the summary's figures (issue 37, point 8: the result kept the last seconds' rate, 1,097/s
    # against the summary's 2,135/s)
    assert result["load_generator"]["activations"] == summary.activations_processed
    assert result["load_generator"]["activations_per_second"] == summary.activations_per_second
    assert summary.epoch_messages == final["epoch_messages"] == final["messages"]
    assert summary.epoch_votes == sum(final["votes"]) <= summary.message_bound == 3 * 3 - 1
    assert json.loads(format_summary(summary, as_json=True))["epochs_seen"] == 1


def test_a_lease_left_by_a_killed_holder_is_waited_out_then_taken(
    client: httpx.Client,
    coordinator_url: str,
    clean_redis: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A lease that outlives the wait refuses the newcomer (exit 6, the holder's figures in the
    line); one that expires meanwhile (its holder was killed) is taken. The experiment is already
    identified: the run says so, plays nothing, and exits 0 with every run figure 0."""
    create_experiment(client, id="dead", arms=ARMS, **M3)
    agents = enroll_agents(client, "dead", 3)
    for agent in agents:
        for arm in (1, 2):
            vote(client, "dead", agent.headers, arm, 0)
    assert experiment(client, "dead")["status"] == "identified"
    lease = {
        "run": "0badc0de",
        "host": "gone-host",
        "pid": 4242,
        "started_at": 1_700_000_000_000,
        "updated_at": 1_700_000_005_000,
        "epoch": 0,
        "activations": 12_345,
        "delivered": 12_500,
        "backlog": 155,
        "activations_per_second": 2469.0,
    }
    raw = redis.Redis.from_url(clean_redis)
    try:
        raw.set(keys.load_generator("dead"), json.dumps(lease), px=int(HELD_LEASE * 1000))
        generator_env(monkeypatch, settings(coordinator_url, clean_redis, "dead"))
        assert load_generator_main([]) == 6
        assert capsys.readouterr().err.strip() == (
            "error: another load generator (run 0badc0de on host gone-host, started 2023-11-14 "
            "22:13:20 UTC, 12,345 activations so far) is feeding experiment dead; stop it, or "
            "wait for it to end"
        )
        assert raw.get(keys.load_generator("dead")) is not None  # not its to delete

        # A killed holder's lease, 0.8 s left; the newcomer may wait far longer (HELD_LEASE + 1 s):
        # it takes the lease once it expired, and not before.
        monkeypatch.setenv("DEXP_LEASE_SECONDS", str(HELD_LEASE))
        started = time.monotonic()
        raw.set(keys.load_generator("dead"), json.dumps(lease), px=800)
        assert load_generator_main([]) == 0
        assert time.monotonic() - started >= 0.75  # 0.8 s by Redis's clock, in whole ms
        assert raw.get(keys.load_generator("dead")) is None  # taken, then released
    finally:
        raw.close()
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines()[-1] == (
        "experiment dead is already identified (epoch 0) before this run: nothing to play; "
        "`dexp experiments reset dead` starts a new epoch"
    )
    framed = captured.out.splitlines()  # one block between two rules (load_generator.__main__)
    assert framed[0].startswith("==== dexp load generator: experiment dead ====")
    assert set(framed[-1]) == {"="} and len(framed[-1]) == len(framed[0])
    out = framed[1:-1]
    assert out[:3] == [
        "experiment        dead: identified",
        "identified arm    A (index 0), eps-optimal: not judged (ended before this run)",
        f"this run          nothing played: the experiment was already identified (epoch 0) "
        f"when run {out[2].rsplit(' ', 2)[-2]} started",
    ]
    assert out[3].startswith("epoch 0           6 votes counted, 6 messages this epoch; ")

    with LoadGenerator(
        settings(coordinator_url, clean_redis, "dead"), out=io.StringIO()
    ) as generator:
        summary = generator.run()
    assert summary.ended_before_run and exit_code(summary) == 0
    assert (summary.status, summary.identified_arm, summary.correct) == ("identified", 0, None)
    assert summary.activations_delivered == summary.activations_processed == 0
    assert summary.sample_complexity == summary.wall_seconds == summary.run_messages == 0


# -- per-epoch messages ----------------------------------------------------------------------
def test_epoch_messages_count_this_epoch_and_a_reset_zeroes_them(
    client: httpx.Client, clean_redis: str
) -> None:
    created = create_experiment(client, id="ep", arms=ARMS, **M3)
    assert (created["epoch_messages"], created["messages"]) == (0, 0)
    assert created["epoch_started_at"] == created["created_at"]
    assert created["load_generator"] is None
    a, b = enroll_agents(client, "ep", 2)
    vote(client, "ep", a.headers, 1, 0)
    vote(client, "ep", b.headers, 1, 0)
    vote(client, "ep", b.headers, 1, 0)  # a duplicate: a message all the same
    state = experiment(client, "ep")
    assert (state["epoch_messages"], state["messages"], state["ignored_messages"]) == (3, 3, 1)

    reset = client.post("/v1/experiments/ep/reset", headers=admin_headers())
    assert reset.status_code == 200, reset.text
    state = experiment(client, "ep")
    assert (state["epoch"], state["epoch_messages"], state["messages"]) == (1, 0, 3)
    assert state["epoch_started_at"] >= created["created_at"]
    assert state["epoch_started_at"] <= time.time() * 1000 + 1000
    vote(client, "ep", a.headers, 2, 0)  # a stale epoch's vote, received in epoch 1
    vote(client, "ep", a.headers, 2, 1)
    state = experiment(client, "ep")
    assert (state["epoch_messages"], state["messages"], state["ignored_messages"]) == (2, 5, 2)

    # An experiment created before the fields existed: epoch_messages reads 0, and the epoch's
    # start is known only in epoch 0 (its creation).
    raw = redis.Redis.from_url(clean_redis)
    try:
        # never published either: its first publication is taken from its voter sets
        raw.hdel(keys.meta("ep"), "epoch_messages", "epoch_started_at", "p_votes")
        state = experiment(client, "ep")
        assert (state["epoch_messages"], state["epoch_started_at"]) == (0, None)
        raw.hset(keys.meta("ep"), "epoch", 0)
        assert experiment(client, "ep")["epoch_started_at"] == created["created_at"]
    finally:
        raw.close()


def test_after_a_reset_the_summary_counts_messages_per_epoch(
    client: httpx.Client,
    coordinator_url: str,
    clean_redis: str,
    agent_process: Callable[[str, int], None],
) -> None:
    """An admin reset once the first arm left: the run ends in epoch 1, and the summary puts that
    epoch's messages against M*K - 1 and the total of both epochs apart."""
    create_experiment(client, id="rs", arms=ARMS, **M5)
    agent_process("rs", 5)
    generator = LoadGenerator(settings(coordinator_url, clean_redis, "rs", rate=4000))
    reset_at: dict[str, Any] = {}

    def reset_after_the_first_elimination() -> None:
        deadline = time.monotonic() + 60  # a safety net: a loaded machine starts them slowly
        with httpx.Client(base_url=coordinator_url, timeout=5, trust_env=False) as http:
            while time.monotonic() < deadline:
                state = experiment(http, "rs")
                if state["version"] >= 1:
                    reset_at.update(state)
                    response = http.post("/v1/experiments/rs/reset", headers=admin_headers())
                    assert response.status_code == 200
                    return
                time.sleep(0.005)

    resetter = threading.Thread(target=reset_after_the_first_elimination)
    resetter.start()
    try:
        summary = generator.run()
    finally:
        resetter.join()
        generator.close()
    print(format_summary(summary, as_json=False))
    assert reset_at, "no arm left in epoch 0"
    assert summary.status == "identified" and summary.correct is True, summary
    check_run_figures(summary)
    assert (summary.first_epoch, summary.epoch, summary.epochs_seen) == (0, 1, 2)
    final = experiment(client, "rs")
    assert summary.messages == final["messages"] == summary.run_messages
    assert summary.epoch_messages == final["epoch_messages"]
    assert summary.message_bound == 5 * 3 - 1
    assert summary.epoch_votes <= summary.epoch_messages <= summary.message_bound
    assert summary.messages > summary.epoch_messages  # epoch 0's votes are in the total only
    assert summary.messages >= reset_at["messages"] + summary.epoch_messages
    text = format_summary(summary, as_json=False).splitlines()
    assert text[4] == (
        f"epoch 1           {summary.epoch_votes} votes counted, {summary.epoch_messages} "
        "messages this epoch; bound M*K-1 = 14 (counted votes per epoch, agents acting one at a "
        "time)"
    )
    assert text[5] == (
        f"all epochs        {summary.messages} messages ({summary.ignored_messages} ignored) "
        f"since the experiment began, {summary.messages} during this run; this run saw 2 epochs "
        "(0 to 1)"
    )


# -- the live figures, read defensively --------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"not json", None),
        (b"[1, 2]", None),
        (b'"a string"', None),
        (b"\xff\xfe", None),
        (b"{" * 5000, None),
        (
            json.dumps(
                {
                    "run": 7,
                    "host": "evil\x1b[31mhost",
                    "pid": 1,
                    "started_at": -1,
                    "updated_at": True,
                    "epoch": 1.5,
                    "activations": "many",
                    "delivered": 2**60,
                    "backlog": 3,
                    "activations_per_second": "fast",
                    "token": "secret",
                }
            ).encode(),
            {**dict.fromkeys(PUBLIC_FIELDS), "backlog": 3},
        ),
        (
            b'{"activations_per_second": NaN, "run": "r1"}',
            {**dict.fromkeys(PUBLIC_FIELDS), "run": "r1"},
        ),
    ],
    ids=["text", "array", "string", "binary", "huge", "bad-fields", "nan"],
)
def test_a_malformed_lease_reads_as_null_never_a_500(
    client: httpx.Client, clean_redis: str, value: bytes, expected: dict[str, Any] | None
) -> None:
    create_experiment(client, id="bad", arms=ARMS, **M3)
    raw = redis.Redis.from_url(clean_redis)
    try:
        raw.set(keys.load_generator("bad"), value)
        assert experiment(client, "bad")["load_generator"] == expected
    finally:
        raw.close()


def test_a_lease_of_another_type_reads_as_null(client: httpx.Client, clean_redis: str) -> None:
    create_experiment(client, id="hash", arms=ARMS, **M3)
    raw = redis.Redis.from_url(clean_redis)
    try:
        raw.hset(keys.load_generator("hash"), mapping={"run": "x"})
        state = experiment(client, "hash")
        assert state["load_generator"] is None and state["status"] == "exploring"
        assert client.get("/v1/experiments/hash/best-arm").status_code == 200
    finally:
        raw.close()


# -- the backlog, read from a sample of the streams (load_generator/backlog.py) -----------------
def test_the_backlog_gauge_is_exact_on_few_streams_and_estimates_many(clean_redis: str) -> None:
    """On real streams: exact while at most `sample` streams may hold entries, and on a full poll;
    from a sample otherwise, within a few percent, reading about `sample` streams; consumption is
    seen exactly; this run's own entries exclude those an earlier run left. The agents only read
    and acknowledge; the polls delete what they acknowledged, and Redis never holds more than
    the gauge's bound."""
    raw = redis.Redis.from_url(clean_redis)
    streams = [keys.activations("gauge", f"a{i}", keys.stream_secret("t")) for i in range(2000)]
    pipe = raw.pipeline(transaction=False)
    for stream in streams:  # as the coordinator does when it enrolls an agent
        pipe.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
    pipe.execute()

    def measure(indices: Any) -> Any:
        return trim_acknowledged(raw, [streams[i] for i in indices])

    def held() -> int:  # what Redis holds of the streams, acknowledged or not
        pipe = raw.pipeline(transaction=False)
        for stream in streams:
            pipe.xlen(stream)
        return sum(pipe.execute())

    def deliver(counts: dict[int, int]) -> None:
        pipe = raw.pipeline(transaction=False)
        for i, count in counts.items():
            for _ in range(count):
                pipe.xadd(streams[i], {"r": "x"})
        pipe.execute()
        sent = np.zeros(len(streams), dtype=np.int64)
        sent[list(counts)] = list(counts.values())
        gauge.delivered(sent)

    def consume(i: int, count: int) -> int:  # as an agent does: read, then acknowledged
        read = raw.xreadgroup(keys.ACTIVATION_GROUP, "agent", {streams[i]: ">"}, count=count)
        ids = [entry_id for entry_id, _ in read[0][1]] if read else []
        return int(raw.xack(streams[i], keys.ACTIVATION_GROUP, *ids)) if ids else 0

    try:
        raw.xadd(streams[0], {"r": "old"})  # an earlier run's entry
        gauge = BacklogGauge(len(streams), measure, sample=100, rng=np.random.default_rng(7))
        first = gauge.poll()
        assert (first.backlog, first.own, first.exact, first.read) == (1, 0, True, 2000)

        deliver({0: 2, 5: 3, 9: 1})
        reading = gauge.poll()
        assert (reading.backlog, reading.own, reading.exact, reading.read) == (7, 6, True, 3)
        assert not reading.consumed
        consume(0, 2)  # the old entry and one of this run's
        assert held() == 7  # acknowledged, still there
        reading = gauge.poll()
        assert (reading.backlog, reading.own, reading.consumed) == (5, 5, True)
        assert held() == 5  # the poll deleted them
        assert not gauge.poll().consumed and gauge.poll().read == 3  # nothing since; same streams

        # Many streams hold entries: a sample is read, the estimate is close, the bound holds.
        rng = np.random.default_rng(3)
        deliver({i: int(n) for i, n in enumerate(rng.integers(1, 6, size=2000))})
        truth = held()  # every stream holds its backlog only (the polls above deleted the rest)
        truth -= sum(consume(i, 10) for i in range(0, 2000, 2))  # the agents consumed half
        assert held() > truth  # what they acknowledged is still there
        estimates = []
        for _ in range(5):
            reading = gauge.poll()
            assert not reading.exact and 40 <= reading.read <= 200
            assert reading.consumed
            estimates.append(reading.backlog)
            assert reading.own == reading.backlog  # no entry of an earlier run is left
        assert gauge.bound >= held() >= truth  # Redis holds at most the bound
        assert abs(np.mean(estimates) - truth) <= 0.05 * truth, (estimates, truth)
        full = gauge.poll(full=True)
        assert (full.backlog, full.own, full.exact) == (truth, truth, True)
        assert gauge.bound == truth == held()  # every stream read: the bounds are the lengths
    finally:
        raw.close()


def test_a_poll_deletes_only_what_the_agents_acknowledged(clean_redis: str) -> None:
    """load_generator/streams.py: entries acknowledged go, entries read but not acknowledged
    (pending) and entries not read yet stay. After a lost reply (entries left pending, newer ones
    acknowledged), the acknowledged entries after the oldest pending one stay until it is
    acknowledged: the figure is above the backlog, never below."""
    raw = redis.Redis.from_url(clean_redis)
    stream, group = keys.activations("trim", "a", keys.stream_secret("t")), keys.ACTIVATION_GROUP
    raw.xgroup_create(stream, group, id="0", mkstream=True)
    ids = [raw.xadd(stream, {"r": "x"}) for _ in range(8)]

    def read(count: int) -> list[bytes]:
        reply = raw.xreadgroup(group, "agent", {stream: ">"}, count=count)
        return [entry_id for entry_id, _ in reply[0][1]]

    try:
        assert trim_acknowledged(
            raw, [stream, keys.activations("trim", "none", keys.stream_secret("t"))]
        ) == [8, 0]
        raw.xack(stream, group, *read(2))  # processed
        lost = read(2)  # a read whose reply was lost: pending
        raw.xack(stream, group, *read(2))  # processed after it
        assert trim_acknowledged(raw, [stream]) == [6]  # 2 pending, 2 acknowledged, 2 unread
        assert [e for e, _ in raw.xrange(stream)] == ids[2:]
        raw.xack(stream, group, *lost)  # the agent read its pending entries again
        assert trim_acknowledged(raw, [stream]) == [2]
        assert [e for e, _ in raw.xrange(stream)] == ids[6:]  # the ones never read
        raw.xack(stream, group, *read(2))
        assert trim_acknowledged(raw, [stream]) == [0]
    finally:
        raw.close()


def test_a_run_that_reads_a_sample_of_the_streams_ends_with_exact_figures(
    client: httpx.Client,
    coordinator_url: str,
    clean_redis: str,
    agent_process: Callable[[str, int], None],
) -> None:
    """Forced to estimate its backlog (a sample of 2 of 6 streams), a run stops at its budget once
    the agents processed all of it (read exactly), and a second run ends identified and correct.
    Redis never holds more than HELD_BACKLOGS times max_backlog, and a batch, of the streams
    (acknowledged entries stay until a poll reads their stream)."""
    create_experiment(client, id="sampled", arms=ARMS, **M5)
    agent_process("sampled", 6)
    raw = redis.Redis.from_url(clean_redis)
    streams = activation_streams(raw, "sampled")
    assert len(streams) == 6
    held: list[int] = []
    for budget, status in ((500, "budget"), (50_000_000, "identified")):
        generator = LoadGenerator(
            settings(coordinator_url, clean_redis, "sampled", budget=budget), out=io.StringIO()
        )
        generator.backlog_sample = 2
        xadd = generator._xadd

        def held_then_xadd(batch: list[tuple[str, dict[Any, Any]]], xadd: Any = xadd) -> None:
            held.append(sum(raw.xlen(stream) for stream in streams))
            xadd(batch)

        generator._xadd = held_then_xadd  # type: ignore[method-assign]
        with generator:
            summary = generator.run()
        assert summary.status == status, summary
        assert held and max(held) < HELD_BACKLOGS * 600, max(held)  # before a batch of 100
        check_run_figures(summary)
        # max_backlog and a batch, and the error of estimates from 2 streams: coarse, bounded
        assert summary.peak_backlog <= 2 * (600 + 100)
        if status == "budget":
            assert summary.activations_processed == summary.activations_delivered == 500
            assert exit_code(summary) == 1
    assert summary.correct is True and exit_code(summary) == 0
    assert generator.gauge is not None
    assert generator.gauge.polls > generator.gauge.full_polls  # some polls read a sample
    raw.close()
