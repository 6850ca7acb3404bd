"""The agent service's agents are simulated and leave when it stops (issue 37): a host scaled
down (SIGTERM) leaves no agent enrolled that nobody runs, and a restart enrolls new ones."""

from __future__ import annotations

from pathlib import Path

import httpx
import redis

from agent.host import AgentService
from common import redis_keys as keys

from .test_agent_experiments import PER_EXPERIMENT, make_experiment, running, settings, until


def test_a_stopped_host_s_agents_leave_and_are_not_fed(
    client: httpx.Client, coordinator_url: str, redis_url: str, tmp_path: Path
) -> None:
    make_experiment(client, "fleet")
    state = tmp_path / "state"
    extra = {"state_dir": str(state), "leave_on_stop": True}
    service = AgentService(settings(coordinator_url, redis_url, "fleet", **extra))
    with running(service):
        assert client.get("/v1/experiments/fleet").json()["agents"] == PER_EXPERIMENT
        assert len(list(state.glob("agent-*.json"))) == PER_EXPERIMENT
    # stopped (service.stop(), as SIGTERM does): its agents left, nobody voted, so none counts
    store = redis.Redis.from_url(redis_url)
    assert store.zcard(keys.agents("fleet")) == 0  # what the load generator would feed
    store.close()
    doc = client.get("/v1/experiments/fleet").json()
    assert (doc["agents"], doc["agents_departed"], doc["agents_simulated"]) == (0, 0, 0)
    assert not list(state.glob("agent-*.json"))  # a restart does not restore dead tokens
    with running(AgentService(settings(coordinator_url, redis_url, "fleet", **extra))) as again:
        until(lambda: len(again.discovery.hosted["fleet"].agents) == PER_EXPERIMENT, "enrolled")
        assert again.discovery.hosted["fleet"].restored == 0
        doc = client.get("/v1/experiments/fleet").json()
        assert (doc["agents"], doc["agents_simulated"]) == (PER_EXPERIMENT, PER_EXPERIMENT)
