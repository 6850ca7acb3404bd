"""Every Redis the project starts has a memory limit and evicts nothing (common/redis_memory.py),
read offline: the compose files, the Swarm stacks and the Kubernetes chart's values. Without a
limit, a service user allowed to write could grow Redis until the host ran out (the red team's
100,000 streams, 60 MB in 3 s, on a Redis without `maxmemory`); with an evicting policy, Redis
would drop state (votes, credentials) silently. `dexp demo`'s redis-server and cluster nodes are
checked running, by tests/e2e/test_redis_acl.py (CONFIG GET)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from common import redis_memory
from tests.test_deploy_compose import services

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILES = [
    "docker-compose.yml",
    "docker-compose.production.yml",
    "deploy/swarm/docker-stack.yml",
    "deploy/swarm/production.yml",
]
SIZE = re.compile(r"^(\d+)(kb|mb|gb)$")


def size_bytes(text: str) -> int:
    """A redis.conf size ("768mb", "1gb") in bytes; 0 for anything else (no limit)."""
    found = SIZE.match(text.lower())
    if not found:
        return 0
    return int(found[1]) * 1024 ** (["kb", "mb", "gb"].index(found[2]) + 1)


def option(command: list[str], name: str) -> str:
    assert command.count(name) == 1, f"{name} not given once: {command}"
    return command[command.index(name) + 1]


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_each_compose_and_swarm_redis_has_a_memory_limit_and_evicts_nothing(name: str) -> None:
    command = [str(arg) for arg in services(name)["redis"]["command"]]
    assert command[0] == "redis-server"
    assert option(command, "--maxmemory-policy") == redis_memory.POLICY == "noeviction"
    limit = option(command, "--maxmemory")
    assert limit == f"${{DEXP_REDIS_MAXMEMORY:-{redis_memory.MAXMEMORY}}}"
    assert size_bytes(redis_memory.MAXMEMORY) > 0


def test_the_kubernetes_redis_has_a_memory_limit_below_its_pod_limit() -> None:
    values = yaml.safe_load((ROOT / "deploy/kubernetes/redis-values.yaml").read_text())
    config = dict(line.split(" ", 1) for line in values["commonConfiguration"].splitlines())
    assert config["maxmemory-policy"] == "noeviction"
    limit = size_bytes(config["maxmemory"])
    pod = values["master"]["resources"]["limits"]["memory"]
    found = re.fullmatch(r"(\d+)(Mi|Gi)", pod)
    assert found, pod
    pod_bytes = int(found[1]) * 1024 ** (2 if found[2] == "Mi" else 3)
    assert 0 < limit < pod_bytes


def test_dexp_demos_redis_args_set_the_limit() -> None:
    args = redis_memory.server_args(redis_memory.DEMO_MAXMEMORY)
    assert option(args, "--maxmemory-policy") == "noeviction"
    assert size_bytes(option(args, "--maxmemory")) > 0
