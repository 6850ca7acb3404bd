"""The agent service: the process that hosts agents of one or several experiments, fed by Redis
streams (`python -m agent`).

Its parts, each in its own module: which experiments it hosts and what stops one
(agent/discovery.py), how their agents are enrolled (agent/enrollment.py), the reading and
acknowledging of their activation streams (agent/streams.py), the following of their global sets
and the re-sending of lost votes (agent/following.py); each agent is an agent/library.py Agent
(rewards and local statistics never leave the process), its credentials and votes kept across
restarts in DEXP_STATE_DIR (agent/state.py). This module runs them in one loop, with one coordinator
client (clients/coordinator.py) and one Redis connection (clients/redis.py), which serves only the
activation streams: the global sets are followed over HTTP, as a device follows one (one event
stream per experiment, in a thread: agent/events.py).

Faults. The coordinator unreachable: every request is retried with capped back-off until it answers
(the event streams poll and reconnect on their own). Redis unreachable: the loop waits with capped
back-off, then reads the pending entries again (agent/streams.py).

At start, with a fixed list, the process exits with status 3 (one log line, no traceback) when no
experiment of it got all its agents, as it always did with one id, and as an operator who must
supply tickets expects; except at a limit (403): then it runs with the agents it got if it got
any, since they are enrolled and count in the experiment (its threshold, its ties), so an exit
would leave them as orphans that hold activations nobody reads and still count against the limit;
it exits with status 3 only when it got no agent in any experiment. Under `*` it never exits for
an enrollment problem. Exit status: 0 stopped (SIGTERM, SIGINT); 2 invalid configuration; 3 no
experiment of a fixed list hostable at start (the line says why and what to do); 1 Redis never
reachable at start, or a refusal nothing above handles (one line each).

Stop. On SIGTERM or SIGINT the loop ends and, with DEXP_LEAVE_ON_STOP (compose's default), every agent
of the process leaves its experiment (DELETE /v1/agents/me) and its saved state is removed: a
scaled-down or stopped host leaves no agent enrolled that nobody runs (the load generator would
feed it, and the experiment count it). What the agents voted this epoch stands (docs/SCALING.md,
"Agents that come and go"). Killed without a word (SIGKILL, a crash, a lost machine), the process
renews no lease, and its agents leave once their lease lapses (agent/leases.py).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from typing import Any

import redis
from pydantic import ValidationError

from agent.discovery import Discovery, Hosted, refusal_hint
from agent.enrollment import EnrollmentFailed
from agent.following import Follower
from agent.leases import Renewal
from agent.settings import AgentSettings
from agent.state import StateDir
from agent.streams import REDIS_DOWN, StreamReader
from clients.coordinator import CoordinatorClient, CoordinatorError
from clients.redis import connect_redis

# The agent service's log lines keep the name operators filter on, whichever module writes them.
log = logging.getLogger("dexp.agent.service")


class AgentService:
    """The process: its parts wired together (it is the Plumbing its Discovery sets experiments
    up with), the loop that runs them, and its stop."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.stopping = False
        self.client = CoordinatorClient(
            settings.coordinator_url,
            retry_max_seconds=settings.retry_max_seconds,
            should_stop=lambda: self.stopping,
        )
        self.redis = connect_redis(settings.redis_url, cluster=settings.redis_cluster)
        # One directory (and lock) for every experiment: `of` gives each its own agents.
        self.state = (
            StateDir(settings.state_dir, "", settings.state_fsync) if settings.state_dir else None
        )
        if self.state:
            self.state.lock()
        self.discovery = Discovery(settings, self.client, self.state, self)
        self.reader = StreamReader(self.redis, settings, self.discovery, lambda: self.stopping)
        self.follower = Follower(settings, self.client, self.discovery)
        self.renewal = Renewal(self.client, self.discovery)
        failure = self.discovery.start()
        if failure is not None:
            self.close()
            raise EnrollmentFailed(failure)

    # -- what hosting an experiment sets up (discovery.Plumbing) ----------------------------------
    def follow(self, hosted: Hosted) -> None:
        self.follower.follow(hosted)

    def unfollow(self, hosted: Hosted) -> None:
        self.follower.unfollow(hosted)

    def read_pending(self) -> None:
        self.reader.drained = False

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> None:
        last_log, delay = time.monotonic(), 0.05
        try:
            while not self.stopping:
                try:
                    now = time.monotonic()
                    self.renewal.renew_if_due(now)  # first: agents gone are forgotten, replaced
                    if now >= self.discovery.next_discovery:
                        self.discovery.discover()
                    self.discovery.resume(now)
                    self.follower.resend()
                    self.reader.drain_if_due(now)
                    self.follower.follow_global_set()
                    self.follower.reconcile()
                    self.reader.process(self.reader.read(">"))
                    delay = 0.05
                except REDIS_DOWN as exc:
                    self.reader.drained = False
                    while not self.stopping:
                        try:
                            self._recover_redis(exc, delay)
                            break
                        except REDIS_DOWN as again:
                            exc = again
                            delay = min(delay * 2, self.settings.redis_retry_max_seconds)
                except redis.ResponseError as exc:
                    # A stream or its group gone: NOGROUP, or UNBLOCKED when the stream is deleted
                    # while the read blocks on it (Redis 7).
                    if "NOGROUP" not in str(exc) and "UNBLOCKED" not in str(exc):
                        raise
                    self.reader.groups_missing(exc)
                status = self.settings.status_seconds  # 0: no status line
                if status and time.monotonic() - last_log > status:
                    last_log = time.monotonic()
                    self._log_progress()
            if self.settings.leave_on_stop:  # stopped (SIGTERM, SIGINT): its agents leave
                self.discovery.leave()
        finally:
            self.close()

    def _recover_redis(self, exc: Exception, delay: float) -> None:
        """Wait until Redis answers again."""
        self.reader.recover(exc, delay)
        log.info("redis reachable again")

    def stop(self, *_: Any) -> None:
        self.stopping = True

    def close(self) -> None:
        """Release what the service holds (the state directory's lock included)."""
        self.client.close()
        self.follower.close()
        with contextlib.suppress(Exception):
            self.redis.close()
        if self.state:
            self.state.close()

    def _log_progress(self) -> None:
        agents = [agent for _, agent in self.discovery.streams.values()]
        remaining = {e: sorted(h.view.remaining) for e, h in self.discovery.hosted.items()}
        log.info(
            "%d activations, %d votes (%d sent again, %d checks), %d settled messages, "
            "%d reports, %d resets rate-limited, %d discovery rounds, remaining arms %s",
            self.reader.activations,
            sum(a.votes_sent for a in agents),
            sum(a.votes_resent for a in agents),
            sum(a.checks for a in agents),
            sum(a.settled_sent for a in agents),
            sum(a.reports_sent + (a.crowd.sent if a.crowd else 0) for a in agents),
            sum(a.resets_limited for a in agents),
            self.discovery.rounds,
            next(iter(remaining.values()))
            if len(remaining) == 1
            else " ".join(f"{e}={arms}" for e, arms in remaining.items()) or "-",
        )


def settings_error(exc: ValidationError) -> str:
    """One line naming each bad variable as it is set in the environment."""
    problems = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else "settings"
        variable = name if name.isupper() else f"DEXP_{name.upper()}"
        if variable == "DEXP_AGENTS_PER_REPLICA":
            variable = "AGENTS_PER_REPLICA"
        problems.append(f"{variable}: {error['msg'].removeprefix('Value error, ')}")
    return "dexp agent: invalid configuration, not starting: " + "; ".join(problems)


def main() -> None:
    try:
        settings = AgentSettings()
    except ValidationError as exc:  # a bad value: one line, no traceback, status 2
        print(settings_error(exc), file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format='{"time":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}',
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        service = AgentService(settings)
    except EnrollmentFailed as exc:
        log.error("%s", exc)
        sys.exit(3)
    except redis.RedisError as exc:  # connect_redis gave up
        log.error("redis unreachable at start (DEXP_REDIS_URL): %s; not starting", exc)
        sys.exit(1)
    except CoordinatorError as exc:  # a refusal nothing else handles: one line, no traceback
        log.error(
            "the coordinator refused a request at start (%s)%s; not starting",
            exc,
            refusal_hint(exc),
        )
        sys.exit(1)
    signal.signal(signal.SIGTERM, service.stop)
    signal.signal(signal.SIGINT, service.stop)
    try:
        service.run()
    except ConnectionError:  # the coordinator still unreachable when asked to stop
        if not service.stopping:
            raise
        log.warning("stopped while the coordinator was unreachable; pending votes are on record")
    except CoordinatorError as exc:  # a refusal nothing else handles: one line, no traceback
        log.error("stopped: the coordinator refused a request (%s)%s", exc, refusal_hint(exc))
        sys.exit(1)


if __name__ == "__main__":
    main()
