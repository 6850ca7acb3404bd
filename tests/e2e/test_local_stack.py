"""End to end with real processes: redis-server, the coordinator under uvicorn, agent processes
and the load generator, through `dexp demo`'s stack."""

from __future__ import annotations

import json

import pytest

from common.algorithms import AlgorithmConfig
from common.environments import problem
from dexp.demo import local_stack, run_demo
from load_generator.generator import LoadGenerator
from load_generator.settings import LoadSettings
from tests.e2e.proxy import RecordingProxy


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


def test_agents_send_only_arm_indices() -> None:
    """Every request the coordinator receives from agents: enrollment, reading the global set, or
    a vote whose body is exactly an arm index (and the reset epoch). No reward, no mean."""
    proxy = RecordingProxy()
    env = problem("feraud-1").environment
    arms = [f"arm-{k}" for k in range(env.n_arms)]
    try:
        with local_stack(AlgorithmConfig(), arms, 32, 2, seed=3, agent_url=proxy.start) as stack:
            settings = LoadSettings(
                coordinator_url=stack.coordinator_url,
                redis_url=stack.redis_url,
                problem="feraud-1",
                seed=3,
                max_seconds=240,
                settle_seconds=1.0,
            )
            with LoadGenerator(settings) as generator:
                summary = generator.run()
    finally:
        proxy.stop()
    assert summary.status == "identified"
    votes = [r for r in proxy.requests if r.path.endswith("/votes")]
    assert len(votes) >= 9 * 29
    for request in proxy.requests:
        if request.path.endswith("/votes"):
            assert request.method == "POST"
            body = json.loads(request.body)
            assert set(body) == {"arm", "epoch"}
            assert all(type(v) is int for v in body.values())
            assert 0 <= body["arm"] < env.n_arms
        elif request.path == "/v1/agents":
            assert json.loads(request.body) == {"experiment": "demo"}
        else:  # the global set, and the agent's own votes (to re-send one a failover lost)
            assert request.method == "GET" and request.body == b""
            assert request.path in ("/v1/experiments/demo", "/v1/agents/me")


@pytest.mark.parametrize("agents", [10])
def test_too_few_agents_is_rejected_plainly(agents: int) -> None:
    with pytest.raises(Exception, match="M=29"):
        run_demo("feraud-1", agents=agents, processes=1)
