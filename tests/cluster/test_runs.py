"""Whole runs on a Redis Cluster: the coordinator, two agent processes (python -m agent) and the
load generator (python -m load_generator), all with DEXP_REDIS_CLUSTER=true, on Problem 1's arms.

The books are checked as tests/faults checks them on one Redis: the coordinator's voter sets hold
exactly the (agent, arm) votes the agents recorded as acknowledged (their state directories),
nothing pending, nothing decided twice. With a master killed mid-run, that master had taken votes
its replica never got (the replica was frozen meanwhile, so the loss is sure): after the failover
the coordinator has lost acknowledged votes, the agents notice (the state went back) and send them
again, and the books balance once more.
"""

from __future__ import annotations

import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from common import redis_keys as keys
from dexp.redis_cluster import ClusterNode, LocalCluster
from tests.services.helpers import ThreadedCoordinator, admin_headers

from .helpers import (
    Processes,
    acknowledged_pairs,
    agent_env,
    experiment_state,
    generator_env,
    records,
    summary_of,
    voter_pairs,
    wait_until,
)

# Problem 1's activations (uniform over the agents) and Bernoulli rewards, on these arms (the best
# one is arm 0), with DE's vote threshold M = 5 (delta 0.05, eta 0.5): 2 processes of 6 agents.
PROBLEM = "feraud-1"
M5 = {"delta": 0.05, "eta": 0.5}
AGENTS_PER_PROCESS = 6
VOTE_LINE = re.compile(r"vote agent=(\S+) arm=(\d+) epoch=(\d+) outcome=(\w+) kind=(\w+)")


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    running = Processes(tmp_path)
    try:
        yield running
    finally:
        running.stop_all()


def start_run(
    cluster: LocalCluster,
    coordinator: ThreadedCoordinator,
    processes: Processes,
    experiment: str,
    seed: int,
    means: str,
) -> list[Path]:
    """Create the experiment, start two agent processes and the load generator; the agents'
    state directories."""
    arms = [f"arm-{k}" for k in range(len(means.split(",")))]
    created = httpx.post(
        f"{coordinator.url}/v1/experiments",
        json={"id": experiment, "arms": arms, **M5},
        headers=admin_headers(),
        timeout=30,
    )
    assert created.status_code == 201, created.text
    states = []
    for k in range(2):
        state = processes.workdir / f"state-{k}"
        states.append(state)
        env = agent_env(cluster, coordinator.url, experiment, AGENTS_PER_PROCESS, seed + k, state)
        processes.spawn(f"agent-{k}", "agent", env)
    env = generator_env(cluster, coordinator.url, experiment, PROBLEM, seed)
    env["DEXP_MEANS"] = means
    processes.spawn("generator", "load_generator", env, "--json")
    return states


def check_books(
    processes: Processes, url: str, experiment: str, states: list[Path]
) -> dict[str, Any]:
    """After the agents stopped: the voter sets are exactly the acknowledged votes."""
    final = experiment_state(url, experiment)
    recs = records(states, experiment, final["created_at"])
    assert len({r.agent_id for r in recs}) == 2 * AGENTS_PER_PROCESS == final["agents"]
    pending = [(r.agent_id, r.pending) for r in recs if r.pending]
    assert not pending, f"votes still pending after the agents stopped: {pending}"
    acknowledged, counted = acknowledged_pairs(recs, final["epoch"]), voter_pairs(url, experiment)
    assert not counted - acknowledged, f"counted, never acknowledged: {counted - acknowledged}"
    assert not acknowledged - counted, f"acknowledged, then lost: {acknowledged - counted}"
    arms = range(len(final["arms"]))
    assert final["votes"] == [sum(1 for _, a in counted if a == arm) for arm in arms]
    lines = [m.groups() for k in range(2) for m in VOTE_LINE.finditer(processes.log(f"agent-{k}"))]
    decided = Counter(
        (agent, arm, epoch) for agent, arm, epoch, _, kind in lines if kind == "decided"
    )
    assert not [key for key, n in decided.items() if n > 1], "a vote decided twice"
    return {"counted": len(counted), "kinds": Counter(kind for *_, kind in lines)}


def test_a_run_on_the_cluster_identifies_the_best_arm(
    healthy_cluster: LocalCluster, coordinator_server: ThreadedCoordinator, processes: Processes
) -> None:
    exp = "run-clean"
    states = start_run(
        healthy_cluster, coordinator_server, processes, exp, seed=11, means="0.9,0.5,0.1"
    )
    status, summary = summary_of(processes, "generator", timeout=120)
    assert status == 0, summary
    assert (summary["status"], summary["identified_arm"], summary["correct"]) == (
        "identified",
        0,
        True,
    ), summary
    for k in range(2):
        processes.stop(f"agent-{k}")
        assert processes.named[f"agent-{k}"].returncode == 0, processes.log(f"agent-{k}")[-2000:]
    figures = check_books(processes, coordinator_server.url, exp, states)
    assert figures["kinds"]["resent"] == 0  # nothing was lost: nothing sent again


def test_a_master_killed_mid_run_loses_votes_the_agents_send_again(
    healthy_cluster: LocalCluster, coordinator_server: ThreadedCoordinator, processes: Processes
) -> None:
    cluster, url, exp = healthy_cluster, coordinator_server.url, "run-failover"
    means = "0.7,0.5,0.3,0.1,0.1,0.1"
    states = start_run(cluster, coordinator_server, processes, exp, seed=13, means=means)
    master = cluster.master_of(keys.meta(exp))  # holds the experiment (and some stream shards)
    (replica,) = cluster.replicas_of(master)
    wait_until(lambda: votes(url, exp) >= 4, "4 votes", 60)

    # Cut the replica off: frozen, and its link closed by the master, so that nothing the master
    # takes from now on reaches it (not even through the socket's buffers). The master goes on
    # taking votes; killed, it takes them with it.
    cluster.kill(replica, signal.SIGSTOP)
    try:
        with cluster.client(master) as client:
            client.execute_command("CLIENT KILL TYPE replica")
        cut = votes(url, exp)
        wait_until(lambda: votes(url, exp) >= cut + 3, "3 more votes", 30)
        taken = votes(url, exp)
        cluster.kill(master)  # SIGKILL
    finally:
        cluster.kill(replica, signal.SIGCONT)
    killed_at = time.monotonic()
    held = replica_votes(cluster, replica, exp, len(means.split(",")))
    assert held < taken, (cut, taken, held)  # acknowledged votes are lost for good
    cluster.wait_healthy(timeout=30)
    failover_seconds = time.monotonic() - killed_at
    assert cluster.master_of(keys.meta(exp)) == replica  # promoted

    status, summary = summary_of(processes, "generator", timeout=120)
    assert status == 0, summary
    assert (summary["status"], summary["identified_arm"], summary["correct"]) == (
        "identified",
        0,
        True,
    ), summary
    # The agents restore what was lost: every vote they hold as acknowledged is counted again.
    final = experiment_state(url, exp)

    def restored() -> bool:
        acknowledged = acknowledged_pairs(records(states, exp, final["created_at"]), final["epoch"])
        return acknowledged <= voter_pairs(url, exp)

    wait_until(restored, "the lost votes sent again", 30)
    for k in range(2):
        processes.stop(f"agent-{k}")
        assert processes.named[f"agent-{k}"].returncode == 0, processes.log(f"agent-{k}")[-2000:]
    figures = check_books(processes, url, exp, states)
    assert figures["kinds"]["resent"] >= 1, figures
    logs = processes.log("agent-0") + processes.log("agent-1")
    print(
        f"\n[failover] votes: {cut} when the replica was cut off, {taken} when its master was "
        f"killed, {held} on the replica ({taken - held} lost); failover {failover_seconds:.1f} s; "
        f"votes sent again {figures['kinds']['resent']}; activations read again and not fed "
        f"again {_refed(logs)}; counted at the end {figures['counted']}"
    )
    # The killed node comes back as a replica of the promoted one: 3 masters, 3 replicas.
    cluster.restart(master)
    wait_until(lambda: master in cluster.replicas_of(replica), "the node back as a replica", 30)
    cluster.wait_healthy(timeout=30)


def votes(url: str, experiment: str) -> int:
    return sum(experiment_state(url, experiment)["votes"])


def replica_votes(cluster: LocalCluster, replica: ClusterNode, experiment: str, arms: int) -> int:
    """The votes a replica holds, once it has applied all it received (its link to the dead
    master down, its replication offset still), before any election can promote it."""
    with cluster.client(replica) as client:

        def settled() -> bool:
            first = client.info("replication")
            time.sleep(0.1)
            second = client.info("replication")
            return (
                second.get("master_link_status") == "down"
                and first["slave_repl_offset"] == second["slave_repl_offset"]
            )

        wait_until(settled, "the replica to apply what it received", 10)
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("READONLY")  # a replica answers reads of its slots
        for arm in range(arms):
            pipe.scard(keys.voters(experiment, arm))
        return sum(pipe.execute()[1:])


def _refed(log: str) -> int:
    return sum(int(n) for n in re.findall(r"(\d+) activations read again after a failover", log))
