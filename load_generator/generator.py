"""Deliver activations to the agents' streams, watch the coordinator, and report the run.

Activations go out in pipelined batches (no HTTP per activation); the stream lengths are the
backlog (agents delete what they acknowledged), and the generator waits while the backlog exceeds
`max_backlog`, so memory stays bounded whatever the agents' speed.

The run ends when the coordinator says the experiment is identified (one arm left) or tied
(several arms left and none can reach the threshold with the agents there), at the budget or
deadline, or when it stalls. The coordinator or Redis may be unreachable for a while (a restart, a
network fault): every call is retried with capped back-off for up to `unreachable_seconds`. A batch
of XADDs cut short by a Redis failure is sent again whole, so a few activations may be delivered
twice (an activation is one more sample: harmless) or, if Redis lost them, not at all.

Stalls. When no activation is consumed for `stall_seconds` while some are pending (agent processes
gone or stuck, a stream nobody reads), or the coordinator or Redis stays unreachable, the run stops
with status "stalled" and says what it sees: the agents enrolled and those whose streams are being
read (consumer groups, XINFO), the backlog per agent, and whether the coordinator answers.

Exit status of `python -m load_generator` (`exit_code`): 0 identified or tied, and correct (the arm,
or every candidate, eps-optimal); 1 budget or deadline reached; 2 bad settings; 3 too few agents
(N < M, or CE's N (1 - xi) < M); 4 identified or tied but not correct; 5 stalled.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

import httpx
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
    status: str  # identified | tied | budget | timeout | stalled
    # Activations processed when the last elimination happened (identified), when the tie was
    # seen (tied), or at the end.
    sample_complexity: int
    activations_delivered: int
    messages: int
    ignored_messages: int
    identified_arm: int | None
    identified_name: str | None
    correct: bool | None  # identified: the arm is eps-optimal; tied: every candidate is
    agents: int
    threshold: int
    n_arms: int
    wall_seconds: float
    activations_per_second: float
    peak_backlog: int
    eliminations: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)  # tied: the arms left
    candidate_names: list[str] = field(default_factory=list)
    certified: str | None = None  # tied: what the coordinator certifies about the candidates
    stall: list[str] = field(default_factory=list)  # stalled: what the generator saw, line by line


def exit_code(summary: Summary) -> int:
    """0: identified or tied, and correct; 4: identified or tied, not correct; 5: stalled; 1: the
    budget or the deadline ran out (2 and 3 are for bad settings and too few agents)."""
    if summary.status in ("identified", "tied"):
        return 0 if summary.correct else 4
    return 5 if summary.status == "stalled" else 1


def agents_needed(state: dict[str, Any]) -> int:
    """Enrolled agents a run needs: the threshold M (+ f), and under CE, which drops each vote
    with probability xi, M / (1 - xi) (fewer cannot remove an arm in expectation)."""
    threshold = int(state["threshold"])
    params = state.get("params", {})
    xi = float(params.get("xi", 0.0)) if params.get("algorithm") == "ce" else 0.0
    return max(threshold, math.ceil(threshold / (1.0 - xi) - 1e-9)) if xi else threshold


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
        # the last progress line printed (not on a terminal), when, and the quiet note
        self._shown: tuple[Any, ...] = ()
        self._shown_at = -math.inf
        self._quiet_noted = False

    def close(self) -> None:
        self.client.close()
        self.redis.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def wait_for_agents(self) -> tuple[list[str], dict[str, Any]]:
        """Enrolled agents once there are enough (see agents_needed) and enrollment has been
        quiet a moment."""
        exp = self.settings.experiment
        deadline = time.monotonic() + self.settings.agent_wait_seconds
        last_count, quiet_since, last_note = -1, time.monotonic(), 0.0
        while True:
            state = self.client.experiment(exp)
            count, threshold = int(state["agents"]), int(state["threshold"])
            needed = agents_needed(state)
            if count != last_count:
                last_count, quiet_since = count, time.monotonic()
            if count >= needed and time.monotonic() - quiet_since >= self.settings.settle_seconds:
                members = self._redis(lambda: self.redis.zrange(keys.agents(exp), 0, -1))
                agents = [a.decode() for a in members]
                for warning in state.get("warnings", []):
                    print(f"warning: {warning}", file=self.out)
                return agents, state
            if time.monotonic() > deadline:
                if count < threshold:
                    raise NotEnoughAgents(
                        f"experiment {exp!r} has {count} agent(s) but an arm needs M={threshold} "
                        "distinct voters, so it can never end: run more agents "
                        "(docker compose up --scale agent=N, or AGENTS_PER_REPLICA)"
                    )
                xi = float(state["params"]["xi"])
                raise NotEnoughAgents(
                    f"experiment {exp!r} has {count} agent(s) and CE drops each vote with "
                    f"probability xi={xi:g}: {count} x (1 - xi) = {count * (1 - xi):g} votes "
                    f"against an arm in expectation, below M={threshold}, so it cannot end in "
                    f"expectation: run at least {needed} agents"
                )
            if time.monotonic() - last_note > 5 and count < needed:
                last_note = time.monotonic()
                print(
                    f"waiting for agents: {count} enrolled, {needed} needed (M={threshold})",
                    file=self.out,
                )
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
        stall: list[str] = []
        unreachable = False  # stalled because the coordinator or Redis stopped answering
        processed, last_processed, progress_at, stop_processed = 0, 0, start, 0
        try:
            while True:
                now = time.monotonic()
                if now - last_poll >= 0.2:
                    last_poll = now
                    backlog = self._backlog(streams)
                    peak_backlog = max(peak_backlog, backlog)
                    processed = delivered - backlog
                    samples.append((time.time() * 1000, processed))
                    if processed != last_processed:
                        last_processed, progress_at = processed, now
                    best = self.client.request("GET", f"/v1/experiments/{s.experiment}/best-arm")
                    self._progress(processed, best, now - start, now - progress_at, backlog)
                    if best["status"] in ("identified", "tied"):
                        status, stop_processed = best["status"], processed
                        break
                    if backlog > 0 and now - progress_at >= s.stall_seconds:
                        status = "stalled"
                        stall = self.diagnose(agents, streams, now - progress_at, backlog)
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
                    rewards = (self.rng.random((n, env.n_arms)) < np.clip(mu, 0.0, 1.0)).astype(
                        float
                    )
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
        except (ConnectionError, redis.ConnectionError, redis.TimeoutError) as exc:
            # The client (coordinator) or _redis gave up after unreachable_seconds of retries.
            status, unreachable = "stalled", True
            what = "Redis" if isinstance(exc, redis.RedisError) else "the coordinator"
            stall = [
                f"stalled: {what} did not answer for {s.unreachable_seconds:g} s "
                f"(DEXP_UNREACHABLE_SECONDS): {exc}",
                self._coordinator_answer(),
            ]
        wall = time.monotonic() - start
        if unreachable:  # reading the end state would wait as long again: the last one seen
            final, processed = state, last_processed
        else:
            final = self.client.experiment(s.experiment)
            processed = delivered - self._backlog(streams)
        sample_complexity = processed
        if status == "identified" and final["eliminations"]:
            sample_complexity = _interpolate(samples, final["eliminations"][-1]["time"], processed)
        if status == "tied":
            sample_complexity = stop_processed
        arm = final["remaining_arms"][0] if len(final["remaining_arms"]) == 1 else None
        candidates = (
            [int(c["index"]) for c in best.get("candidates", [])] if status == "tied" else []
        )
        if status == "identified" and arm is not None:
            correct: bool | None = env.eps_optimal(arm, epsilon, sample_complexity)
        elif status == "tied":
            correct = all(env.eps_optimal(c, epsilon, sample_complexity) for c in candidates)
        else:
            correct = None
        print(file=self.out)
        return Summary(
            experiment=s.experiment,
            status=status,
            sample_complexity=sample_complexity,
            activations_delivered=delivered,
            messages=int(final["messages"]),
            ignored_messages=int(final["ignored_messages"]),
            identified_arm=arm if status == "identified" else None,
            identified_name=final["arms"][arm]
            if arm is not None and status == "identified"
            else None,
            correct=correct,
            agents=len(agents),
            threshold=int(final["threshold"]),
            n_arms=len(final["arms"]),
            wall_seconds=round(wall, 3),
            activations_per_second=round(processed / wall, 1) if wall > 0 else 0.0,
            peak_backlog=peak_backlog,
            eliminations=final["eliminations"],
            candidates=candidates,
            candidate_names=[final["arms"][c] for c in candidates],
            certified=best.get("certified") if status == "tied" else None,
            stall=stall,
        )

    # -- stalls ---------------------------------------------------------------------------
    def diagnose(
        self, agents: list[str], streams: list[str], quiet: float, backlog: int
    ) -> list[str]:
        """What a stalled run can see, in plain lines: how long nothing was consumed, the agents
        enrolled and those whose streams are being read, the largest backlogs, the coordinator."""
        s = self.settings
        lines = [
            f"stalled: no activation consumed for {quiet:.0f} s (DEXP_STALL_SECONDS="
            f"{s.stall_seconds:g}) while {backlog:,} are pending"
        ]
        try:
            enrolled: int | None = int(
                self.client.http.get(f"/v1/experiments/{s.experiment}", timeout=2.0).json()[
                    "agents"
                ]
            )
        except (httpx.HTTPError, ValueError, KeyError):
            enrolled = None
        try:
            streams_seen = self._stream_readers(streams)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            lines.append(f"agents: Redis does not answer ({exc}): cannot see the streams")
        else:
            lines += _describe_streams(agents, streams_seen, enrolled, s.stall_seconds)
        lines.append(self._coordinator_answer())
        return lines

    def _stream_readers(self, streams: list[str]) -> list[dict[str, Any]]:
        """Per stream: its length (the agent's backlog: acknowledged entries are deleted), the
        entries read but not acknowledged, and how long ago its consumer last read (None: no
        consumer group or consumer, i.e. never read)."""
        pipe = self.redis.pipeline(transaction=False)
        for stream in streams:
            pipe.xlen(stream)
            pipe.xinfo_consumers(stream, keys.ACTIVATION_GROUP)
        replies = pipe.execute(raise_on_error=False)
        result = []
        for i in range(len(streams)):
            length, consumers = replies[2 * i], replies[2 * i + 1]
            if isinstance(consumers, Exception) or not consumers:  # NOGROUP / no such key
                result.append(
                    {
                        "length": int(length) if isinstance(length, int) else 0,
                        "pending": 0,
                        "idle_ms": None,
                    }
                )
                continue
            result.append(
                {
                    "length": int(length),
                    "pending": sum(int(c["pending"]) for c in consumers),
                    "idle_ms": min(int(c["idle"]) for c in consumers),
                }
            )
        return result

    def _coordinator_answer(self) -> str:
        """Whether the coordinator answers now: one try, a short timeout, no retries."""
        url = self.settings.coordinator_url
        try:
            response = self.client.http.get("/readyz", timeout=2.0)
        except httpx.HTTPError as exc:
            return f"coordinator: {url} does not answer ({type(exc).__name__}: {exc})"
        if response.status_code == 200:
            return f"coordinator: {url} answers (ready)"
        return (
            f"coordinator: {url} answers {response.status_code} on /readyz (it cannot reach Redis)"
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

    def _progress(
        self,
        processed: int,
        best: dict[str, Any],
        elapsed: float,
        quiet: float = 0.0,
        backlog: int = 0,
    ) -> None:
        """One progress line: on a terminal, rewritten in place; otherwise printed when it changed
        (at most every 2 s), and once when nothing was consumed for a while, never the same
        line again and again."""
        votes = sum(best.get("votes", {}).values())
        remaining = len(best.get("remaining_arms", []))
        rate = processed / elapsed if elapsed > 0 else 0.0
        status = best.get("status", "")
        line = (
            f"activations {processed:>10,}  votes {votes:>5}  remaining arms {remaining:>3}  "
            f"rate {rate:>9,.0f}/s  {status}"
        )
        if self.out.isatty():
            print("\r" + line, end="", file=self.out, flush=True)
            return
        shown = (processed, votes, remaining, status)
        if shown != self._shown and elapsed - self._shown_at >= 2.0:
            self._shown, self._shown_at, self._quiet_noted = shown, elapsed, False
            print(line, file=self.out, flush=True)
        elif quiet >= 5.0 and backlog > 0 and not self._quiet_noted:
            self._quiet_noted = True
            print(
                f"no activation consumed for {quiet:.0f} s ({backlog:,} pending); the run stops "
                f"as stalled after {self.settings.stall_seconds:g} s (DEXP_STALL_SECONDS)",
                file=self.out,
                flush=True,
            )


def _describe_streams(
    agents: list[str], seen: list[dict[str, Any]], enrolled: int | None, stall_seconds: float
) -> list[str]:
    """Who reads what, from each stream's length, entries read but not acknowledged, and how long
    ago its consumer last read. Redis refreshes a consumer's read time only when it is served
    entries (a process blocked on empty streams does not touch them), so a stream with nothing
    unread says nothing about its agent; one with unread entries and no read for a while does."""
    limit = stall_seconds * 1000
    groups: dict[str, list[int]] = {"reading": [], "not reading": [], "stuck": [], "never": []}
    idle = 0
    for i, stream in enumerate(seen):
        unread = stream["length"] - stream["pending"]
        if stream["idle_ms"] is None:
            groups["never" if stream["length"] else "reading"].append(i)
        elif stream["idle_ms"] < limit or stream["length"] == 0:
            groups["reading"].append(i)
        else:
            groups["not reading" if unread > 0 else "stuck"].append(i)
            idle = max(idle, stream["idle_ms"])
    head = f"{enrolled} enrolled" if enrolled is not None else "? enrolled (no answer)"
    parts = [
        f"agents: {head}; of the {len(seen)} this run feeds, {len(groups['reading'])} read "
        f"their stream (or have nothing to read)"
    ]
    if groups["not reading"]:
        parts.append(
            f"{len(groups['not reading'])} have entries they have not read for {idle / 1000:.0f} s "
            "(their agent process is gone or stuck)"
        )
    if groups["stuck"]:
        parts.append(
            f"{len(groups['stuck'])} read entries they never acknowledged (their process died "
            "or hangs mid-batch, e.g. on votes the coordinator does not take)"
        )
    if groups["never"]:
        parts.append(f"{len(groups['never'])} never read theirs (no agent process hosts them)")
    lines = [", ".join(parts)]
    top = sorted(range(len(seen)), key=lambda i: -seen[i]["length"])[:3]
    lines.append(
        f"backlog per agent (largest {len(top)} of {len(seen)}): "
        + ", ".join(
            f"{agents[i]} {seen[i]['length']:,}"
            + (f" ({seen[i]['pending']:,} read, not acknowledged)" if seen[i]["pending"] else "")
            for i in top
        )
    )
    return lines


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
    lines = [f"experiment        {summary.experiment}: {summary.status}"]
    if summary.status == "tied":
        candidates = ", ".join(
            f"{name} (index {index})"
            for index, name in zip(summary.candidates, summary.candidate_names, strict=True)
        )
        lines += [
            f"candidates        {candidates}, all eps-optimal: {summary.correct}",
            f"certified         {summary.certified}",
        ]
    else:
        lines.append(f"identified arm    {arm}, eps-optimal: {summary.correct}")
    lines += [
        f"sample complexity {summary.sample_complexity:,} activations "
        f"({summary.activations_delivered:,} delivered)",
        f"messages          {summary.messages} ({summary.ignored_messages} ignored); "
        f"bound M*K-1 = {summary.threshold * summary.n_arms - 1}",
        f"agents            {summary.agents} (M = {summary.threshold})",
        f"wall time         {summary.wall_seconds:.1f} s, "
        f"{summary.activations_per_second:,.0f} activations/s, peak backlog {summary.peak_backlog:,}",
    ]
    lines += summary.stall
    return "\n".join(lines)
