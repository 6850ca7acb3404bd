"""Run Problem 1 on the real local stack, inject a fault mid-run, and check the books afterwards.

Problem 1 (feraud-1, DE-SER3), 32 agents in 2 agent processes, a fixed seed; every agent process has
a state directory, so that the votes each agent had acknowledged can be read back (agent/state.py).
After the run the agents are stopped (SIGTERM: each finishes its batch and its votes), then:
- the experiment is identified and the arm is eps-optimal;
- the coordinator's voter sets (admin-only: GET /v1/experiments/{id}/voters) are exactly the
  (agent, arm) pairs the agents recorded as acknowledged into a voter set: nothing lost, nothing
  counted twice, nothing counted unknown;
- no vote is left pending, and no agent decided twice on an arm (from the agents' logs, where each
  vote is a line `vote agent=.. arm=.. epoch=.. outcome=.. kind=decided|pending|resent`);
- the agents are the 32 enrolled at the start (a restart enrolls nobody).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis

from agent.state import AgentRecord, StateDir
from common.algorithms import AlgorithmConfig
from common.environments import problem
from coordinator.settings import DEV_ADMIN_TOKEN
from dexp.demo import LocalStack, local_stack
from load_generator.generator import LoadGenerator, Summary
from load_generator.settings import LoadSettings

PROBLEM = "feraud-1"
AGENTS, PROCESSES, SEED = 32, 2, 11
TRIGGER_VOTES = 100  # inject the fault once this many votes are counted
EXPERIMENT = "demo"
# The local stack's coordinator inherits this process's environment: its admin token.
ADMIN_TOKEN = os.environ.get("DEXP_ADMIN_TOKEN", DEV_ADMIN_TOKEN)
VOTE_LINE = re.compile(
    r"vote agent=(?P<agent>\S+) arm=(?P<arm>\d+) epoch=(?P<epoch>\d+) "
    r"outcome=(?P<outcome>\w+) kind=(?P<kind>\w+)"
)


@dataclass
class VoteLine:
    process: str
    agent: str
    arm: int
    epoch: int
    outcome: str
    kind: str


@dataclass
class FaultRun:
    stack: LocalStack
    generator: LoadGenerator
    summary: Summary
    final: dict[str, Any]
    voters: list[list[str]]  # per arm, from the admin endpoint, read with `final`
    records: dict[str, list[AgentRecord]]
    votes: list[VoteLine]
    votes_at_fault: int
    fault: dict[str, Any] = field(default_factory=dict)

    @property
    def acknowledged_pairs(self) -> set[tuple[str, int]]:
        epoch = int(self.final["epoch"])
        return {
            (r.agent_id, v.arm)
            for records in self.records.values()
            for r in records
            for v in r.acknowledged
            if v.epoch == epoch and v.in_voter_set
        }

    @property
    def voter_pairs(self) -> set[tuple[str, int]]:
        return {(agent, arm) for arm, ids in enumerate(self.voters) for agent in ids}

    def log(self, name: str) -> str:
        return self.stack.log_path(name).read_text(errors="replace")

    def loss_signs_logged(self) -> int:
        """Sure signs of lost writes the agent processes noted (agent.library.GlobalView)."""
        return sum(
            self.log(name).count("agents check their acknowledged votes")
            for name in self.stack.named
            if name.startswith("agent-")
        )

    def retries_logged(self) -> int:
        """Requests the agents retried (coordinator unreachable or failing)."""
        return sum(
            self.log(name).count("retrying in")
            for name in self.stack.named
            if name.startswith("agent-")
        )


def arms() -> list[str]:
    return [f"arm-{k}" for k in range(problem(PROBLEM).environment.n_arms)]


@contextlib.contextmanager
def fault_stack(**options: Any) -> Iterator[LocalStack]:
    with local_stack(
        AlgorithmConfig(), arms(), AGENTS, PROCESSES, seed=SEED, agent_state=True, **options
    ) as stack:
        yield stack


def experiment(url: str, timeout: float = 5.0) -> dict[str, Any]:
    reply = httpx.get(f"{url}/v1/experiments/{EXPERIMENT}", timeout=timeout)
    reply.raise_for_status()
    result: dict[str, Any] = reply.json()
    return result


def voters(url: str, timeout: float = 5.0) -> list[list[str]]:
    """Each arm's voter set in the current epoch: admin-only, the public state has counts."""
    reply = httpx.get(
        f"{url}/v1/experiments/{EXPERIMENT}/voters",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=timeout,
    )
    reply.raise_for_status()
    return [list(ids) for ids in reply.json()["voters"]]


def wait_for_votes(url: str, at_least: int, running: Any, timeout: float = 60.0) -> int:
    """Poll the coordinator until `at_least` votes are counted; the count seen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running.done():
            running.result()  # raises if the run failed
            raise AssertionError("the run ended before the fault could be injected")
        with contextlib.suppress(httpx.HTTPError):
            votes = sum(experiment(url)["votes"])
            if votes >= at_least:
                return votes
        time.sleep(0.02)
    raise AssertionError(f"fewer than {at_least} votes after {timeout:.0f} s")


def records(stack: LocalStack, created_at: int) -> dict[str, list[AgentRecord]]:
    return {
        name: StateDir(path, EXPERIMENT).load(created_at) for name, path in stack.state_dirs.items()
    }


def acknowledged_now(stack: LocalStack, created_at: int, epoch: int = 0) -> set[tuple[str, int]]:
    """(agent, arm) pairs recorded as acknowledged into a voter set, read from the state files."""
    return {
        (r.agent_id, v.arm)
        for recs in records(stack, created_at).values()
        for r in recs
        for v in r.acknowledged
        if v.epoch == epoch and v.in_voter_set
    }


def vote_lines(stack: LocalStack) -> list[VoteLine]:
    lines = []
    for name in stack.named:
        if name.startswith("agent-"):
            for match in VOTE_LINE.finditer(stack.log_path(name).read_text(errors="replace")):
                lines.append(
                    VoteLine(
                        name,
                        match["agent"],
                        int(match["arm"]),
                        int(match["epoch"]),
                        match["outcome"],
                        match["kind"],
                    )
                )
    return lines


def load_settings(stack: LocalStack, url: str | None = None, **overrides: Any) -> LoadSettings:
    values: dict[str, Any] = {
        "coordinator_url": url or stack.coordinator_url,
        "redis_url": stack.redis_url,
        "experiment": EXPERIMENT,
        "problem": PROBLEM,
        "seed": SEED,
        "max_seconds": 90,
        "agent_wait_seconds": 60,
        "settle_seconds": 1.0,
        **overrides,
    }
    return LoadSettings(**values)


def run_with_fault(
    stack: LocalStack,
    fault: Callable[[LocalStack], dict[str, Any]] | None,
    generator_url: str | None = None,
    trigger: int = TRIGGER_VOTES,
    **overrides: Any,
) -> FaultRun:
    """Run the load generator in a thread; at `trigger` votes call `fault(stack)` (its figures go
    in the result); wait for the run, stop the agents, and collect the books."""
    generator = LoadGenerator(load_settings(stack, generator_url, **overrides))
    votes_at_fault = 0
    info: dict[str, Any] = {}
    try:
        with ThreadPoolExecutor(1) as pool:
            running = pool.submit(generator.run)
            if fault is not None:
                votes_at_fault = wait_for_votes(stack.coordinator_url, trigger, running)
                info = fault(stack)
            summary = running.result(timeout=120)
    finally:
        generator.close()
    stack.check_alive()  # every process (restarted ones included) still up
    stack.stop_agents()
    final, final_voters = experiment(stack.coordinator_url), voters(stack.coordinator_url)
    assert final["version"] == experiment(stack.coordinator_url)["version"], "changed meanwhile"
    client = redis.Redis.from_url(stack.redis_url)
    try:  # since Redis (re)started: the backlog lives there, so its peak bounds Redis's memory
        info["redis_used_memory_peak"] = client.info("memory").get("used_memory_peak_human")
    finally:
        client.close()
    return FaultRun(
        stack,
        generator,
        summary,
        final,
        final_voters,
        records(stack, int(final["created_at"])),
        vote_lines(stack),
        votes_at_fault,
        info,
    )


def check_books(run: FaultRun) -> dict[str, Any]:
    """The assertions every fault test shares; the figures to print."""
    summary, final = run.summary, run.final
    assert summary.status == "identified", summary
    assert summary.correct is True, summary
    assert final["agents"] == AGENTS, "an agent was enrolled again"
    agent_ids = {r.agent_id for recs in run.records.values() for r in recs}
    assert len(agent_ids) == AGENTS
    pending = [(r.agent_id, r.pending) for recs in run.records.values() for r in recs if r.pending]
    assert not pending, f"votes still pending after the agents stopped: {pending}"
    acknowledged, counted = run.acknowledged_pairs, run.voter_pairs
    unknown, lost = sorted(counted - acknowledged), sorted(acknowledged - counted)
    assert not unknown, f"counted votes no agent knows as acknowledged: {unknown}"
    assert not lost, f"acknowledged votes the coordinator lost: {lost}"
    assert final["votes"] == [len(ids) for ids in run.voters]
    decided = Counter((v.agent, v.arm, v.epoch) for v in run.votes if v.kind == "decided")
    twice = [key for key, n in decided.items() if n > 1]
    assert not twice, f"decided twice: {twice}"
    outcomes = Counter(v.outcome for v in run.votes)
    kinds = Counter(v.kind for v in run.votes)
    return {
        "votes_at_fault": run.votes_at_fault,
        "counted_votes": sum(final["votes"]),
        "acknowledged_pairs": len(acknowledged),
        "messages": final["messages"],
        "ignored_messages": final["ignored_messages"],
        "outcomes": dict(outcomes),
        "kinds": dict(kinds),
        "agent_retries_logged": run.retries_logged(),
        "loss_signs_logged": run.loss_signs_logged(),
        "generator_http_retries": run.generator.client.retries,
        "generator_redis_retries": run.generator.redis_retries,
        "identified_arm": summary.identified_arm,
        "sample_complexity": summary.sample_complexity,
        "wall_seconds": summary.wall_seconds,
        "peak_backlog": summary.peak_backlog,
        **run.fault,
    }


def report(name: str, figures: dict[str, Any]) -> None:
    print(f"\n[{name}]")
    for key, value in figures.items():
        print(f"  {key:<26} {value}")


def logged_after_restart(log: str, restart: int = 1) -> str:
    marker = f"--- restart {restart} of "
    return log[log.index(marker) :] if marker in log else ""
