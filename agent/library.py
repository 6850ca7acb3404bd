"""An agent an application can embed: choose an arm, observe its reward, vote, follow the global set.

Rewards and local means stay in this object. What leaves it is a vote: an arm index (and the reset
epoch it belongs to), sent to the coordinator.

Each agent keeps a record of its votes (agent.state.AgentRecord): a vote is "pending" from the
moment it is decided until the coordinator acknowledges it, then "acknowledged" with its outcome.
The record is what a restarted process re-uses (same agent id and token, no arm decided twice), and
what lets an agent notice that the coordinator lost votes it had acknowledged (a Redis failover under
Sentinel or Cluster can lose the last acknowledged writes). Who voted against which arm is not public
(it would tell each agent's ranking of the arms), so an agent asks the coordinator for its own votes
(GET /v1/agents/me) while it has acknowledged votes in the current epoch and (a) the global
(epoch, version) went backwards, or another agent of the process saw an arm's vote count go down
or found votes of its own missing (GlobalView), (b) the public vote count of an arm still in play is
below the count its own acknowledged vote's reply showed (a sure loss), or (c) now and then (every
`reconcile_seconds`, staggered across agents), for a loss no count shows; it then sends again the
acknowledged votes the coordinator lacks. A second copy of a vote is harmless (the coordinator
counts an (agent, arm) pair once), so the check can be eager.

Under CE (a vote is dropped with probability xi) the coordinator cannot see from the votes that an
agent settled (its local set holds one arm: it votes no more), which it needs to tell a tie. So
the agent says it: one "settled" message per settle (POST .../settled). The coordinator forgets the
flag when an arm leaves that the agent is not counted against (it may have been the agent's own
arm), and a reset forgets every flag; an agent still settled then sends it again (common/votes.py).

Under CDE (the experiment's algorithm "cde") the agent never votes: it plays every arm a fixed
number of times, and at the activation that ends that budget (a function of its activation count,
never of its rewards: the report's time says nothing of its content) it draws its one randomized
report (common.cde), records it (agent.state.AgentRecord.report: a restart sends that same report
again, never draws another), sends it once (POST .../report; a retry is a duplicate, which
changes nothing), and stops. Once an arm is accepted it stops too, reported or not.

Under LDP (the algorithm "ldp") the agent never learns: at each activation it plays an arm drawn
from the allocation the coordinator published and sends one private report of that reward, at most
B in all (agent/crowd.py).

    view = GlobalView.fetch(client, "demo")
    agent = Agent.enroll(client, view, secret="ticket...", rng=np.random.default_rng())
    arms = agent.choose()                   # arms to play now
    agent.observe(arms, rewards_of(arms))   # may send votes
    agent.reconcile(time.monotonic())       # now and then, and after each view.refresh()
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from agent.crowd import CrowdReporter
from agent.protocol import DeviceProtocol, Exchange, client_transport, next_seq, run
from agent.state import AgentRecord
from clients.coordinator import CoordinatorClient
from common.agent import AgentSpec, LocalAgent
from common.algorithms import AlgorithmConfig
from common.params import BERNOULLI_REWARDS, BOUNDED_REWARDS, check_bernoulli_rewards

log = logging.getLogger("dexp.agent")

__all__ = ["Agent", "GlobalView", "next_seq"]
R = TypeVar("R")


@dataclass
class GlobalView:
    """What an agent knows of the global state: the remaining arms, their version and the epoch.

    Changed by the event stream (agent/events.py, GlobalView.follow), and read again when a vote
    reply shows another version.

    Shared by the agents of a process, it also watches for sure signs that the coordinator lost
    writes: the (epoch, version) going backwards, or an arm's vote count (a state read or a vote
    reply) going below one seen before in the same epoch (a count only grows within an epoch;
    the requests of a process are sequential, so a later answer reflects every earlier one). Each
    sign moves `lost_at`, and every agent of the process then checks its own votes once."""

    experiment: str
    arms: list[str]
    config: AlgorithmConfig
    sigma: float | None
    threshold: int
    remaining: frozenset[int] = field(default_factory=frozenset)
    version: int = -1
    epoch: int = 0
    epoch_started_at: int | None = None  # when this epoch began: its identity with its number
    created_at: int = 0
    status: str = "exploring"  # exploring | identified | tied, as the last state read said
    # The public vote count of each arm in the last state read (empty if the coordinator sent
    # none), and the sequence number taken just before that read was issued (see next_seq).
    votes: tuple[int, ...] = ()
    snapshot_seq: int = 0
    regressions: int = 0  # times the coordinator's (epoch, version) went backwards
    regressed_at: int = -1  # snapshot_seq of the last read that went backwards
    losses: int = 0  # sure signs of lost writes noted (regressions included)
    lost_at: int = -1  # sequence number of the last of them
    # Per arm, the last vote count seen in this epoch (state reads and vote replies, in order).
    counts: dict[int, int] = field(default_factory=dict)
    # A state read showed another creation time: the experiment was deleted and created again
    # under the same id, and this view's agents are not enrolled in the new one (the agent
    # service drops them: agent/discovery.py).
    replaced: bool = False
    # "bounded" or "bernoulli": in a Bernoulli experiment the agents refuse any reward but 0 and 1
    rewards: str = BOUNDED_REWARDS
    pulls_per_arm: int | None = None  # CDE: the T the experiment published (its agents play it)
    # LDP: the allocation the coordinator published (a weight per arm), and how often it is read
    # again (it moves at publications, which the event stream does not announce: see crowd.py)
    allocation: tuple[float, ...] = ()
    allocation_seconds: float = 1.0
    allocation_read_at: float = -math.inf
    etag: str | None = None

    @classmethod
    def fetch(cls, client: CoordinatorClient, experiment: str) -> GlobalView:
        seq = next_seq()
        return cls.of(experiment, client.experiment(experiment), seq)

    @classmethod
    def of(cls, experiment: str, state: dict[str, Any], seq: int) -> GlobalView:
        """The view of a document read (GET /v1/experiments/{id}) after sequence number `seq`."""
        view = cls(
            experiment,
            list(state["arms"]),
            AlgorithmConfig(**state["params"]),
            state.get("sigma"),
            int(state["threshold"]),
            created_at=int(state.get("created_at", 0)),
            rewards=str(state.get("rewards") or BOUNDED_REWARDS),
            pulls_per_arm=_int_or_none(state.get("pulls_per_arm")),
        )
        view.update(state, seq)
        return view

    def update(self, state: dict[str, Any], seq: int | None = None) -> bool:
        """Take the state of a GET of the experiment; True if the global set changed.

        A state older than the one held means the coordinator lost writes (a Redis failover): it is
        taken all the same (it is what the coordinator now counts from), and noted, so that the
        agents check their acknowledged votes. The remaining arms are always taken from the state
        read: after a loss, an equal version no longer proves an equal set. The state of another
        incarnation of the experiment (another `created_at`) is not taken: `replaced` says so."""
        created_at = int(state.get("created_at", self.created_at))
        if self.created_at and created_at != self.created_at:
            self.replaced = True
            return False
        epoch, version = int(state["epoch"]), int(state["version"])
        remaining = frozenset(int(a) for a in state["remaining_arms"])
        self.snapshot_seq = next_seq() if seq is None else seq
        self.votes = tuple(int(n) for n in state.get("votes", ()))
        if (epoch, version) < (self.epoch, self.version):
            self.regressions += 1
            self.regressed_at = self.snapshot_seq
            self.note_loss(
                f"the coordinator's state went back from (epoch {self.epoch}, version "
                f"{self.version}) to ({epoch}, {version})"
            )
        changed = (epoch, version) != (self.epoch, self.version) or remaining != self.remaining
        if epoch != self.epoch:
            self.counts = {}  # another epoch's counts say nothing of this one's
        started = state.get("epoch_started_at")
        started = None if started is None else int(started)
        known = self.epoch_started_at
        if epoch == self.epoch and started is not None and known is not None and started != known:
            # the same number, another epoch: the one this view knew was lost with a failover
            self.counts = {}
            self.note_loss(f"epoch {epoch} began again (a failover lost the one that began first)")
        if started is not None or epoch != self.epoch:  # (a state without it: the same epoch)
            self.epoch_started_at = started
        self.epoch, self.version, self.remaining = epoch, version, remaining
        # One arm left is the identification, whatever `status` says: a coordinator whose status
        # came from a tie check (store.get_with_status's second read) has sent "exploring" so.
        self.status = (
            "identified" if len(remaining) == 1 else str(state.get("status") or "exploring")
        )
        for arm, count in enumerate(self.votes):
            self.observe_count(arm, epoch, count)
        if state.get("allocation") is not None:  # a document (an event carries none)
            self.allocation = tuple(float(w) for w in state["allocation"])
            self.allocation_read_at = time.monotonic()
        return changed

    def refresh_allocation(self, client: CoordinatorClient, now: float) -> bool:
        """LDP: read the document again (If-None-Match) once `allocation_seconds` have passed
        since the allocation was last read; True if the global set changed."""
        if now - self.allocation_read_at < self.allocation_seconds:
            return False
        self.allocation_read_at = now
        seq = next_seq()
        document, self.etag = client.experiment_if_changed(self.experiment, self.etag)
        return False if document is None else self.update(document, seq)

    def observe_count(self, arm: int, epoch: int, votes: int) -> None:
        """An arm's vote count, as a state read or a vote reply showed it (in `epoch`): below the
        last one seen in this epoch, writes were lost."""
        if epoch != self.epoch:
            return
        last = self.counts.get(arm, 0)
        if votes < last:
            self.note_loss(f"the votes against arm {arm} went down from {last} to {votes}")
        self.counts[arm] = votes

    def note_loss(self, what: str) -> None:
        """A sure sign that the coordinator lost writes: every agent checks its votes once."""
        self.losses += 1
        self.lost_at = next_seq()
        log.warning("%s: agents check their acknowledged votes", what)

    def stale(self, version: int, epoch: int) -> bool:
        """A vote reply shows another (epoch, version): newer, or older (lost writes)."""
        return (epoch, version) != (self.epoch, self.version)

    def refresh(self, client: CoordinatorClient) -> bool:
        seq = next_seq()
        return self.update(client.experiment(self.experiment), seq)

    def follow(self, state: dict[str, Any], seq: int, client: CoordinatorClient) -> bool:
        """Take a state that a follower (agent/events.py) got from the event stream or a poll,
        `seq` being when it arrived or the poll was sent; True if the global set changed.

        It comes from another connection than the agents' requests, so it is not ordered with
        them: a state older than the view's own last read is dropped, and one behind the view's
        (epoch, version) is no proof of lost writes (an event may be overtaken by a vote reply
        and the read it caused), so the view is read again, and that read, ordered with the
        agents' requests, tells a loss from a late event. A newer state is taken as it is: no
        request, which is what lets a million devices follow a change."""
        if seq <= self.snapshot_seq:
            return False
        at = (int(state["epoch"]), int(state["version"]))
        if at < (self.epoch, self.version):
            return self.refresh(client)
        same = frozenset(int(a) for a in state["remaining_arms"]) == self.remaining
        started = state.get("epoch_started_at")
        same = same and (started is None or int(started) == self.epoch_started_at)
        if at == (self.epoch, self.version) and same and "created_at" not in state:
            return False  # nothing new (an event's data carries no vote counts to take)
        return self.update(state, seq)

    @property
    def bernoulli(self) -> bool:
        return self.rewards == BERNOULLI_REWARDS

    def agent_spec(self) -> AgentSpec:
        params = self.config.local_params(
            len(self.arms), 1, self.sigma, self.bernoulli, self.pulls_per_arm
        )
        return AgentSpec(
            len(self.arms),
            self.config.local_subroutine,
            params,
            self.config.vote_drop,
            report_privacy=self.config.report_privacy,
        )

    @property
    def identified(self) -> bool:
        return len(self.remaining) == 1


def _delegated(name: str, doc: str) -> Any:
    """An attribute of the agent's protocol, read and written through the agent."""
    return property(
        lambda self: getattr(self.protocol, name),
        lambda self, value: setattr(self.protocol, name, value),
        doc=doc,
    )


class Agent:
    """One agent: its local algorithm (common.agent.LocalAgent) and its side of the protocol
    (agent.protocol.DeviceProtocol), whose messages go through `client`. `record` holds its
    credentials and votes (a restarted process passes the saved one); `persist` is called whenever
    the record changed (the service writes its state file); `reconcile_seconds` is the mean period
    of the slow check of its votes (see reconcile)."""

    votes_sent = _delegated("votes_sent", "votes decided and sent by this object")
    votes_resent = _delegated("votes_resent", "pending or lost votes sent again")
    resets_limited = _delegated("resets_limited", "DSER4 resets refused (429): local only")
    checks = _delegated("checks", "GET /v1/agents/me calls (see reconcile)")
    checked_seq = _delegated("checked_seq", "sequence number taken just before the last check")
    settled_sent = _delegated("settled_sent", "CE: settled messages sent (see _settle)")
    reports_sent = _delegated("reports_sent", "CDE: reports sent, again after a restart too")
    settled_with = _delegated("settled_with", "CE: the global set the settled message found")
    settled_epoch = _delegated("settled_epoch", "CE: the epoch of that settled message")
    next_check = _delegated("next_check", "when the slow check of its votes is due")
    reconcile_seconds = _delegated("reconcile_seconds", "the slow check's mean period")

    def __init__(
        self,
        client: CoordinatorClient,
        view: GlobalView,
        agent_id: str,
        token: str,
        rng: np.random.Generator,
        voted: Sequence[int] = (),
        record: AgentRecord | None = None,
        persist: Callable[[], None] | None = None,
        reconcile_seconds: float = 30.0,
    ) -> None:
        self.client = client
        self.view = view
        self.agent_id = agent_id
        self.token = token
        self.record = record or AgentRecord(agent_id, token)
        self.persist = persist or (lambda: None)
        self.local = LocalAgent(view.agent_spec(), rng)
        self.local.epoch = view.epoch
        # Votes already on record (e.g. after a restart): never decided again.
        self.local.voted.update(voted)
        self.local.voted.update(self.record.decided(view.epoch))
        # The slow check runs every reconcile_seconds x U(0.5, 1.5), the first one no sooner than
        # one period after the start: the agents of a process spread their checks over time.
        self._jitter = random.Random()
        self.protocol = DeviceProtocol(
            view,
            self.record,
            persist=lambda: self.persist(),
            lost_epoch=self._restart_local,
            jitter=self._jitter.random,
            reconcile_seconds=reconcile_seconds,
            next_check=time.monotonic() + reconcile_seconds * (1 + self._jitter.random()),
        )
        self._transport = client_transport(client)
        # LDP: no local statistics are used; the reports (agent/crowd.py)
        self.crowd = (
            CrowdReporter(client, view, self.record, rng, lambda: self.persist())
            if view.config.crowd
            else None
        )

    @classmethod
    def enroll(
        cls,
        client: CoordinatorClient,
        view: GlobalView,
        secret: str,
        rng: np.random.Generator,
        persist: Callable[[], None] | None = None,
        reconcile_seconds: float = 30.0,
        simulated: bool = False,
        lease: bool = False,
    ) -> Agent:
        """A new agent; `secret` is a one-time ticket (or open enrollment's shared secret).
        `simulated`: the agent service's (fed by a load generator), not a real device. `lease`:
        it stays enrolled only while its host renews it (agent/leases.py)."""
        reply = client.enroll(secret, view.experiment, simulated=simulated, lease=lease)
        return cls(
            client,
            view,
            reply["agent_id"],
            reply["token"],
            rng,
            persist=persist,
            reconcile_seconds=reconcile_seconds,
        )

    def _run(self, exchange: Exchange[R]) -> R:
        return run(exchange, self._transport)

    @property
    def reporting(self) -> bool:
        """CDE: this agent sends one report, never a vote."""
        return self.local.reports

    @property
    def reported(self) -> bool:
        """CDE: its report is drawn (on record; sent, or to be sent again by resend_pending)."""
        return self.record.report is not None

    def choose(self) -> list[int]:
        """Sync with the global set (maybe voting, or resetting under DSER4); the arms to play.
        CDE: the arms of its fixed budget until its report is drawn, then none; once an arm is
        accepted, that arm. LDP: an arm drawn from the published allocation (agent/crowd.py)."""
        if self.crowd is not None:
            self.view.refresh_allocation(self.client, time.monotonic())
            return self.crowd.choose()
        if self.reporting:
            self._sync()
            if self.view.identified:
                return sorted(self.view.remaining)
            return [] if self.reported or self.local.done else self.local.select()
        self._sync()
        if self.local.wants_reset():
            if self.view.config.global_reset and self._run(self.protocol.reset()):
                self._run(self.protocol.refresh())
                self._sync()
            else:
                self.local.reset(self.view.remaining)
        self._settle()
        return self.local.select()

    def _restart_local(self) -> None:
        """The protocol forgot this agent's votes of a lost epoch: the current epoch began with a
        reset the agent did not see as one (same number), so it restarts as a reset asks."""
        self.local.voted = set()
        self.local.voted.update(self.record.decided(self.view.epoch))
        if not self.reporting:
            self.local.reset(self.view.remaining)

    def _forget_lost_epoch(self) -> None:
        self.protocol.forget_lost_epoch()

    def _sync(self) -> None:
        self._forget_lost_epoch()
        epoch = self.local.epoch
        votes = self.local.sync(self.view.remaining, self.view.epoch)
        if self.local.epoch != epoch:  # a new epoch (or one a failover brought back)
            self.local.voted.update(self.record.decided(self.local.epoch))
        self._send(votes)

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        """Feed the rewards of the arms played; returns the votes sent (CDE: none; the report is
        sent at the activation that ends the fixed budget). In an experiment whose rewards are
        declared Bernoulli, a reward other than 0 or 1 is refused (ParameterError, a ValueError)
        and nothing is recorded."""
        if self.view.bernoulli:
            check_bernoulli_rewards(rewards)
        if self.crowd is not None:
            if len(arms) == 1:
                self.crowd.observe(int(arms[0]), float(rewards[0]))
            return []
        if self.reporting:
            if not self.reported and not self.local.done:
                self.local.observe(arms, rewards)
                self._report()
            return []
        votes = self.local.observe(arms, rewards)
        self._send(votes)
        self._settle()
        return votes

    def _settle(self) -> None:
        """CE only: tell the coordinator that this agent settled (see DeviceProtocol.settle)."""
        self._run(self.protocol.settle(self.local.done, self.local.epoch))

    def _report(self) -> None:
        """CDE: the report drawn by the local run (at the activation its budget ended) is put on
        record, then sent once; never drawn twice."""
        if self.local.report is None or self.reported:
            return
        self.record.report = self.local.report
        self.persist()  # drawn: a crash from here on sends this report again, never another
        self._run(self.protocol.deliver_report("drawn"))

    def _send(self, votes: list[int]) -> None:
        """Votes decided: on record, then sent (with any pending vote of the epoch)."""
        self.protocol.decide(votes)
        self._run(self.protocol.deliver_decided())

    def resend_pending(self) -> int:
        """After a restart: send again the votes decided but not known to be acknowledged, and
        CDE's unanswered report (see DeviceProtocol.resend_pending), and LDP's. The votes sent
        again."""
        if self.crowd is not None:
            self.crowd.deliver("pending")
            return 0
        return self._run(self.protocol.resend_pending())

    def check_reason(self, now: float | None = None) -> str | None:
        """Why this agent should ask the coordinator for its votes now (DeviceProtocol)."""
        return self.protocol.check_reason(now)

    def missing_votes(self, voted_against: Collection[int], before_seq: int) -> list[int]:
        """Arms of acknowledged votes the coordinator lacks (DeviceProtocol.missing_votes)."""
        return self.protocol.missing_votes(voted_against, before_seq)

    def reconcile(self, now: float | None = None) -> int:
        """If check_reason says so, read this agent's votes from the coordinator and send again
        the acknowledged ones it lost (see missing_votes); the number sent again."""
        return self._run(self.protocol.reconcile(time.monotonic() if now is None else now))


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
