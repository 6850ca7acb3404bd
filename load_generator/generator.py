"""Deliver activations to the agents' streams, watch the coordinator, and report the run.

Activations go out in pipelined batches (no HTTP per activation). The agents only read and
acknowledge; a poll deletes the acknowledged entries of the streams it reads, and what they hold
then is the backlog (load_generator/streams.py). The generator waits while the backlog exceeds
`max_backlog`, or what Redis may hold of its streams exceeds HELD_BACKLOGS times it, so memory
stays bounded whatever the agents' speed. A poll reads at most `backlog_sample` (512) streams, of
those that may hold entries; with more, it estimates the
backlog from a sample drawn in proportion to what each may hold (load_generator/backlog.py):
reading every stream five times a second made the generator the bottleneck of a run of thousands
of agents. Consumption (what a stall is judged by) is always seen exactly, and every stream is read
once a second while none is seen, at the budget's end and at the end.

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

One load generator per experiment: a run first takes the experiment's lease in Redis
(load_generator/lease.py), renews it with its live figures while it runs (the coordinator shows
them as `load_generator` in GET /v1/experiments/{id}), and deletes it at the end. A second one on
the same experiment waits up to the lease's TTL plus a second (a crashed holder's lease expires),
then gives up: LeaseHeld, exit status 6.

Figures. Every figure of the summary is this run's or is labelled otherwise. Activations processed
by this run are what it delivered less what is still in the streams of it (per stream, at most what
this run delivered there: entries an earlier run left are not this run's), so they are never
negative. The final figure reads every stream; with more than `backlog_sample` agents, the figures
during the run (progress, the lease's, the samples that sample complexity is interpolated from) and
the peak backlog are estimates, whose error is a few percent of the backlog (at most
`max_backlog`), not of the activations. Messages: the final epoch's (`epoch_messages`, against the
bound M*K - 1 that counted votes of an epoch keep when agents act one at a time; under CDE, against
N, one report per agent) and every epoch's total (`messages`), apart. What the coordinator
certifies with the agents enrolled closes the summary: `certified_failure` against delta with its
sentence, and under CDE `certified_epsilon` (e0, for every prior) with `hit_rate_uniform_prior`.

A run that starts on an experiment already identified or tied has nothing to play: it says so in
one line and returns a summary with `ended_before_run` and every run figure 0 (exit status 0);
`dexp experiments reset X` starts a new epoch to play.

Exit status of `python -m load_generator` (`exit_code`): 0 identified or tied, and correct (the arm,
or every candidate, eps-optimal), or already identified or tied before the run (nothing played); 1
budget or deadline reached; 2 bad settings; 3 too few agents (N < M, or CE's N (1 - xi) < M); 4
identified or tied but not correct; 5 stalled; 6 another load generator is feeding the experiment
(it holds the lease, or took it over while this run could not renew it).
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, TypeVar

import httpx
import numpy as np
import redis

from clients.coordinator import CoordinatorClient
from clients.redis import connect_redis
from common import redis_keys as keys
from common.environments import Problem, build_problem
from common.rounding import upper
from common.wire import encode_rewards
from load_generator.backlog import SAMPLE, BacklogGauge
from load_generator.lease import Lease
from load_generator.settings import LoadSettings
from load_generator.streams import trim_acknowledged

log = logging.getLogger("dexp.load_generator")
T = TypeVar("T")
# What Redis may hold of a run's streams, in max_backlogs: the backlog, and the entries acknowledged
# since their stream was last read (only a poll deletes them, load_generator/streams.py). With
# every stream read at each poll (up to `backlog_sample` agents) the two limits are one.
HELD_BACKLOGS = 2


class NotEnoughAgents(RuntimeError):
    pass


@dataclass
class Summary:
    """A run's report. Figures of this run: activations_delivered, activations_processed,
    wall_seconds, activations_per_second, peak_backlog, run_messages. Figures of the epoch the run
    ended in: epoch, epoch_votes (counted: the sum of the votes per arm), epoch_messages (votes
    received, counted or not), against message_bound = M*K - 1, which bounds the counted votes of
    an epoch when agents act one at a time. All epochs since the experiment began: messages and
    ignored_messages (the coordinator's totals); first_epoch..epoch are the epochs this run saw."""

    experiment: str
    # identified | tied | budget | timeout | stalled. With ended_before_run, the experiment was
    # already identified or tied when the run started: nothing was played, every run figure is 0.
    status: str
    # Activations processed by this run when the last elimination of the final epoch happened
    # (identified), when the tie was seen (tied), or at the end; never negative.
    sample_complexity: int
    activations_delivered: int  # by this run
    messages: int  # every epoch's, since the experiment began (the coordinator's total)
    ignored_messages: int  # every epoch's
    identified_arm: int | None
    identified_name: str | None
    # identified: the arm is eps-optimal; tied: every candidate is; None when not judged
    correct: bool | None
    agents: int
    threshold: int
    n_arms: int
    wall_seconds: float  # this run's
    activations_per_second: float  # processed by this run, per second of its wall time
    peak_backlog: int  # the most activations in the agents' streams this run saw
    eliminations: list[dict[str, Any]] = field(default_factory=list)  # of the final epoch
    candidates: list[int] = field(default_factory=list)  # tied: the arms left
    candidate_names: list[str] = field(default_factory=list)
    certified: str | None = None  # tied: what the coordinator certifies about the candidates
    stall: list[str] = field(default_factory=list)  # stalled: what the generator saw, line by line
    run: str = ""  # this run's id (as in the lease)
    activations_processed: int = 0  # this run's activations the agents processed
    ended_before_run: bool = False  # identified or tied before this run: nothing played
    epoch: int = 0  # the epoch the run ended in
    first_epoch: int = 0  # the epoch the run started in
    epoch_votes: int = 0  # counted votes of the final epoch (sum of the votes per arm)
    epoch_messages: int = 0  # votes received in the final epoch, counted or not
    message_bound: int = 0  # M*K - 1: counted votes per epoch, agents acting one at a time
    run_messages: int = 0  # votes the coordinator received during this run, every epoch
    algorithm: str = ""  # the experiment's; under cde the figures count reports, not votes
    # What the coordinator certifies with the agents enrolled (its documents' fields): the bound
    # on a wrong answer, against delta, and under cde e0 (every prior) and the hit-rate bound
    # under a uniform prior.
    certified_failure: float | None = None
    certified_agents: int | None = None  # the N it holds for: the agents enrolled at the end
    delta: float | None = None
    certificate: str | None = None
    certified_epsilon: float | None = None
    hit_rate_uniform_prior: float | None = None
    privacy_certificate: str | None = None
    # ldp: what the coordinator learned (its documents' fields): the allocation, per arm the
    # estimate {index, name, reports, mean, ci}, the leader's lift {vs, name, mean, ci} over each
    # other arm; B and dp_epsilon; and the visits one user could have in this run (0: no limit)
    allocation: list[float] | None = None
    estimates: list[dict[str, Any]] | None = None
    lift: list[dict[str, Any]] | None = None
    dp_epsilon: float | None = None
    reports_per_agent: int | None = None
    visits_per_user: int = 0

    @property
    def epochs_seen(self) -> int:
        """Epochs this run saw: the one it started in, and one more per reset during it."""
        return max(1, self.epoch - self.first_epoch + 1)


def exit_code(summary: Summary) -> int:
    """0: identified or tied, and correct, or already so before the run (nothing played); 4:
    identified or tied, not correct; 5: stalled; 1: the budget or the deadline ran out (2, 3 and 6
    are for bad settings, too few agents, and another load generator feeding the experiment)."""
    if summary.ended_before_run:
        return 0
    if summary.status in ("identified", "tied"):
        return 0 if summary.correct else 4
    return 5 if summary.status == "stalled" else 1


def agents_needed(state: dict[str, Any]) -> int:
    """Enrolled agents a run needs: the threshold M (+ f), and under CE, which drops each vote
    with probability xi, M / (1 - xi) (fewer cannot remove an arm in expectation)."""
    threshold = int(state["threshold"])
    params = state.get("params", {})
    if params.get("algorithm") == "ldp":
        return max(1, threshold)  # no threshold: any fleet reports, at least one agent to play
    xi = float(params.get("xi", 0.0)) if params.get("algorithm") == "ce" else 0.0
    return max(threshold, math.ceil(threshold / (1.0 - xi) - 1e-9)) if xi else threshold


@dataclass
class _Feed:
    """One run's state while it feeds the agents: what it delivered, what the agents processed
    (delivered minus this run's backlog), the backlog, and how the run ended (status, stall)."""

    agents: list[str]
    streams: list[str]
    p: np.ndarray  # each agent's activation probability
    gauge: BacklogGauge
    start: float
    samples: list[tuple[float, int]]  # (wall ms, processed): when the last elimination happened
    recent: deque[tuple[float, int]]
    last_full: float  # when every stream was last read
    progress_at: float  # when the agents were last seen consuming
    last_poll: float = 0.0
    delivered: int = 0
    processed: int = 0
    backlog: int = 0
    own_backlog: int = 0
    peak_backlog: int = 0
    status: str = "budget"
    stop_processed: int = 0
    best: dict[str, Any] = field(default_factory=dict)
    stall: list[str] = field(default_factory=list)
    unreachable: bool = False  # stalled because the coordinator or Redis stopped answering
    budget: int = 0  # the activations this run may deliver: the budget, or every visit left
    visits_left: np.ndarray | None = None  # per agent, when visits per user are capped


class LoadGenerator:
    # Streams whose length a poll reads, at most on average (load_generator/backlog.py): a run of
    # more agents estimates its backlog from a sample; consumption and the end stay exact.
    backlog_sample: int = SAMPLE
    gauge: BacklogGauge | None = None  # the last run's (its counters: polls, streams read)

    def __init__(self, settings: LoadSettings, out: Any = None) -> None:
        self.settings = settings
        self.out = sys.stderr if out is None else out  # the progress lines (None: stderr now)
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
        self.redis = connect_redis(settings.redis_url, cluster=settings.redis_cluster)
        self.redis_retries = 0
        self.rng = np.random.default_rng(settings.seed)
        # the last progress line printed (not on a terminal), when, and the quiet note
        self._shown: tuple[Any, ...] = ()
        self._shown_at = -math.inf
        self._quiet_noted = False
        self.lease: Lease | None = None  # this run's lease, while run() runs
        self.visits = 0  # the visits one user may have in this run (0: no limit)

    def close(self) -> None:
        self.client.close()
        self.redis.close()

    def __enter__(self) -> LoadGenerator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def wait_for_agents(self, lease: Lease | None = None) -> tuple[dict[str, str], dict[str, Any]]:
        """Enrolled agents (id -> its activation stream) once there are enough (see
        agents_needed) and enrollment has been quiet a moment."""
        exp = self.settings.experiment
        deadline = time.monotonic() + self.settings.agent_wait_seconds
        last_count, quiet_since, last_note = -1, time.monotonic(), 0.0
        while True:
            if lease is not None:
                lease.check()
            state = self.client.experiment(exp)
            if lease is not None:
                lease.update(epoch=int(state["epoch"]))
            count, threshold = int(state["agents"]), int(state["threshold"])
            needed = agents_needed(state)
            if count != last_count:
                last_count, quiet_since = count, time.monotonic()
            if count >= needed and time.monotonic() - quiet_since >= self.settings.settle_seconds:
                agents = self._streams_of_agents(exp)
                for warning in state.get("warnings", []):
                    print(f"warning: {warning}", file=self.out)
                return agents, state
            if time.monotonic() > deadline:
                if state.get("reports_per_agent") is not None:
                    raise NotEnoughAgents(f"experiment {exp!r} has no agent to report: run agents")
                if count < threshold:
                    needs = (
                        f"is accepted at M={threshold} reports, one per agent"
                        if state.get("reports") is not None
                        else f"needs M={threshold} distinct voters"
                    )
                    raise NotEnoughAgents(
                        f"experiment {exp!r} has {count} agent(s) but an arm {needs}, so it can "
                        "never end: run more agents "
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

    def _streams_of_agents(self, exp: str) -> dict[str, str]:
        """The enrolled agents and their activation streams, named with the stream secrets the
        coordinator wrote when it enrolled them (keys.stream_secrets). An agent without one
        (enrolled by an older version of the coordinator) gets no activations: said once."""

        def read() -> tuple[list[Any], list[Any]]:
            members: list[Any] = list(self.redis.zrange(keys.agents(exp), 0, -1))  # type: ignore[arg-type]
            found = self.redis.hmget(keys.stream_secrets(exp), members) if members else []
            return members, found

        members, found = self._redis(read)
        streams = {
            _text(a): keys.activations(exp, _text(a), _text(s))
            for a, s in zip(members, found, strict=True)
            if s is not None
        }
        if len(streams) < len(members):
            print(
                f"warning: {len(members) - len(streams)} agent(s) of {exp!r} have no stream "
                "secret (enrolled by an older version of the coordinator): they get no "
                "activations",
                file=self.out,
            )
        return streams

    def run(self) -> Summary:
        """Take the experiment's lease (LeaseHeld if another load generator feeds it), play until
        the experiment ends, release the lease, and report the run."""
        s = self.settings
        lease = Lease(s.redis_url, s.experiment, s.lease_seconds)
        self.lease = lease
        try:
            lease.acquire()
            return self._run(lease)
        finally:
            lease.close()

    def _run(self, lease: Lease) -> Summary:
        """Wait for the agents, feed them until the experiment ends (or the budget, a stall, the
        time limit, an unreachable service), then read the end state and report."""
        s = self.settings
        env = self.problem.environment
        before = self.client.experiment(s.experiment)
        lease.update(epoch=int(before["epoch"]))
        if before["status"] in ("identified", "tied"):
            return self._ended_before_run(before, lease)
        agents, state = self.wait_for_agents(lease)
        if len(state["arms"]) != env.n_arms:
            raise ValueError(
                f"experiment {s.experiment!r} has {len(state['arms'])} arms, "
                f"the problem has {env.n_arms}"
            )
        visits = self.visits_per_user(state)
        self.visits = visits
        feed = self._start_feed(agents, visits)
        try:
            self._play(feed, lease)
        except (ConnectionError, redis.ConnectionError, redis.TimeoutError) as exc:
            # The client (coordinator) or _redis gave up after unreachable_seconds of retries.
            feed.status, feed.unreachable = "stalled", True
            what = "Redis" if isinstance(exc, redis.RedisError) else "the coordinator"
            feed.stall = [
                f"stalled: {what} did not answer for {s.unreachable_seconds:g} s "
                f"(DEXP_UNREACHABLE_SECONDS): {exc}",
                self._coordinator_answer(),
            ]
        return self._finish(feed, before, state, lease)

    def visits_per_user(self, state: dict[str, Any]) -> int:
        """The visits one user may have (0: no limit): DEXP_VISITS_PER_USER, or for an ldp
        experiment its reports_per_agent B (a visit beyond B would carry no report)."""
        if self.settings.visits_per_user is not None:
            return self.settings.visits_per_user
        params = state.get("params", {})
        return int(params.get("reports_per_agent", 1)) if params.get("algorithm") == "ldp" else 0

    def _start_feed(self, streams_of: dict[str, str], visits: int = 0) -> _Feed:
        """The run's state before the first batch (`streams_of`: agent id -> its stream): every
        stream read once, the entries an earlier run left included."""
        s = self.settings
        agents, streams = list(streams_of), list(streams_of.values())
        # Per stream, what this run delivered (of a stream's entries, at most that many are this
        # run's: the agents read in order, so entries left by an earlier run go first), and the
        # backlog, read from a sample of the streams when they are many (load_generator/backlog.py).
        gauge = BacklogGauge(
            len(streams),
            partial(self._lengths_of, streams),
            self.backlog_sample,
            rng=np.random.default_rng(None if s.seed is None else [s.seed, 1]),
        )
        self.gauge = gauge
        start = time.monotonic()
        feed = _Feed(
            agents=agents,
            streams=streams,
            p=self.problem.activation.probabilities(len(agents)),
            gauge=gauge,
            start=start,
            samples=[(time.time() * 1000, 0)],
            recent=deque([(start, 0)]),  # for the lease's recent rate
            last_full=start,
            progress_at=start,
        )
        feed.budget = s.budget if not visits else min(s.budget, visits * len(agents))
        if visits:
            feed.visits_left = np.full(len(agents), visits, dtype=np.int64)
        reading = gauge.poll()  # every stream: the entries an earlier run left included
        feed.backlog, feed.own_backlog = reading.backlog, reading.own
        return feed

    def _play(self, feed: _Feed, lease: Lease) -> None:
        """Batches of activations into the agents' streams, at the rate and within the backlog
        asked for, with a poll of the experiment every 0.2 s, until a poll or the budget ends it."""
        s = self.settings
        while True:
            now = time.monotonic()
            if now - feed.last_poll >= 0.2:
                feed.last_poll = now
                if self._poll(feed, lease, now):
                    break
            if feed.delivered >= feed.budget:
                time.sleep(0.05)
                continue
            # Redis holds at most the gauge's bound of this run's streams (acknowledged entries
            # stay until a poll reads their stream and deletes them): kept under HELD_BACKLOGS
            # times max_backlog, when a sample's estimate of the backlog is below it.
            if feed.backlog >= s.max_backlog or feed.gauge.bound >= HELD_BACKLOGS * s.max_backlog:
                self._back_off(feed)
                continue
            if s.rate > 0 and feed.delivered >= s.rate * (now - feed.start):
                time.sleep(min(0.01, s.batch / s.rate))
                continue
            self._deliver(feed)
            # At the budget, let the agents finish what this run put in flight, then stop.
            if feed.delivered >= feed.budget and feed.gauge.poll(full=True).own == 0:
                break

    def _poll(self, feed: _Feed, lease: Lease, now: float) -> bool:
        """Read the backlog and the best arm, renew the lease, print progress; True when the run
        ends here (identified or tied, stalled, timed out, or the budget processed)."""
        s = self.settings
        lease.check()
        # Every stream is read (at most once a second) while no consumption is seen, and at the
        # budget's end: a stall, quiet agents and the end are judged on exact figures, never on a
        # sample.
        full = feed.delivered >= feed.budget or (
            now - feed.progress_at >= 1.0 and now - feed.last_full >= 1.0
        )
        reading = feed.gauge.poll(full)
        if reading.exact:
            feed.last_full = now
        feed.backlog, feed.own_backlog = reading.backlog, reading.own
        feed.peak_backlog = max(feed.peak_backlog, feed.backlog)
        feed.processed = max(feed.processed, feed.delivered - feed.own_backlog)
        feed.samples.append((time.time() * 1000, feed.processed))
        if reading.consumed:
            feed.progress_at = now
        feed.best = best = self.client.request("GET", f"/v1/experiments/{s.experiment}/best-arm")
        feed.recent.append((now, feed.processed))
        while len(feed.recent) > 2 and now - feed.recent[1][0] >= RECENT_SECONDS:
            feed.recent.popleft()
        lease.update(
            epoch=int(best["epoch"]),
            activations=feed.processed,
            delivered=feed.delivered,
            backlog=feed.own_backlog,
            activations_per_second=_rate(feed.recent),
        )
        quiet = now - feed.progress_at
        self._progress(feed.processed, best, now - feed.start, quiet, feed.backlog)
        if best["status"] in ("identified", "tied"):
            feed.status, feed.stop_processed = best["status"], feed.processed
            return True
        if feed.backlog > 0 and quiet >= s.stall_seconds and reading.exact:
            feed.status = "stalled"
            feed.stall = self.diagnose(feed.agents, feed.streams, quiet, feed.backlog)
            return True
        if now - feed.start > s.max_seconds:
            feed.status = "timeout"
            return True
        # the budget is spent and the agents processed all of it
        return feed.delivered >= feed.budget and feed.own_backlog == 0

    def _back_off(self, feed: _Feed) -> None:
        """The backlog is at its limit: wait about as long as the agents take to consume the
        excess at their recent rate, then read it again."""
        excess = max(1, feed.backlog - self.settings.max_backlog + 1)
        time.sleep(_backpressure_wait(excess, _rate(feed.recent)))
        reading = feed.gauge.poll()
        feed.backlog, feed.own_backlog = reading.backlog, reading.own
        feed.peak_backlog = max(feed.peak_backlog, feed.backlog)
        if reading.consumed:
            feed.progress_at = time.monotonic()

    def _deliver(self, feed: _Feed) -> None:
        """One batch: activation times, the rewards of every arm at those times, the agent each
        activation goes to (by the activation process), written to the streams."""
        s, env = self.settings, self.problem.environment
        n = min(s.batch, feed.budget - feed.delivered)
        t = np.arange(feed.delivered, feed.delivered + n)
        mu = np.asarray(env.means, dtype=float) + env.drift_array * t[:, None]
        if env.bounded:
            rewards = (self.rng.random((n, env.n_arms)) < np.clip(mu, 0.0, 1.0)).astype(float)
        else:
            rewards = self.rng.normal(mu, env.sigma)
        who = self._who(feed, n)
        rows = encode_rewards(rewards, env.bounded)
        batch: list[tuple[str, dict[Any, Any]]] = [
            (feed.streams[who[i]], {"t": int(t[i]), "r": rows[i]}) for i in range(n)
        ]
        retries = self.redis_retries
        self._redis(partial(self._xadd, batch))
        if self.redis_retries != retries:
            feed.gauge.resync = True  # a batch sent again may have delivered some twice
        feed.delivered += n
        feed.gauge.delivered(np.bincount(who, minlength=len(feed.streams)))
        feed.backlog, feed.own_backlog = feed.backlog + n, feed.own_backlog + n
        feed.peak_backlog = max(feed.peak_backlog, feed.backlog)

    def _who(self, feed: _Feed, n: int) -> np.ndarray:
        """The agents of `n` activations, by the activation process; with visits capped, only
        agents with visits left, each taking one (fresh users, as a site sees new visitors)."""
        if feed.visits_left is None:
            return self.rng.choice(len(feed.agents), size=n, p=feed.p)
        left, chosen = feed.visits_left, list[int]()
        while len(chosen) < n and left.any():
            weights = feed.p * (left > 0)
            for i in self.rng.choice(len(left), size=n - len(chosen), p=weights / weights.sum()):
                if left[i] > 0:
                    left[i] -= 1
                    chosen.append(int(i))
        return np.asarray(chosen, dtype=np.int64)

    def _finish(
        self, feed: _Feed, before: dict[str, Any], state: dict[str, Any], lease: Lease
    ) -> Summary:
        """The end state, the exact figures left in the lease, and the run's summary."""
        wall = time.monotonic() - feed.start
        if feed.unreachable:  # reading the end state would wait as long again: the last one seen
            final = state
        else:
            final = self.client.experiment(self.settings.experiment)
            # Exact (every stream read): an estimate during the run may have been a little high.
            feed.processed = feed.delivered - feed.gauge.poll(full=True).own
        processed, delivered = feed.processed, feed.delivered
        # the run's rate as its summary gives it (not the last seconds' rate the lease showed
        # while it ran): the experiment's result keeps this one
        lease.update(
            activations=processed,
            delivered=delivered,
            epoch=int(final["epoch"]),
            activations_per_second=run_rate(processed, wall),
        )
        if not feed.unreachable and lease.flush():
            # one read while the lease holds the final figures: the experiment's result keeps them
            # (a decision read before, with the previous renewal's figures, is refreshed)
            final = self.client.experiment(self.settings.experiment)
        sample_complexity = processed
        if feed.status == "identified" and final["eliminations"]:
            at = final["eliminations"][-1]["time"]
            sample_complexity = _interpolate(feed.samples, at, processed)
        if feed.status == "tied":
            sample_complexity = feed.stop_processed
        print(file=self.out)
        return self._summary(
            feed.status,
            final,
            before,
            feed.best,
            agents=len(feed.agents),
            delivered=delivered,
            processed=processed,
            sample_complexity=min(sample_complexity, processed),
            wall=wall,
            peak_backlog=feed.peak_backlog,
            stall=feed.stall,
            lease=lease,
        )

    def _ended_before_run(self, state: dict[str, Any], lease: Lease) -> Summary:
        """The experiment was identified or tied before this run: nothing to play. It says so in
        one line and reports the experiment's state, with every figure of the run at 0 and the
        outcome not judged (this run's problem may not be the one that was played)."""
        s = self.settings
        status = state["status"]
        again = (
            "a CDE experiment is never reset: create a new one"
            if state.get("reports") is not None
            else f"`dexp experiments reset {s.experiment}` starts a new epoch"
        )
        print(
            f"experiment {s.experiment} is already {status} (epoch {state['epoch']}) before this "
            f"run: nothing to play; {again}",
            file=self.out,
            flush=True,
        )
        best: dict[str, Any] = {}
        if status == "tied":
            best = self.client.request("GET", f"/v1/experiments/{s.experiment}/best-arm")
        return self._summary(
            status,
            state,
            state,
            best,
            agents=int(state["agents"]),
            delivered=0,
            processed=0,
            sample_complexity=0,
            wall=0.0,
            peak_backlog=0,
            stall=[],
            lease=lease,
            ended_before_run=True,
        )

    def _summary(
        self,
        status: str,
        final: dict[str, Any],
        before: dict[str, Any],
        best: dict[str, Any],
        *,
        agents: int,
        delivered: int,
        processed: int,
        sample_complexity: int,
        wall: float,
        peak_backlog: int,
        stall: list[str],
        lease: Lease,
        ended_before_run: bool = False,
    ) -> Summary:
        env = self.problem.environment
        epsilon = float(final["params"]["epsilon"])
        processed, sample_complexity = max(0, processed), max(0, sample_complexity)
        arm = final["remaining_arms"][0] if len(final["remaining_arms"]) == 1 else None
        candidates = (
            [int(c["index"]) for c in best.get("candidates", [])] if status == "tied" else []
        )
        correct: bool | None = None
        if ended_before_run:
            correct = None
        elif status == "identified" and arm is not None:
            correct = env.eps_optimal(arm, epsilon, sample_complexity)
        elif status == "tied":
            correct = all(env.eps_optimal(c, epsilon, sample_complexity) for c in candidates)
        threshold, n_arms = int(final["threshold"]), len(final["arms"])
        reports = final.get("reports")  # cde: one report per agent, no vote
        counted = final["votes"] if reports is None else reports
        params = final.get("params", {})
        return Summary(
            experiment=self.settings.experiment,
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
            agents=agents,
            threshold=threshold,
            n_arms=n_arms,
            wall_seconds=round(wall, 3),
            activations_per_second=run_rate(processed, wall),
            peak_backlog=peak_backlog,
            eliminations=final["eliminations"],
            candidates=candidates,
            candidate_names=[final["arms"][c] for c in candidates],
            certified=best.get("certified") if status == "tied" else None,
            stall=stall,
            run=lease.run,
            activations_processed=processed,
            ended_before_run=ended_before_run,
            epoch=int(final["epoch"]),
            first_epoch=min(int(before["epoch"]), int(final["epoch"])),
            epoch_votes=sum(int(v) for v in counted),
            epoch_messages=_epoch_messages(final),
            message_bound=threshold * n_arms - 1
            if reports is None
            else int(final["agents"]) * int(final.get("reports_per_agent") or 1),
            run_messages=max(0, int(final["messages"]) - int(before["messages"])),
            algorithm=str(params.get("algorithm", "")),
            certified_failure=_number(final.get("certified_failure")),
            certified_agents=final.get("certified_agents"),
            delta=_number(params.get("delta")),
            certificate=final.get("certificate"),
            certified_epsilon=_number(final.get("certified_epsilon")),
            hit_rate_uniform_prior=_number(final.get("hit_rate_uniform_prior")),
            privacy_certificate=(
                final.get("privacy_certificate")
                if isinstance(final.get("privacy_certificate"), str)
                else None
            ),
            allocation=final.get("allocation"),
            estimates=final.get("estimates"),
            lift=final.get("lift"),
            dp_epsilon=_number(final.get("dp_epsilon")) if final.get("estimates") else None,
            reports_per_agent=final.get("reports_per_agent"),
            visits_per_user=self.visits,
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
        """Per stream: its backlog (its length once the acknowledged entries are deleted), the
        entries read but not acknowledged, and how long ago its consumer last read (None: no
        consumer group or consumer, i.e. never read)."""
        backlogs = trim_acknowledged(self.redis, streams)
        pipe = self.redis.pipeline(transaction=False)
        for stream in streams:
            pipe.xinfo_consumers(stream, keys.ACTIVATION_GROUP)
        replies = pipe.execute(raise_on_error=False)
        result = []
        for length, consumers in zip(backlogs, replies, strict=True):
            if isinstance(consumers, Exception) or not consumers:  # NOGROUP / no such key
                result.append(
                    {
                        "length": length,
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

    def _lengths_of(self, streams: list[str], indices: np.ndarray) -> np.ndarray:
        """The backlogs of streams[i] for i in `indices`, their acknowledged entries deleted first
        (load_generator/streams.py: the agents only read and acknowledge). Retried while Redis is
        unreachable."""
        chosen = [streams[i] for i in indices]
        return self._redis(lambda: np.asarray(trim_acknowledged(self.redis, chosen), np.int64))

    def _xadd(self, batch: list[tuple[str, dict[Any, Any]]]) -> None:
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
        reports = best.get("reports")  # cde: one report per agent, no vote
        counted = "votes" if reports is None else "reports"
        votes = sum((best.get("votes", {}) if reports is None else reports).values())
        remaining = len(best.get("remaining_arms", []))
        rate = processed / elapsed if elapsed > 0 else 0.0
        status = best.get("status", "")
        epoch = int(best.get("epoch", 0))
        line = (
            f"activations {processed:>10,}  {counted} {votes:>5}  remaining arms {remaining:>3}  "
            f"rate {rate:>9,.0f}/s  {status}" + (f"  epoch {epoch}" if epoch else "")
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


RECENT_SECONDS = 5.0  # the lease's activations_per_second: over about this long


def _backpressure_wait(excess: int, rate: float) -> float:
    """How long to wait, the backlog over its limit by `excess`, before reading it again: about
    the time the agents take to consume the excess at their recent rate, from 10 to 100 ms (50 ms
    while no rate is known)."""
    if rate <= 0:
        return 0.05
    return min(0.1, max(0.01, excess / rate))


def run_rate(processed: int, wall: float) -> float:
    """A run's activations processed per second of its wall time: its summary's figure."""
    return round(processed / wall, 1) if wall > 0 else 0.0


def _rate(recent: deque[tuple[float, int]]) -> float:
    """Activations processed per second between the oldest and newest (time, processed)."""
    (t0, p0), (t1, p1) = recent[0], recent[-1]
    return round(max(0, p1 - p0) / (t1 - t0), 1) if t1 > t0 else 0.0


def _epoch_messages(state: dict[str, Any]) -> int:
    """Votes the coordinator received this epoch (a coordinator without the field: all of them in
    epoch 0, else unknown: 0)."""
    if "epoch_messages" in state:
        return int(state["epoch_messages"])
    return int(state["messages"]) if int(state["epoch"]) == 0 else 0


def _number(value: Any) -> float | None:
    """A number of a coordinator's document (None if absent: an older coordinator)."""
    return None if value is None or isinstance(value, bool) else float(value)


def _interpolate(samples: list[tuple[float, int]], at_ms: float, default: int) -> int:
    """Activations processed at wall time `at_ms`, from the (time, processed) samples."""
    times = np.array([t for t, _ in samples])
    counts = np.array([c for _, c in samples], dtype=float)
    if at_ms > times[-1]:
        return default
    return int(np.interp(at_ms, times, counts))


def format_summary(summary: Summary, as_json: bool) -> str:
    """The summary for a person (or one JSON object): the outcome, this run's figures, the final
    epoch's messages against the bound M*K - 1, and every epoch's total, each labelled."""
    if as_json:
        return json.dumps({**asdict(summary), "epochs_seen": summary.epochs_seen})
    judged = (
        "not judged (ended before this run)" if summary.ended_before_run else str(summary.correct)
    )
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
            f"candidates        {candidates}, all eps-optimal: {judged}",
            f"certified         {summary.certified}",
        ]
    else:
        lines.append(f"identified arm    {arm}, eps-optimal: {judged}")
    if summary.ended_before_run:
        lines.append(
            f"this run          nothing played: the experiment was already {summary.status} "
            f"(epoch {summary.epoch}) when run {summary.run} started"
        )
    else:
        at = {"identified": "at the last elimination", "tied": "when the tie was seen"}
        lines += [
            f"sample complexity {summary.sample_complexity:,} activations "
            f"({at.get(summary.status, 'at the end')}, counted from this run's start)",
            f"this run          {summary.activations_delivered:,} activations delivered, "
            f"{summary.activations_processed:,} processed in {summary.wall_seconds:.1f} s "
            f"({summary.activations_per_second:,.0f}/s), peak backlog {summary.peak_backlog:,} "
            f"(run {summary.run})",
        ]
    counted = (
        f"{summary.epoch_votes} reports counted, {summary.epoch_messages} messages; bound N = "
        f"{summary.message_bound} (one report per agent)"
        if summary.algorithm == "cde"
        else f"{summary.epoch_votes} private reports counted, {summary.epoch_messages} messages; "
        f"bound N x B = {summary.message_bound} (B = {summary.reports_per_agent} per agent)"
        if summary.algorithm == "ldp"
        else f"{summary.epoch_votes} votes counted, {summary.epoch_messages} messages this epoch; "
        f"bound M*K-1 = {summary.message_bound} (counted votes per epoch, agents acting one at a "
        "time)"
    )
    lines += [
        f"epoch {summary.epoch:<11} {counted}",
        f"all epochs        {summary.messages} messages ({summary.ignored_messages} ignored) "
        f"since the experiment began, {summary.run_messages} during this run; "
        + (
            f"this run saw {summary.epochs_seen} epochs ({summary.first_epoch} to {summary.epoch})"
            if summary.epochs_seen > 1
            else f"this run saw 1 epoch ({summary.epoch})"
        ),
        f"agents            {summary.agents} "
        + (
            f"(each sends at most B = {summary.reports_per_agent} private reports)"
            if summary.algorithm == "ldp"
            else f"(M = {summary.threshold})"
        ),
    ]
    if summary.visits_per_user:
        lines.append(
            f"visits per user   at most {summary.visits_per_user} (fresh users drawn from the "
            "activation distribution)"
        )
    lines += crowd_lines(summary.estimates, summary.lift, summary.allocation)
    lines += certified_lines(summary)
    lines += summary.stall
    return "\n".join(lines)


def _interval(ci: list[float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _mean(value: float | None, signed: bool = False) -> str:
    return "-" if value is None else f"{value:+.3f}" if signed else f"{value:.3f}"


def crowd_lines(
    estimates: list[dict[str, Any]] | None,
    lift: list[dict[str, Any]] | None,
    allocation: list[float] | None = None,
) -> list[str]:
    """ldp: each arm's estimate (mean and interval, simultaneous and anytime at 1 - delta) and
    the leader's lift over each other arm; nothing for the other algorithms. Shared by the load
    generator's summary, `dexp experiments show` and `dexp demo`."""
    if not estimates:
        return []
    lines = ["estimates         arm: mean [interval] (reports, allocation)"]
    for e in estimates:
        weight = (
            f", allocation {allocation[e['index']]:.2f}"
            if allocation and e["index"] < len(allocation)
            else ""
        )
        lines.append(
            f"  {e['name']} (index {e['index']}): {_mean(e['mean'])} {_interval(e['ci'])} "
            f"({e['reports']} reports{weight})"
        )
    if lift:
        others = {item["vs"] for item in lift}
        leader = next((e for e in estimates if e["index"] not in others), None)
        named = f"{leader['name']} (index {leader['index']})" if leader else "the leader"
        lines.append(f"lift              {named} - arm: mean [interval]")
        lines += [
            f"  vs {item['name']} (index {item['vs']}): {_mean(item['mean'], True)} "
            f"{_interval(item['ci'])}"
            for item in lift
        ]
    return lines


def certified_lines(summary: Summary) -> list[str]:
    """What the coordinator certifies with the agents enrolled: the bound on a wrong answer
    against delta, its sentence, and under cde e0 (for every prior) with the hit-rate bound under
    a uniform prior."""
    if summary.certified_failure is None:
        return []
    verdict = ""
    if summary.delta is not None:
        within = summary.certified_failure <= summary.delta
        verdict = f" ({'within' if within else 'ABOVE'} delta = {summary.delta:g})"
    lines = [
        f"certified failure at most {upper(summary.certified_failure)} with "
        f"{summary.certified_agents} agents{verdict}"
        + (f": {summary.certificate}" if summary.certificate else "")
    ]
    if summary.certified_epsilon is None:
        return lines
    if summary.privacy_certificate is not None:  # it starts with e0
        lines.append(f"certified epsilon {summary.privacy_certificate}")
    else:
        hit = summary.hit_rate_uniform_prior
        lines.append(
            f"certified epsilon e0 = {upper(summary.certified_epsilon)}"
            + (f" (hit rate under a uniform prior at most {upper(hit)})" if hit is not None else "")
        )
    return lines


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
