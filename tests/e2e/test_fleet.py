"""Issue 37, a team's first week, on the real local stack (redis-server, the coordinator under
uvicorn, agent processes, the load generator): agent processes scaled down leave their
experiments, and a reset and a new run use the agents that are left, without a stall."""

from __future__ import annotations

import signal

import httpx
import redis

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from dexp.demo import local_stack
from load_generator.generator import LoadGenerator
from load_generator.settings import LoadSettings

MEANS = "0.9,0.5,0.1"  # gaps above epsilon = 0.25: identified, never tied
CONFIG = AlgorithmConfig(delta=0.05, eta=0.5)  # M = 5 with 3 arms


def test_a_scaled_down_fleet_leaves_and_the_next_run_uses_the_agents_left() -> None:
    arms = ["A", "B", "C"]
    assert CONFIG.threshold(len(arms)) == 5
    leave = {"DEXP_LEAVE_ON_STOP": "true"}
    with local_stack(CONFIG, arms, 16, 4, seed=3, agent_env=leave) as stack:

        def run() -> str:
            settings = LoadSettings(
                coordinator_url=stack.coordinator_url,
                redis_url=stack.redis_url,
                problem="",
                means=MEANS,
                seed=3,
                max_seconds=240,
                stall_seconds=20,
                settle_seconds=0.5,
            )
            with LoadGenerator(settings) as generator:
                return generator.run().status

        assert run() == "identified"
        url = f"{stack.coordinator_url}/v1/experiments/demo"
        assert httpx.get(url).json()["agents_simulated"] == 16
        for name in ("agent-2", "agent-3"):  # a scale-down: SIGTERM, as compose sends it
            stack.kill(name, signal.SIGTERM)
        store = redis.Redis.from_url(stack.redis_url)
        assert store.zcard(keys.agents("demo")) == 8  # what a new load generator feeds
        store.close()
        doc = httpx.get(url).json()
        assert doc["agents_simulated"] == 8
        # the 8 that left still count for the votes they cast this epoch, and only for those
        assert doc["agents"] == 8 + doc["agents_departed"]
        admin = {"Authorization": f"Bearer {stack.admin_token}"}
        assert httpx.post(f"{url}/reset", headers=admin).status_code == 200
        assert httpx.get(url).json()["agents"] == 8  # a new epoch: the departed no longer count
        assert run() == "identified"  # before: stalled on the streams nobody read
