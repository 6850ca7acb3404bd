"""Which experiments the agent service hosts, and what stops one of them (drops, pauses).

Experiments (DEXP_EXPERIMENT). An application running several tests runs one process: it hosts
AGENTS_PER_REPLICA agents in each experiment of a list (`demo,checkout`), or in every experiment the
coordinator lists (`*`, looked up every DEXP_DISCOVER_SECONDS, so an experiment created later gets
its agents). Each hosted experiment (Hosted) has its agents' streams read (agent/streams.py) and its
global set followed (agent/following.py); hosting one sets both up, dropping one undoes them. A
problem with one experiment stops only its agents:
- deleted (404), or deleted and created again under the same id (another creation time: its agents
  are the old one's): dropped, its streams no longer read and its event stream closed; with a fixed list
  it is looked for again every DEXP_DISCOVER_SECONDS (and gets new agents if it comes back);
- not hostable (not created yet, out of tickets, open enrollment refused with 401): one log line
  (again only if the reason changes), retried every DEXP_DISCOVER_SECONDS; agents already enrolled
  are hosted;
- at a limit of the coordinator (enrollment refused with 403: the experiment has its maximum of
  agents, DEXP_MAX_AGENTS, or under open enrollment this address has its maximum in it,
  DEXP_MAX_AGENTS_PER_CLIENT, which counts every process of one machine as one client): the agents
  enrolled so far are hosted and do their work, the others are not asked for again by this process
  (waiting does not lift a limit), and one log line names the limit and the fix (tickets, which
  the per-address limit does not apply to, or a higher limit on the coordinator, then a restart);
- rate-limited (429): the request waits as Retry-After asks and is sent again
  (clients/coordinator.py); a 429 never stops anything, it only slows it down;
- any other refusal (4xx) of one of its requests (a vote refused with 401: the coordinator does not
  know the agents' tokens): its agents pause for DEXP_DISCOVER_SECONDS, one log line names the
  cause and the fix (the activations that caused it are acknowledged: dropping one is harmless,
  feeding it twice is not).
What the process does at start when no experiment is hostable is agent/host.py's.

Restarts (DEXP_STATE_DIR). With a state directory, the process keeps each agent's credentials and
vote record there (agent/state.py; one directory for all its experiments, each file names its own)
and a restart re-uses them: the same agent ids, hence the same streams and consumer groups, whose
pending entries (read by the dead process, never acknowledged) are read again first; the votes the
dead process had decided are never decided again, and those it had not seen acknowledged are sent
again (a copy is harmless). The local statistics are not saved: a restarted agent starts fresh on
the global set, which is exactly DE's own restart rule (an agent whose local set empties restarts on
the global set with fresh statistics). Each vote it sends later is still decided at confidence
1 - eta on samples it observed itself after the restart, and its voted set keeps it from voting
twice on an arm, so the analysis of DE (at most one vote per agent and arm, each wrong with
probability at most eta) holds across the restart. Restoring statistics instead would need rewards
or means on disk, which must never leave the process. Without a state directory every start enrolls
new agents (the old ones' streams are orphaned). The agents that are not restored are enrolled
(agent/enrollment.py). With DEXP_LEAVE_ON_STOP a stop is not a restart: the agents leave their
experiments and their files are removed (`leave`), so the next start enrolls new ones. A restart
later than the agents' lease finds them gone (agent/leases.py): they are forgotten (`forget`) and
new ones enroll in their place. So are agents whose streams are missing (restored from an older
version's state, whose stream names had no secret; or a stream Redis lost), after they leave
(`replace`).

Streams. Each agent's stream is named from its own token (`stream_of`, redis_keys.stream_secret):
the process reads the streams of the agents it hosts, and can name no other.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from agent.enrollment import Enrollment, EnrollmentFailed, EnrollmentLimited, Tickets
from agent.library import Agent, GlobalView
from agent.settings import AgentSettings
from agent.state import AgentRecord, StateDir
from clients.coordinator import CoordinatorClient, CoordinatorError
from common import redis_keys as keys

# The agent service's log lines keep the name operators filter on, whichever module writes them.
log = logging.getLogger("dexp.agent.service")
LEAVE_WORKERS = 8  # agents leaving at once when the process stops


def refusal_hint(exc: CoordinatorError) -> str:
    """What an operator can do about a refusal of an enrolled agent's request ('' if nothing
    specific), as the end of a log line."""
    if exc.status == 401:
        return (
            ". The coordinator does not know these agents' tokens: its Redis lost its data (or "
            "the agents were enrolled on another coordinator). Restart this process without its "
            "state (DEXP_STATE_DIR) so that its agents enroll again"
        )
    if exc.status == 403:
        return ". An agent is not enrolled in this experiment, or the request is not allowed here"
    return ""


@dataclass
class Hosted:
    """One experiment's part of the process: its view of the global set, its agents (by stream),
    their state files and seeds, and what the loop does for it."""

    view: GlobalView
    state: StateDir | None
    seeds: list[np.random.SeedSequence]
    restored: int  # agents restored from the state directory (the others were enrolled)
    agents: dict[str, Agent] = field(default_factory=dict)
    installed: bool = False  # its streams are read and its global set followed
    changed: bool = False  # the listing showed a change of its global set: read it again
    hot_until: float = 0.0  # its streams gave entries lately: read at every turn until then
    reconciled: tuple[int, int] = (0, -1)  # the view's (snapshot_seq, lost_at) at the last pass
    next_reconcile: float = 0.0
    resend_due: bool = True  # its agents' pending votes are to be sent (again)
    paused_until: float = 0.0  # a refused request: its agents wait until then (0: running)
    failure: str = ""  # the last refusal logged
    slots: dict[str, int] = field(default_factory=dict)  # agent id -> its slot (seed, state file)
    free: list[int] = field(default_factory=list)  # the slots of agents forgotten (lapsed)

    @property
    def experiment(self) -> str:
        return self.view.experiment

    @property
    def paused(self) -> bool:
        return self.paused_until > 0


def stream_of(experiment: str, agent: Agent) -> str:
    """The agent's activation stream, named from its own token (redis_keys.stream_secret): the
    only streams this process can name are its own agents'."""
    return keys.activations(experiment, agent.agent_id, keys.stream_secret(agent.token))


class Plumbing(Protocol):
    """What hosting an experiment sets up in the rest of the process (agent/host.py wires it to
    agent/streams.py and agent/following.py)."""

    def follow(self, hosted: Hosted) -> None:
        """Follow the experiment's global set (its event stream)."""

    def unfollow(self, hosted: Hosted) -> None:
        """Stop following the experiment's global set (its event stream closed)."""

    def read_pending(self) -> None:
        """Read the pending entries of every stream again before new ones."""


class Discovery:
    """The experiments the process hosts (`hosted`, and `streams`: every stream read, with its
    experiment and agent), how they come (discover: restored, enrolled) and go (drop), and the
    pauses of one whose request was refused."""

    def __init__(
        self,
        settings: AgentSettings,
        client: CoordinatorClient,
        state: StateDir | None,
        plumbing: Plumbing,
    ) -> None:
        self.settings = settings
        self.client = client
        self.state = state  # one directory (and lock) for every experiment: `of` gives each its own
        self.plumbing = plumbing
        self.enrollment = Enrollment(settings, client)
        self.hosted: dict[str, Hosted] = {}
        self.streams: dict[str, tuple[Hosted, Agent]] = {}  # every read stream -> its agent
        self.problems: dict[str, str] = {}  # experiment -> why it is not (fully) hosted, logged
        # experiment -> the line saying which limit of the coordinator (403) stopped its
        # enrollment: never asked again by this process (until the experiment is dropped)
        self.limited: dict[str, str] = {}
        self.next_discovery = 0.0
        # discover() calls so far, in the status line: the retries (and the limits not asked
        # again) are seen to happen, round after round
        self.rounds = 0

    def start(self) -> str | None:
        """The first round. With a fixed list of which no experiment got all its agents (nor
        some, at a limit), why not: the process does not start (agent/host.py). Else None, the
        problems of the others logged."""
        if self.settings.every_experiment:
            log.info(
                "following every experiment the coordinator lists (checked every %gs)",
                self.settings.discover_seconds,
            )
        problems = self.discover(report=self.settings.every_experiment)
        # At a limit (403), the agents got are kept: they are enrolled, an exit would orphan them.
        running = [
            h for h in self.hosted.values() if self._complete(h) or h.experiment in self.limited
        ]
        if not self.settings.every_experiment and not running:
            return "; ".join(problems.values())
        for experiment, problem in problems.items():
            self._problem(experiment, problem)
        return None

    # -- which experiments, and their agents ----------------------------------------------------
    def _complete(self, hosted: Hosted) -> bool:
        return len(hosted.agents) >= self.settings.agents_per_replica

    def discover(self, report: bool = True) -> dict[str, str]:
        """Host the experiments to follow that are not fully hosted yet (with `*`, first drop the
        hosted ones the coordinator no longer lists and are gone); their problems, logged if
        `report`."""
        self.rounds += 1
        self.next_discovery = time.monotonic() + self.settings.discover_seconds
        if self.settings.every_experiment:
            try:
                listed = self.client.experiments()
            except CoordinatorError as exc:
                refused = f"the coordinator refused to list its experiments ({exc})"
                self._problem("*", refused)
                return {"*": refused}
            self.problems.pop("*", None)
            wanted = [str(e["id"]) for e in listed]
            self._compare(listed)
            for experiment in set(self.hosted) - set(wanted):
                self.verify(self.hosted[experiment])
            for experiment in set(self.problems) - set(wanted):
                del self.problems[experiment]  # gone: nothing to retry
            for experiment in set(self.limited) - set(wanted):
                del self.limited[experiment]  # gone: a new one of that name starts afresh
        else:
            wanted = self.settings.experiments
        problems: dict[str, str] = {}
        for experiment in wanted:
            hosted = self.hosted.get(experiment)
            if hosted is not None and self._complete(hosted):
                continue
            if experiment in self.limited:
                continue  # a limit of the coordinator: said once, not asked again
            problem = self._try_host(experiment)
            if problem is None:
                self.problems.pop(experiment, None)
                continue
            problems[experiment] = problem
            if report:
                self._problem(experiment, problem)
        return problems

    def _compare(self, listed: list[dict[str, Any]]) -> None:
        """The listing names each experiment's (epoch, version): a hosted view that differs is
        refreshed at once. Under `*` this is the check that scales (one page per 100
        experiments), and the fallback refreshes only back it up."""
        for summary in listed:
            hosted = self.hosted.get(str(summary.get("id")))
            if hosted is None:
                continue
            view = hosted.view
            listed_at = (summary.get("epoch"), summary.get("version"))
            if listed_at != (view.epoch, view.version) or summary.get("created_at") not in (
                None,
                view.created_at,
            ):
                hosted.changed = True

    def _problem(self, experiment: str, problem: str) -> None:
        """Log why an experiment is not (fully) hosted: once, and again only if it changes."""
        if self.problems.get(experiment) != problem:
            self.problems[experiment] = problem
            if experiment in self.limited:  # not retried: the line says what to do
                log.error("%s", problem)
                return
            log.error(
                "%s (retried every %gs, DEXP_DISCOVER_SECONDS; the other experiments carry on)",
                problem,
                self.settings.discover_seconds,
            )

    def _try_host(self, experiment: str) -> str | None:
        """Host `experiment`'s agents; None when all are, else why not."""
        try:
            self._host(experiment)
        except EnrollmentLimited as exc:
            hosted = self.hosted.get(experiment)
            line = exc.line(
                experiment,
                len(hosted.agents) if hosted else 0,
                self.settings.agents_per_replica,
                self.settings.uses_tickets,
            )
            self.limited[experiment] = line
            return line
        except EnrollmentFailed as exc:
            return str(exc)
        except CoordinatorError as exc:
            if exc.status == 404:
                return f"experiment {experiment} does not exist (yet)"
            return f"experiment {experiment}: the coordinator refused to enroll its agents ({exc})"
        return None

    def _host(self, experiment: str) -> None:
        """Restore the experiment's saved agents (first time only) and enroll the missing ones;
        the agents got so far are hosted even if the rest fail (EnrollmentFailed)."""
        n = self.settings.agents_per_replica
        hosted = self.hosted.get(experiment)
        if hosted is None:
            view = GlobalView.fetch(self.client, experiment)
            view.allocation_seconds = self.settings.allocation_seconds
            state = self.state.of(experiment) if self.state else None
            saved = state.load(view.created_at) if state else []
            if len(saved) > n:
                log.warning(
                    "%d agents of %s saved in %s but AGENTS_PER_REPLICA=%d: hosting the first %d, "
                    "the others' streams are left unread",
                    len(saved),
                    experiment,
                    self.settings.state_dir,
                    n,
                    n,
                )
                saved = saved[:n]
            hosted = Hosted(view, state, self._seeds(experiment, bool(saved)), len(saved))
            for slot, record in enumerate(saved):
                agent = Agent(
                    self.client,
                    view,
                    record.agent_id,
                    record.token,
                    np.random.default_rng(hosted.seeds[slot]),
                    record=record,
                    reconcile_seconds=self.settings.reconcile_seconds,
                )
                self._attach(hosted, agent, slot)
        before = len(hosted.agents) if hosted.installed else 0
        walker: list[Tickets] = []  # the tickets read for this round (read on first use)
        try:
            while len(hosted.agents) < n:
                slot = hosted.free[-1] if hosted.free else len(hosted.agents)
                agent = self.enrollment.enroll(
                    hosted.view,
                    np.random.default_rng(hosted.seeds[slot]),
                    walker,
                    enrolled=len(hosted.agents) - hosted.restored,
                    needed=n - hosted.restored,
                )
                if hosted.free:
                    hosted.free.pop()
                if hosted.state:  # before anything else: a crash now must not enroll it again
                    hosted.state.save(agent.record, hosted.view.created_at, slot, durable=True)
                self._attach(hosted, agent, slot)
        finally:
            if len(hosted.agents) > before:
                self._install(hosted, added=len(hosted.agents) - before)

    def _seeds(self, experiment: str, restart: bool) -> list[np.random.SeedSequence]:
        """The agents' seeds: from DEXP_SEED and the experiment's id (a process of one experiment
        draws exactly what it always did). A restart draws new randomness: the same seed would
        replay the dead process's choices."""
        entropy: Any = self.settings.seed
        if restart and entropy is not None:
            entropy = [entropy, time.time_ns() % 2**32]
        n = self.settings.agents_per_replica
        if self.settings.experiments == [experiment]:
            return np.random.SeedSequence(entropy).spawn(n)
        key = (zlib.crc32(experiment.encode()),)
        return np.random.SeedSequence(entropy, spawn_key=key).spawn(n)

    def _attach(self, hosted: Hosted, agent: Agent, slot: int) -> None:
        if hosted.state:
            agent.persist = self._persister(hosted, agent.record, slot)
        hosted.agents[stream_of(hosted.experiment, agent)] = agent
        hosted.slots[agent.agent_id] = slot

    def forget(self, hosted: Hosted, agent: Agent) -> None:
        """An agent no longer in its experiment (its lease lapsed, agent/leases.py): its stream
        is no longer read, its saved state goes, and the next discovery round enrolls another in
        its slot, with a seed of its own (the lapsed agent's draws are not replayed)."""
        stream = stream_of(hosted.experiment, agent)
        if hosted.agents.pop(stream, None) is None:
            return
        self.streams.pop(stream, None)
        if hosted.state:
            hosted.state.forget(agent.agent_id)
        slot = hosted.slots.pop(agent.agent_id)
        hosted.seeds[slot] = np.random.SeedSequence()
        hosted.free.append(slot)
        hosted.restored = min(hosted.restored, len(hosted.agents))  # the others are enrolled
        self.next_discovery = 0.0

    def replace(self, hosted: Hosted, agents: list[Agent]) -> None:
        """Agents of a live experiment whose activation streams are missing: restored from the
        state of an older version (whose streams' names had no secret: the name this version
        computes from the token was never created), or whose stream or group Redis lost (a
        failover right after the enrollment). This process cannot create a stream (its Redis
        user creates nothing), so each is replaced, as an agent whose lease lapsed is: it leaves
        its experiment (best effort: its place is freed, its votes of this epoch stand, the
        coordinator deletes whatever stream it had), it is forgotten with its saved state
        (`forget`), and the next discovery round enrolls another in its place. Nothing is
        restored again, so nothing fails again: no crash, no loop."""

        def leave_one(agent: Agent) -> None:
            # gone already, or the coordinator unreachable: its lease (if any) lapses, as when a
            # process is killed
            with contextlib.suppress(CoordinatorError, ConnectionError):
                self.client.leave(agent.token)

        with ThreadPoolExecutor(max_workers=LEAVE_WORKERS) as pool:
            list(pool.map(leave_one, agents))
        for agent in agents:
            self.forget(hosted, agent)
        log.warning(
            "experiment %s: %d agent(s) have no activation stream (restored from an older "
            "version's state, or Redis lost it): they leave, new ones enroll in their place",
            hosted.experiment,
            len(agents),
        )

    def _install(self, hosted: Hosted, added: int) -> None:
        """Read the experiment's streams (the coordinator created them and their groups when it
        enrolled the agents), follow its global set, send its agents' pending votes, and say
        so."""
        experiment = hosted.experiment
        self.hosted[experiment] = hosted
        for stream, agent in hosted.agents.items():
            self.streams[stream] = (hosted, agent)
        if not hosted.installed:
            self.plumbing.follow(hosted)
            hosted.installed = True
        hosted.resend_due = True
        self.plumbing.read_pending()  # restored agents' entries read by a dead process come first
        log.info(
            "%d agent(s) in %s on %s (M=%d): %d restored from %s, %d enrolled",
            len(hosted.agents),
            experiment,
            socket.gethostname(),
            hosted.view.threshold,
            hosted.restored,
            self.settings.state_dir or "-",
            len(hosted.agents) - hosted.restored,
        )
        if hosted.restored and added == len(hosted.agents):
            restored = list(hosted.agents.values())[: hosted.restored]
            log.info("restored agents: %s", ",".join(a.agent_id for a in restored))

    def _persister(self, hosted: Hosted, record: AgentRecord, slot: int) -> Callable[[], None]:
        state, created_at = hosted.state, hosted.view.created_at
        assert state is not None

        def persist() -> None:
            # CDE: a report drawn and not yet answered is fsynced whatever DEXP_STATE_FSYNC says:
            # lost, a restart would draw another, and a second report tells more of the agent
            drawn = record.report is not None and record.report_outcome is None
            state.save(record, created_at, slot, durable=True if drawn else None)

        return persist

    # -- one experiment's failures ----------------------------------------------------------------
    def _gone(self, hosted: Hosted) -> str | None:
        """Why the experiment's agents are gone for good (deleted, or created again), asking the
        coordinator; None if it is still theirs."""
        try:
            hosted.view.refresh(self.client)
        except CoordinatorError as exc:
            return "was deleted" if exc.status == 404 else None
        if hosted.view.replaced:
            return "was deleted and created again (these agents were the old one's)"
        return None

    def verify(self, hosted: Hosted) -> None:
        """Drop the experiment if it is gone (asking the coordinator)."""
        reason = self._gone(hosted)
        if reason is not None:
            self.drop(hosted, reason)

    def drop(self, hosted: Hosted, reason: str) -> None:
        """Stop hosting the experiment: its streams are no longer read, its global set no longer
        followed."""
        experiment = hosted.experiment
        if self.hosted.get(experiment) is not hosted:
            return
        del self.hosted[experiment]
        self.limited.pop(experiment, None)  # another experiment of that name may come: ask again
        for stream in hosted.agents:
            self.streams.pop(stream, None)
        self.plumbing.unfollow(hosted)
        log.warning(
            "experiment %s %s: its %d agent(s) here are dropped, their streams no longer read",
            experiment,
            reason,
            len(hosted.agents),
        )

    def leave(self) -> None:
        """The process stops: each hosted agent leaves its experiment (its host is gone, so it
        must not be counted or fed) and its saved state goes. Best effort, a few at a time: the
        client gives up at once on a coordinator that does not answer (it is stopping), and the
        agents it could not reach stay enrolled and saved, for a restart to restore."""
        agents = [(h, a) for h in self.hosted.values() for a in h.agents.values()]
        if not agents:
            return

        def leave_one(item: tuple[Hosted, Agent]) -> bool:
            hosted, agent = item
            try:
                self.client.leave(agent.token)
            except CoordinatorError as exc:
                if exc.status not in (401, 404):  # 401/404: gone already (left, deleted)
                    return False
            except ConnectionError:
                return False
            if hosted.state:
                hosted.state.forget(agent.agent_id)
            return True

        with ThreadPoolExecutor(max_workers=LEAVE_WORKERS) as pool:
            left = sum(pool.map(leave_one, agents))
        log.info(
            "stopping: %d of %d agent(s) left their experiments%s",
            left,
            len(agents),
            "" if left == len(agents) else " (the others stay enrolled: coordinator unreachable)",
        )

    def failed(self, hosted: Hosted, exc: CoordinatorError) -> None:
        """A request of the experiment refused: drop it if it is gone, else pause its agents."""
        if self.hosted.get(hosted.experiment) is not hosted:
            return
        reason = self._gone(hosted)
        if reason is not None:
            self.drop(hosted, reason)
            return
        hosted.paused_until = time.monotonic() + self.settings.discover_seconds
        failure = str(exc)
        if failure != hosted.failure:
            hosted.failure = failure
            log.error(
                "experiment %s: the coordinator refused a request (%s): its agents pause for %gs "
                "and try again (DEXP_DISCOVER_SECONDS), the other experiments carry on%s",
                hosted.experiment,
                failure,
                self.settings.discover_seconds,
                refusal_hint(exc),
            )

    def guarded(self, hosted: Hosted, action: Callable[[], object]) -> None:
        """Run one experiment's work; a refusal stops that experiment only."""
        if self.hosted.get(hosted.experiment) is not hosted or hosted.paused:
            return
        try:
            action()
        except CoordinatorError as exc:
            self.failed(hosted, exc)

    def resume(self, now: float) -> None:
        """End the pauses that are over: the agents' pending votes are sent again, and the
        entries read during the pause (left pending) are read again."""
        for hosted in self.hosted.values():
            if hosted.paused and now >= hosted.paused_until:
                hosted.paused_until = 0.0
                hosted.resend_due = True
                self.plumbing.read_pending()
