"""How much memory each Redis the project starts may take, and what it does when full: as data.

Without a limit, a user allowed to write (an agent host creating streams, a load generator adding
entries) can grow Redis until the machine runs out, and everything on it with Redis. With one,
Redis refuses writes once `maxmemory` is reached (OOM errors: the coordinator answers 503) and
evicts nothing: every key is state (votes, voter sets, credentials, tickets), and a policy that
evicts would lose some silently. So every Redis gets both: docker-compose.yml,
docker-compose.production.yml, deploy/swarm/docker-stack.yml and production.yml
(`DEXP_REDIS_MAXMEMORY`, default MAXMEMORY), deploy/kubernetes/redis-values.yaml (below the pod's
memory limit), and `dexp demo`'s redis-server or cluster nodes (DEMO_MAXMEMORY);
tests/test_deploy_redis_memory.py reads each of them.
"""

from __future__ import annotations

POLICY = "noeviction"
# compose's and Swarm's default (DEXP_REDIS_MAXMEMORY): size it to the host, below its memory.
MAXMEMORY = "1gb"
# `dexp demo` and the benchmarks' stacks, per redis-server (each node of a local cluster): the
# largest runs of docs/BENCHMARKS.md (100,000 devices) fit well below it.
DEMO_MAXMEMORY = "4gb"


def server_args(maxmemory: str) -> list[str]:
    """redis-server's arguments for a memory limit of `maxmemory` and no eviction."""
    return ["--maxmemory", maxmemory, "--maxmemory-policy", POLICY]
