"""An agent an application can embed: choose an arm, observe its reward, vote, follow the global set.

Rewards and local means stay in this object. What leaves it is a vote: an arm index (and the reset
epoch it belongs to), sent to the coordinator.

Each agent keeps a record of its votes (agent.state.AgentRecord): a vote is "pending" from the
moment it is decided until the coordinator acknowledges it, then "acknowledged" with its outcome.
The record is what a restarted process re-uses (same agent id and token, no arm decided twice), and
what lets an agent notice that the coordinator lost votes it had acknowledged (a Redis failover under
Sentinel or Cluster can lose the last acknowledged writes): when the global state's (epoch, version)
goes backwards, or the voter set of an arm still in play lacks a vote this agent had acknowledged, the
agent sends that vote again. A second copy of a vote is harmless (the coordinator counts an
(agent, arm) pair once), so the check can be eager.

    view = GlobalView.fetch(client, "demo")
    agent = Agent.enroll(client, view, secret="...", rng=np.random.default_rng())
    arms = agent.choose()                   # arms to play now
    agent.observe(arms, rewards_of(arms))   # may send votes
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.client import CoordinatorClient
from agent.state import Acknowledged, AgentRecord
from common.agent import AgentSpec, LocalAgent
from common.algorithms import AlgorithmConfig

log = logging.getLogger("dexp.agent")

# Orders acknowledgements and global-state reads within the process: a vote acknowledged before a
# read was issued must show in that read (requests of one process are sequential).
_sequence = itertools.count(1)


def _next_seq() -> int:
    return next(_sequence)


@dataclass
class GlobalView:
    """What an agent knows of the global state: the remaining arms, their version and the epoch.

    Refreshed only when a vote reply or a broadcast shows a newer version (or by a slow poll)."""

    experiment: str
    arms: list[str]
    config: AlgorithmConfig
    sigma: float | None
    threshold: int
    remaining: frozenset[int] = field(default_factory=frozenset)
    version: int = -1
    epoch: int = 0
    created_at: int = 0
    # The voter sets of the last state read (None if the coordinator did not send them), and the
    # sequence number taken just before that read was issued (see _next_seq).
    voters: dict[int, frozenset[str]] | None = None
    snapshot_seq: int = 0
    regressions: int = 0  # times the coordinator's (epoch, version) went backwards
    regressed_at: int = -1  # snapshot_seq of the last read that went backwards

    @classmethod
    def fetch(cls, client: CoordinatorClient, experiment: str) -> GlobalView:
        seq = _next_seq()
        state = client.experiment(experiment)
        view = cls(
            experiment,
            list(state["arms"]),
            AlgorithmConfig(**state["params"]),
            state.get("sigma"),
            int(state["threshold"]),
            created_at=int(state.get("created_at", 0)),
        )
        view.update(state, seq)
        return view

    def update(self, state: dict[str, Any], seq: int | None = None) -> bool:
        """Take the state of a GET of the experiment; True if the global set changed.

        A state older than the one held means the coordinator lost writes (a Redis failover): it is
        taken all the same (it is what the coordinator now counts from), and noted, so that the
        agents send their acknowledged votes again. The remaining arms are always taken from the
        state read: after a loss, an equal version no longer proves an equal set."""
        epoch, version = int(state["epoch"]), int(state["version"])
        remaining = frozenset(int(a) for a in state["remaining_arms"])
        self.snapshot_seq = _next_seq() if seq is None else seq
        self.voters = (
            {arm: frozenset(ids) for arm, ids in enumerate(state["voters"])}
            if "voters" in state
            else None
        )
        if (epoch, version) < (self.epoch, self.version):
            self.regressions += 1
            self.regressed_at = self.snapshot_seq
            log.warning(
                "the coordinator's state went back from (epoch %d, version %d) to (%d, %d): "
                "acknowledged votes will be sent again",
                self.epoch,
                self.version,
                epoch,
                version,
            )
        changed = (epoch, version) != (self.epoch, self.version) or remaining != self.remaining
        self.epoch, self.version, self.remaining = epoch, version, remaining
        return changed

    def stale(self, version: int, epoch: int) -> bool:
        """A vote reply shows another (epoch, version): newer, or older (lost writes)."""
        return (epoch, version) != (self.epoch, self.version)

    def refresh(self, client: CoordinatorClient) -> bool:
        seq = _next_seq()
        return self.update(client.experiment(self.experiment), seq)

    def agent_spec(self) -> AgentSpec:
        params = self.config.local_params(len(self.arms), 1, self.sigma)
        return AgentSpec(
            len(self.arms), self.config.local_subroutine, params, self.config.vote_drop
        )

    @property
    def identified(self) -> bool:
        return len(self.remaining) == 1


class Agent:
    """One agent. `record` holds its credentials and votes (a restarted process passes the saved
    one); `persist` is called whenever the record changed (the service writes its state file)."""

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
        self.votes_sent = 0  # votes decided and sent by this object
        self.votes_resent = 0  # pending or lost votes sent again

    @classmethod
    def enroll(
        cls,
        client: CoordinatorClient,
        view: GlobalView,
        secret: str,
        rng: np.random.Generator,
        persist: Callable[[], None] | None = None,
    ) -> Agent:
        reply = client.enroll(secret, view.experiment)
        return cls(client, view, reply["agent_id"], reply["token"], rng, persist=persist)

    def choose(self) -> list[int]:
        """Sync with the global set (maybe voting, or resetting under DSER4); the arms to play."""
        self._sync()
        if self.local.wants_reset():
            if self.view.config.global_reset:
                self.client.reset(self.view.experiment, self.token, self.view.epoch)
                self.view.refresh(self.client)
                self._sync()
            else:
                self.local.reset(self.view.remaining)
        return self.local.select()

    def _sync(self) -> None:
        epoch = self.local.epoch
        votes = self.local.sync(self.view.remaining, self.view.epoch)
        if self.local.epoch != epoch:  # a new epoch (or one a failover brought back)
            self.local.voted.update(self.record.decided(self.local.epoch))
        self._send(votes)

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        """Feed the rewards of the arms played; returns the votes sent."""
        votes = self.local.observe(arms, rewards)
        self._send(votes)
        return votes

    def _send(self, votes: list[int]) -> None:
        for arm in votes:
            epoch = self.view.epoch
            self.record.pending.append((arm, epoch))
            self.persist()  # decided: a crash from here on re-sends it, never decides it again
            self._deliver(arm, epoch, "decided")
            self.votes_sent += 1

    def _deliver(self, arm: int, epoch: int, kind: str) -> None:
        """Send one vote (retried until the coordinator answers) and record its acknowledgement."""
        reply = self.client.vote(self.view.experiment, self.token, arm, epoch)
        outcome = str(reply["outcome"])
        record = self.record
        record.pending = [p for p in record.pending if p != (arm, epoch)]
        # Kept: this epoch's votes and the previous one's (a failover may bring it back), no more.
        record.acknowledged = [
            v
            for v in record.acknowledged
            if (v.arm, v.epoch) != (arm, epoch) and v.epoch >= epoch - 1
        ] + [Acknowledged(arm, epoch, outcome, _next_seq())]
        self.persist()
        log.info(
            "vote agent=%s arm=%d epoch=%d outcome=%s kind=%s",
            self.agent_id,
            arm,
            epoch,
            outcome,
            kind,
        )
        if self.view.stale(int(reply["version"]), int(reply["epoch"])):
            self.view.refresh(self.client)

    def resend_pending(self) -> int:
        """After a restart: send again the votes decided but not known to be acknowledged (the
        coordinator may or may not have them; a second copy is harmless). Pending votes of another
        epoch are dropped: the coordinator would ignore them."""
        sent = 0
        for arm, epoch in list(self.record.pending):
            if epoch == self.view.epoch:
                self._deliver(arm, epoch, "pending")
                sent += 1
            else:
                self.record.pending.remove((arm, epoch))
                self.persist()
        self.votes_resent += sent
        return sent

    def missing_votes(self) -> list[int]:
        """Arms of acknowledged votes the last global state read lacks: votes of the current epoch,
        acknowledged before that read was issued, without this agent among the arm's voters,
        that were counted (the coordinator lost them) or that were refused as late while the arm
        is now back in the global set. When the coordinator sent no voter sets: every such vote,
        once the state went backwards. Sent again, a vote on an arm still in play is counted, one
        on an arm gone meanwhile comes back as arm_out and is recorded so."""
        view = self.view
        candidates = [
            v
            for v in self.record.acknowledged
            if v.epoch == view.epoch
            and v.seq < view.snapshot_seq
            and (v.in_voter_set or v.arm in view.remaining)
        ]
        if view.voters is not None:
            return [v.arm for v in candidates if self.agent_id not in view.voters.get(v.arm, ())]
        if view.regressed_at == view.snapshot_seq:
            return [v.arm for v in candidates]
        return []

    def reconcile(self) -> int:
        """Send again the acknowledged votes the coordinator lost (see missing_votes)."""
        missing = self.missing_votes()
        for arm in missing:
            log.warning("vote agent=%s arm=%d was acknowledged but is missing", self.agent_id, arm)
            self._deliver(arm, self.view.epoch, "resent")
        self.votes_resent += len(missing)
        return len(missing)
