"""End to end with real processes: redis-server, the coordinator under uvicorn, agent processes
and the load generator, through `dexp demo`'s stack."""

from __future__ import annotations

import io
import json
import math
import re
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.certificate import certified_failure
from common.params import corrupted_local_confidence
from common.votes import tie_certificate
from dexp.demo import LocalStack, local_stack, run_demo
from load_generator.generator import LoadGenerator, exit_code, format_summary
from load_generator.settings import LoadSettings
from tests.e2e.proxy import RecordingProxy
from tests.services.helpers import activation_streams


def test_demo_identifies_an_eps_optimal_arm() -> None:
    summary = run_demo("feraud-1", agents=32, processes=2, seed=7, max_seconds=240)
    assert summary.status == "identified"
    assert summary.correct is True
    assert summary.identified_arm == 0
    assert summary.threshold == 29
    # One vote per (agent, arm) at most, and arms leave at M votes: with concurrent agents only a
    # few late votes can pass M*K - 1.
    assert summary.messages <= summary.threshold * 10 - 1 + summary.ignored_messages
    assert len(summary.eliminations) == 9
    assert [e["votes"] for e in summary.eliminations] == [29] * 9


def test_demo_runs_the_sharpest_subroutine_in_the_services() -> None:
    """The agent service runs any subroutine of the registry: DE with stitched-LUCB on Problem 1
    (about a sixth of SER3's activations in simulation, docs/RESULTS.md section 8)."""
    config = AlgorithmConfig(subroutine="stitched-lucb")
    summary = run_demo("feraud-1", config, agents=32, processes=2, seed=7, max_seconds=240)
    assert summary.status == "identified" and summary.correct is True
    assert summary.identified_arm in (0, 1)  # both are eps-optimal at eps = 0.25
    assert [e["votes"] for e in summary.eliminations] == [29] * 9


def test_agents_send_only_arm_indices() -> None:
    """Every request the coordinator receives from agents: enrollment, reading the global set, a
    vote whose body is exactly an arm index (and the reset epoch, and when it began), or the
    renewal of the agents' leases, whose body is exactly their tokens. No reward, no mean.

    What an agent sends does not depend on the problem's size, so this runs a small one (3 arms,
    M = 5, 10 agents in 2 processes: a run of a few seconds) rather than Problem 1 again, which
    test_demo_identifies_an_eps_optimal_arm and every fault test run end to end. Every kind of
    request still occurs: enrollments, reads of the global set, and the (K - 1) M votes at least
    that end the run."""
    proxy = RecordingProxy()
    means = "0.9,0.5,0.1"  # gaps above epsilon = 0.25: identified, never tied
    config = AlgorithmConfig(delta=0.05, eta=0.5)
    n_arms, threshold = 3, 5
    assert config.threshold(n_arms) == threshold
    arms = [f"arm-{k}" for k in range(n_arms)]
    try:
        with local_stack(config, arms, 10, 2, seed=3, agent_url=proxy.start) as stack:
            settings = LoadSettings(
                coordinator_url=stack.coordinator_url,
                redis_url=stack.redis_url,
                problem="",
                means=means,
                seed=3,
                max_seconds=240,
                settle_seconds=1.0,
            )
            with LoadGenerator(settings) as generator:
                summary = generator.run()
    finally:
        proxy.stop()
    assert summary.status == "identified" and summary.identified_arm == 0
    votes = [r for r in proxy.requests if r.path.endswith("/votes")]
    assert len(votes) >= (n_arms - 1) * threshold
    assert any(r.path == "/v1/agents" for r in proxy.requests)
    assert any(r.path == "/v1/experiments/demo" for r in proxy.requests)
    for request in proxy.requests:
        if request.path.endswith("/votes"):
            assert request.method == "POST"
            body = json.loads(request.body)
            assert set(body) <= {"arm", "epoch", "epoch_started_at"} and "arm" in body
            assert all(type(v) is int for v in body.values())
            assert 0 <= body["arm"] < n_arms
        elif request.path == "/v1/agents":
            # the agent service's agents say they are simulated (they play the load generator),
            # and take a lease, which their host renews
            body = json.loads(request.body)
            assert body == {"experiment": "demo", "simulated": True, "lease": True}
        elif request.path == "/v1/agents/leases":  # the renewal: the agents' own tokens only
            assert request.method == "POST"
            body = json.loads(request.body)
            assert set(body) == {"tokens"} and body["tokens"]
            assert all(re.fullmatch(r"demo-[0-9a-f]{10}\.[\w-]+", t) for t in body["tokens"])
        else:  # the global set (read, or its event stream), and the agent's own votes (to
            # re-send one a failover lost)
            assert request.method == "GET" and request.body == b""
            assert request.path in (
                "/v1/experiments/demo",
                "/v1/experiments/demo/events",
                "/v1/agents/me",
            )


@pytest.mark.parametrize("agents", [10])
def test_too_few_agents_is_rejected_plainly(agents: int) -> None:
    with pytest.raises(Exception, match="M=29"):
        run_demo("feraud-1", agents=agents, processes=1)


# -- runs that end without one arm: ties, and stalls -------------------------------------------
def read(raw: redis.Redis, stream: str) -> bool:
    """Whether an agent reads `stream`: its consumer group has a consumer (XREADGROUP made it)."""
    try:
        return bool(raw.xinfo_consumers(stream, keys.ACTIVATION_GROUP))
    except redis.ResponseError:  # no stream or no group yet
        return False


def test_two_equal_arms_and_too_few_agents_end_tied() -> None:
    """0.8, 0.8, 0.2 with M = 10 and 10 agents (< 2M - 1 = 19): arm 2 leaves, then each agent
    keeps arm 0 or arm 1 and votes against the other, and neither can reach 10 votes (unless all
    ten keep the same one: probability 2^-9). The run stops tied, both candidates eps-optimal."""
    config = AlgorithmConfig(delta=0.001, eta=0.5)
    assert config.threshold(3) == 10
    summary = run_demo(
        None, config, agents=10, processes=1, seed=3, means="0.8,0.8,0.2", max_seconds=120
    )
    assert summary.status == "tied", summary
    assert summary.candidates == [0, 1]
    assert summary.candidate_names == ["arm-0", "arm-1"]
    assert summary.correct is True and exit_code(summary) == 0
    assert summary.identified_arm is None
    # 10 of 10 agents erring, each at most (pi^2 / 24) 0.5: P(Bin(10, p) >= 10) = p^10
    failure = certified_failure(10, 10, math.pi**2 / 24 * 0.5)
    assert summary.certified == tie_certificate(10, 10, failure)
    assert [e["arm"] for e in summary.eliminations] == [2]
    assert "tied" in format_summary(summary, as_json=False)


def test_ce_agents_say_they_settled_so_a_ce_run_ends() -> None:
    """CE drops votes, so the coordinator cannot see from the votes that an agent settled: the
    agents send a settled message, and the run ends (tied or identified) instead of exploring
    until its deadline."""
    xi = 0.05
    eta_xi = corrupted_local_confidence(0.5, xi, 3)
    config = AlgorithmConfig(algorithm="ce", xi=xi, eta=0.5, delta=eta_xi**4.5)
    assert config.threshold(3) == 5
    arms = ["arm-0", "arm-1", "arm-2"]
    with local_stack(config, arms, 8, 1, seed=5) as stack:  # 8 < 2M - 1 = 9
        settings = LoadSettings(
            coordinator_url=stack.coordinator_url,
            redis_url=stack.redis_url,
            problem="",
            means="0.8,0.8,0.2",
            seed=5,
            max_seconds=90,
            settle_seconds=0.5,
        )
        with LoadGenerator(settings) as generator:
            summary = generator.run()
        final = httpx.get(f"{stack.coordinator_url}/v1/experiments/demo", timeout=10).json()
        logs = stack.log_path("agent-0").read_text()
    assert summary.status in ("tied", "identified"), summary
    assert summary.correct is True and exit_code(summary) == 0
    assert "settled agent=" in logs
    if summary.status == "tied":
        assert final["settled_agents"] > 0 and summary.candidates == [0, 1]


def test_a_killed_agent_process_stalls_the_run_and_the_load_generator_says_so() -> None:
    """Two agent processes of two agents each, M = 3: one process is killed once its agents
    enrolled. The other two agents cannot remove an arm alone, their streams drain, and the
    killed ones' streams fill up. The load generator stops after DEXP_STALL_SECONDS and names the
    two agents whose streams are no longer read, instead of running to its deadline."""
    config = AlgorithmConfig(delta=0.2, eta=0.5)  # M = 3
    arms = ["arm-0", "arm-1", "arm-2"]
    with local_stack(config, arms, 4, 2, seed=2) as stack:
        deadline = time.monotonic() + 60  # a safety net
        while httpx.get(f"{stack.coordinator_url}/v1/experiments/demo").json()["agents"] < 4:
            assert time.monotonic() < deadline, "the agents did not enroll"
            time.sleep(0.1)
        # Every agent's stream is being read (its consumer exists): the killed ones' streams then
        # fill up unread, which the load generator tells from streams nobody ever read.
        raw = redis.Redis.from_url(stack.redis_url)
        try:
            ids = [a.decode() for a in raw.zrange(keys.agents("demo"), 0, -1)]
            streams = activation_streams(raw, "demo", ids)
            assert len(streams) == len(ids)
            while not all(read(raw, stream) for stream in streams):
                assert time.monotonic() < deadline, "the agents do not read their streams"
                time.sleep(0.05)
        finally:
            raw.close()
        stack.kill("agent-1")
        settings = LoadSettings(
            coordinator_url=stack.coordinator_url,
            redis_url=stack.redis_url,
            problem="",
            means="0.8,0.5,0.2",
            seed=2,
            max_seconds=60,
            settle_seconds=0,
            max_backlog=2000,
            stall_seconds=2,
        )
        out = io.StringIO()
        with LoadGenerator(settings, out=out) as generator:
            summary = generator.run()
    # stalled (exit 5), not run to its deadline (max_seconds: "timeout", exit 1)
    assert summary.status == "stalled" and exit_code(summary) == 5
    assert "s (DEXP_STALL_SECONDS=2) while " in summary.stall[0]
    assert summary.stall[0].endswith("are pending")
    assert summary.stall[1].startswith(
        "agents: 4 enrolled; of the 4 this run feeds, 2 read their stream (or have nothing to "
        "read), 2 have entries they have not read for "
    )
    assert summary.stall[-1] == f"coordinator: {settings.coordinator_url} answers (ready)"
    assert out.getvalue().count("activations") <= 3  # no progress line repeated unchanged
    assert summary.stall[1] in format_summary(summary, as_json=False)


# A process that notes when SIGTERM reached it and when it exits (after `linger` seconds).
NOTING = """
import signal, sys, time
name, linger, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
def note(what):
    with open(path, "a") as f:
        f.write(f"{name} {what}\\n")
def ended(*_):
    note("sigterm")
    time.sleep(linger)
    note("exited")
    sys.exit(0)
signal.signal(signal.SIGTERM, ended)
note("ready")
while True:
    time.sleep(0.05)
"""


def test_stop_ends_the_agent_processes_before_the_coordinator(tmp_path: Path) -> None:
    """An agent process ends while its coordinator still answers (a coordinator gone first made
    each agent wait out its retry back-off before it exited: seconds at the end of every run)."""
    notes = tmp_path / "notes"
    stack = LocalStack(tmp_path)
    for name, linger in (("redis", "0"), ("coordinator", "0"), ("agent-0", "0.3")):
        stack.spawn(name, [sys.executable, "-c", NOTING, name, linger, str(notes)], {})
    deadline = time.monotonic() + 30  # a safety net: a loaded machine starts them slowly
    while not notes.exists() or notes.read_text().count("ready") < 3:
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.02)
    stack.stop()
    lines = [line for line in notes.read_text().splitlines() if not line.endswith("ready")]
    assert lines[:2] == ["agent-0 sigterm", "agent-0 exited"], lines
    assert sorted(lines[2:]) == sorted(
        f"{n} {w}" for n in ("coordinator", "redis") for w in ("sigterm", "exited")
    )
    assert all(process.poll() == 0 for process in stack.processes)
