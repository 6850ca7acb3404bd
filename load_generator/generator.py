"""Deliver activations to the agents' streams, watch the coordinator, and report the run.

Activations go out in pipelined batches (no HTTP per activation); the stream lengths are the
backlog (agents delete what they acknowledged), and the generator waits while the backlog exceeds
`max_backlog`, so memory stays bounded whatever the agents' speed.

The coordinator or Redis may be unreachable for a while (a restart, a network fault): every call is
retried with capped back-off for up to `unreachable_seconds`, then the run fails. A batch of XADDs
cut short by a Redis failure is sent again whole, so a few activations may be delivered twice (an
activation is one more sample: harmless) or, if Redis lost them, not at all.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np
import redis

from agent.client import CoordinatorClient
from agent.service import connect_redis
from common import redis_keys as keys
from common.environments import Problem, build_problem
from common.wire import encode_rewards
from load_generator.settings import LoadSettings

log = logging.getLogger("dexp.load_generator")
T = TypeVar("T")


class NotEnoughAgents(RuntimeError):
    pass


@dataclass
class Summary:
    experiment: str
    status: str  # identified | budget | timeout
    sample_complexity: int  # activations processed when the last elimination happened
    activations_delivered: int
    messages: int
    ignored_messages: int
    identified_arm: int | None
    identified_name: str | None
    correct: bool | None
    agents: int
    threshold: int
    n_arms: int
    wall_seconds: float
    activations_per_second: float
    peak_backlog: int
    eliminations: list[dict[str, Any]] = field(default_factory=list)


class LoadGenerator:
    def __init__(self, settings: LoadSettings, out: Any = sys.stderr) -> None:
        self.settings = settings
        self.out = out
        self.problem: Problem = build_problem(
            settings.problem or None,
            settings.means or None,
            settings.rewards or None,
            settings.drift or None,
            settings.activation or None,
        )
        self.client = CoordinatorClient(
            settings.coordinator_url, give_up_after=settings.unreachable_seconds
        )
        self.redis = connect_redis(settings.redis_url)
        self.redis_retries = 0
        self.rng = np.random.default_rng(settings.seed)

    def close(self) -> None:
        self.client.close()
        self.redis.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def wait_for_agents(self) -> tuple[list[str], dict[str, Any]]:
        """Enrolled agents once there are at least M and enrollment has been quiet a moment."""
        exp = self.settings.experiment
        deadline = time.monotonic() + self.settings.agent_wait_seconds
        last_count, quiet_since, last_note = -1, time.monotonic(), 0.0
        while True:
            state = self.client.experiment(exp)
            count, threshold = int(state["agents"]), int(state["threshold"])
            if count != last_count:
                last_count, quiet_since = count, time.monotonic()
            if (
                count >= threshold
                and time.monotonic() - quiet_since >= self.settings.settle_seconds
            ):
                members = self._redis(lambda: self.redis.zrange(keys.agents(exp), 0, -1))
                agents = [a.decode() for a in members]
                return agents, state
            if time.monotonic() > deadline:
                raise NotEnoughAgents(
                    f"experiment {exp!r} has {count} agent(s) but an arm needs M={threshold} "
                    "distinct voters, so it can never end: run more agents "
                    "(docker compose up --scale agent=N, or AGENTS_PER_REPLICA)"
                )
            if time.monotonic() - last_note > 5 and count < threshold:
                last_note = time.monotonic()
                print(f"waiting for agents: {count} enrolled, M={threshold} needed", file=self.out)
            time.sleep(0.2)

    def run(self) -> Summary:
        s = self.settings
        env = self.problem.environment
        agents, state = self.wait_for_agents()
        if len(state["arms"]) != env.n_arms:
            raise ValueError(
                f"experiment {s.experiment!r} has {len(state['arms'])} arms, "
                f"the problem has {env.n_arms}"
            )
        epsilon = float(state["params"]["epsilon"])
        streams = [keys.activations(s.experiment, a) for a in agents]
        p = self.problem.activation.probabilities(len(agents))
        mu0, drift = np.asarray(env.means, dtype=float), env.drift_array
        delivered, peak_backlog, backlog = 0, 0, 0
        start = time.monotonic()
        samples: list[tuple[float, int]] = [(time.time() * 1000, 0)]
        last_poll, status = 0.0, "budget"
        best: dict[str, Any] = {}
        while True:
            now = time.monotonic()
            if now - last_poll >= 0.2:
                last_poll = now
                backlog = self._backlog(streams)
                peak_backlog = max(peak_backlog, backlog)
                samples.append((time.time() * 1000, delivered - backlog))
                best = self.client.request("GET", f"/v1/experiments/{s.experiment}/best-arm")
                self._progress(delivered - backlog, best, now - start)
                if best["status"] == "identified":
                    status = "identified"
                    break
                if now - start > s.max_seconds:
                    status = "timeout"
                    break
            if delivered >= s.budget:
                time.sleep(0.05)
                continue
            if backlog >= s.max_backlog:
                time.sleep(0.01)
                backlog = self._backlog(streams)
                peak_backlog = max(peak_backlog, backlog)
                continue
            if s.rate > 0 and delivered >= s.rate * (now - start):
                time.sleep(min(0.01, s.batch / s.rate))
                continue
            n = min(s.batch, s.budget - delivered)
            t = np.arange(delivered, delivered + n)
            mu = mu0 + drift * t[:, None]
            if env.bounded:
                rewards = (self.rng.random((n, env.n_arms)) < np.clip(mu, 0.0, 1.0)).astype(float)
            else:
                rewards = self.rng.normal(mu, env.sigma)
            who = self.rng.choice(len(agents), size=n, p=p)
            rows = encode_rewards(rewards, env.bounded)
            batch = [(streams[who[i]], {"t": int(t[i]), "r": rows[i]}) for i in range(n)]
            self._redis(partial(self._xadd, batch))
            delivered += n
            backlog += n
            peak_backlog = max(peak_backlog, backlog)
            # At the budget, let the agents finish what is in flight, then stop.
            if delivered >= s.budget and self._backlog(streams) == 0:
                break
        wall = time.monotonic() - start
        final = self.client.experiment(s.experiment)
        processed = delivered - self._backlog(streams)
        sample_complexity = processed
        if status == "identified" and final["eliminations"]:
            sample_complexity = _interpolate(samples, final["eliminations"][-1]["time"], processed)
        arm = final["remaining_arms"][0] if len(final["remaining_arms"]) == 1 else None
        print(file=self.out)
        return Summary(
            experiment=s.experiment,
            status=status,
            sample_complexity=sample_complexity,
            activations_delivered=delivered,
            messages=int(final["messages"]),
            ignored_messages=int(final["ignored_messages"]),
            identified_arm=arm,
            identified_name=final["arms"][arm] if arm is not None else None,
            correct=env.eps_optimal(arm, epsilon, sample_complexity) if arm is not None else None,
            agents=len(agents),
            threshold=int(final["threshold"]),
            n_arms=len(final["arms"]),
            wall_seconds=round(wall, 3),
            activations_per_second=round(processed / wall, 1) if wall > 0 else 0.0,
            peak_backlog=peak_backlog,
            eliminations=final["eliminations"],
        )

    def _backlog(self, streams: list[str]) -> int:
        def measure() -> int:
            pipe = self.redis.pipeline(transaction=False)
            for stream in streams:
                pipe.xlen(stream)
            return int(sum(pipe.execute()))

        return self._redis(measure)

    def _xadd(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for stream, fields in batch:
            pipe.xadd(stream, fields)
        pipe.execute()

    def _redis(self, call: Callable[[], T]) -> T:
        """`call()`, retried with capped back-off while Redis is unreachable (a restart), for up
        to `unreachable_seconds`."""
        delay, start = 0.05, time.monotonic()
        while True:
            try:
                return call()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if time.monotonic() - start > self.settings.unreachable_seconds:
                    raise
                self.redis_retries += 1
                log.warning("redis unreachable (%s); retrying in %.2fs", exc, delay)
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _progress(self, processed: int, best: dict[str, Any], elapsed: float) -> None:
        votes = sum(best.get("votes", {}).values())
        remaining = len(best.get("remaining_arms", []))
        rate = processed / elapsed if elapsed > 0 else 0.0
        line = (
            f"activations {processed:>10,}  votes {votes:>5}  remaining arms {remaining:>3}  "
            f"rate {rate:>9,.0f}/s  {best.get('status', '')}"
        )
        if self.out.isatty():
            print("\r" + line, end="", file=self.out, flush=True)
        elif int(elapsed * 5) % 10 == 0:
            print(line, file=self.out, flush=True)


def _interpolate(samples: list[tuple[float, int]], at_ms: float, default: int) -> int:
    """Activations processed at wall time `at_ms`, from the (time, processed) samples."""
    times = np.array([t for t, _ in samples])
    counts = np.array([c for _, c in samples], dtype=float)
    if at_ms > times[-1]:
        return default
    return int(np.interp(at_ms, times, counts))


def format_summary(summary: Summary, as_json: bool) -> str:
    if as_json:
        return json.dumps(asdict(summary))
    arm = (
        f"{summary.identified_name} (index {summary.identified_arm})"
        if summary.identified_arm is not None
        else "none"
    )
    lines = [
        f"experiment        {summary.experiment}: {summary.status}",
        f"identified arm    {arm}, eps-optimal: {summary.correct}",
        f"sample complexity {summary.sample_complexity:,} activations "
        f"({summary.activations_delivered:,} delivered)",
        f"messages          {summary.messages} votes ({summary.ignored_messages} ignored); "
        f"bound M*K-1 = {summary.threshold * summary.n_arms - 1}",
        f"agents            {summary.agents} (M = {summary.threshold})",
        f"wall time         {summary.wall_seconds:.1f} s, "
        f"{summary.activations_per_second:,.0f} activations/s, peak backlog {summary.peak_backlog:,}",
    ]
    return "\n".join(lines)
