"""The device protocol without I/O: what an agent sends the coordinator, given its replies.

One object, DeviceProtocol, holds what the protocol keeps (the agent's record, its view of the
global state, CE's settled flag, the check of its own votes) and says which messages to send:
each exchange (deliver the votes decided, settle, reset, re-send after a restart, reconcile) is a
generator that yields a Message and receives the coordinator's reply (its JSON body) or has a
CoordinatorError thrown in (a refusal; a 404, the experiment gone, is never swallowed). `run` drives
one with a transport the caller injects (`client_transport` for the project's CoordinatorClient);
tests/services/test_device_agreement.py drives the same exchanges with recorded replies, here and through
sdk/js/src/protocol.ts, and compares every message. The local agent's decisions (its votes, its
settle) are inputs; what the protocol asks of it (restart after a lost epoch) is a callback.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from agent.state import Acknowledged, AgentRecord
from clients.coordinator import CoordinatorClient, CoordinatorError

if TYPE_CHECKING:
    from agent.library import GlobalView

log = logging.getLogger("dexp.agent")

# Orders acknowledgements and global-state reads within the process: a vote acknowledged before a
# read was issued must show in that read (requests of one process are sequential). Also taken by
# the followers' threads (agent/events.py): next() of a count is atomic.
_sequence = itertools.count(1)


def next_seq() -> int:
    return next(_sequence)


@dataclass(frozen=True)
class Message:
    """One request to the coordinator: what the protocol decided to send. `kind` names the
    CoordinatorClient method that sends it (state, vote, report, private_report, settled, reset,
    me)."""

    kind: str
    experiment: str
    method: str
    path: str
    body: dict[str, Any] | None = None
    token: str | None = None


_ROUTES = {  # kind: (method, path after the experiment's, or the whole path)
    "state": ("GET", ""),
    "vote": ("POST", "/votes"),
    "report": ("POST", "/report"),
    "private_report": ("POST", "/reports"),  # LDP (agent/private_device.py)
    "settled": ("POST", "/settled"),
    "reset": ("POST", "/reset"),
    "me": ("GET", "/v1/agents/me"),
}


R = TypeVar("R")
Exchange = Generator[Message, Any, R]
Transport = Callable[[Message], Any]


def run(exchange: Exchange[R], transport: Transport) -> R:
    """Drive `exchange`: each message through `transport`, its reply (or its error) back in."""
    try:
        message = next(exchange)
        while True:
            try:
                reply = transport(message)
            except CoordinatorError as exc:
                message = exchange.throw(exc)
            else:
                message = exchange.send(reply)
    except StopIteration as stop:
        result: R = stop.value
        return result


def client_transport(client: CoordinatorClient) -> Transport:
    """The coordinator client as a transport: each message through the client's method of its
    kind (its retries, failovers and 429 waits kept; a rate-limited reset answers None)."""

    def send(m: Message) -> Any:
        body, token, experiment = m.body or {}, str(m.token), m.experiment
        if m.kind == "state":
            return client.experiment(experiment)
        if m.kind == "me":
            return client.me(token)
        if m.kind == "vote":
            started = body.get("epoch_started_at")
            return client.vote(experiment, token, body["arm"], body["epoch"], started)
        if m.kind == "report":
            return client.report(experiment, token, body["arm"])
        if m.kind == "private_report":
            return client.private_report(experiment, token, body["arm"], body["bit"], body["seq"])
        if m.kind == "settled":
            return client.settled(experiment, token, body["epoch"])
        if m.kind == "reset":
            return client.reset(experiment, token, body["epoch"])
        raise ValueError(f"no coordinator request of kind {m.kind}")

    return send


def message(
    kind: str, experiment: str, token: str | None, body: dict[str, Any] | None = None
) -> Message:
    """The message of `kind` (see _ROUTES) about `experiment`."""
    method, path = _ROUTES[kind]
    if kind != "me":
        path = f"/v1/experiments/{experiment}{path}"
    return Message(kind, experiment, method, path, body, token)


class DeviceProtocol:
    """One agent's side of the protocol. `persist` saves the record, `lost_epoch` restarts the
    local agent (its votes of an epoch a failover lost are forgotten), `jitter` draws U(0, 1) for
    the slow check's period (`reconcile_seconds` x U(0.5, 1.5))."""

    def __init__(
        self,
        view: GlobalView,
        record: AgentRecord,
        persist: Callable[[], None],
        lost_epoch: Callable[[], None],
        jitter: Callable[[], float],
        reconcile_seconds: float,
        next_check: float,
    ) -> None:
        self.view, self.record = view, record
        self.persist, self.lost_epoch, self.jitter = persist, lost_epoch, jitter
        self.reconcile_seconds, self.next_check = reconcile_seconds, next_check
        self.votes_sent = 0  # votes decided and sent
        self.votes_resent = 0  # pending or lost votes sent again
        self.reports_sent = 0  # CDE: reports sent, again after a restart included
        self.settled_sent = 0  # CE: settled messages sent
        self.resets_limited = 0  # DSER4 resets the coordinator refused (429): local reset only
        self.checks = 0  # GET /v1/agents/me answered
        self.checked_seq = 0  # sequence number taken just before the last check
        # CE: the global set when the coordinator took this agent's settled message, and its
        # epoch (None: not settled at the coordinator, as far as this agent knows).
        self.settled_with: frozenset[int] | None = None
        self.settled_epoch = -1
        self.settle_refused = False  # a settled message refused (4xx but 404): no more

    def message(self, kind: str, body: dict[str, Any] | None = None) -> Message:
        """The message of `kind` (see _ROUTES), with this agent's token but for a state read."""
        token = None if kind == "state" else self.record.token
        return message(kind, self.view.experiment, token, body)

    def refresh(self) -> Exchange[bool]:
        """Read the global state again; True if the global set changed."""
        seq = next_seq()
        state = yield self.message("state")
        return self.view.update(state, seq)

    def forget_lost_epoch(self) -> bool:
        """Votes of an epoch a failover lost, whose number the coordinator's current epoch has
        taken again, are forgotten, never sent again; the local agent restarts (lost_epoch)."""
        view = self.view
        if not self.record.forget_lost_epoch(view.epoch, view.epoch_started_at):
            return False
        log.warning(
            "agent=%s: its votes of a lost epoch %d are dropped (a failover lost that epoch)",
            self.record.agent_id,
            view.epoch,
        )
        self.lost_epoch()
        self.persist()
        return True

    def decide(self, votes: Sequence[int]) -> None:
        """Votes the local agent decided: on record as pending (and saved) before they are sent:
        a crash from here on re-sends them, never decides them again."""
        epoch = self.view.epoch
        for arm in votes:
            if self.view.epoch_started_at is not None:
                self.record.epoch_starts.setdefault(epoch, self.view.epoch_started_at)
            self.record.pending.append((arm, epoch))
        if votes:
            self.persist()

    def deliver_decided(self) -> Exchange[int]:
        """Send the pending votes of the current epoch, in order (another epoch's are dropped:
        the coordinator would ignore them); the number sent."""
        record, sent = self.record, 0
        if any(e != self.view.epoch for _, e in record.pending):
            record.pending = [p for p in record.pending if p[1] == self.view.epoch]
            self.persist()
        while record.pending:
            arm, epoch = record.pending[0]
            yield from self.deliver(arm, epoch, "decided")
            self.votes_sent += 1
            sent += 1
        return sent

    def deliver(self, arm: int, epoch: int, kind: str) -> Exchange[None]:
        """Send one vote and record its acknowledgement."""
        started = self.record.epoch_starts.get(epoch)
        body = {"arm": arm, "epoch": epoch}
        if started is not None:
            body["epoch_started_at"] = started
        reply = yield self.message("vote", body)
        outcome = str(reply["outcome"])
        record = self.record
        record.pending = [p for p in record.pending if p != (arm, epoch)]
        # Kept: this epoch's votes and the previous one's (a failover may bring it back), no more.
        record.acknowledged = [
            v
            for v in record.acknowledged
            if (v.arm, v.epoch) != (arm, epoch) and v.epoch >= epoch - 1
        ] + [Acknowledged(arm, epoch, outcome, next_seq(), _int_or_none(reply.get("votes")))]
        self.persist()
        if "votes" in reply:
            self.view.observe_count(arm, int(reply["epoch"]), int(reply["votes"]))
        log.info(
            "vote agent=%s arm=%d epoch=%d outcome=%s kind=%s",
            record.agent_id,
            arm,
            epoch,
            outcome,
            kind,
        )
        if self.view.stale(int(reply["version"]), int(reply["epoch"])):
            yield from self.refresh()

    def deliver_report(self, kind: str) -> Exchange[None]:
        """CDE: send the report on record (a second copy is a duplicate) and record the answer."""
        arm = self.record.report
        assert arm is not None
        reply = yield self.message("report", {"arm": arm})
        self.record.report_outcome = str(reply["outcome"])
        self.reports_sent += 1
        self.persist()
        log.info("report agent=%s outcome=%s kind=%s", self.record.agent_id, reply["outcome"], kind)

    def reset(self) -> Exchange[bool]:
        """DSER4: ask for a new epoch; True if it began (the caller reads the state and syncs).
        Waiting for more agents, or refused (429, not waited for): False, a local reset only."""
        try:
            reply = yield self.message("reset", {"epoch": self.view.epoch})
        except CoordinatorError as exc:
            if exc.status != 429:
                raise
            reply = None
        if reply is None:  # the client's answer to a 429 (or the 429 itself, above)
            self.resets_limited += 1
            log.info(
                "reset agent=%s epoch=%d rate-limited: local statistics reset only",
                self.record.agent_id,
                self.view.epoch,
            )
            return False
        return not reply.get("pending")

    def settle(self, done: bool, local_epoch: int) -> Exchange[None]:
        """CE only: tell the coordinator that this agent settled (`done`: its local set holds one
        arm), once per settle, and again when the coordinator forgot it: an arm left the global
        set that this agent is not counted against, or a reset."""
        view = self.view
        if view.config.algorithm != "ce" or self.settle_refused:
            return
        if not done or local_epoch != view.epoch:
            self.settled_with = None  # not settled (or restarting): nothing to say
            return
        if len(view.remaining) < 2:
            return  # identified: nothing left to tell
        if self.settled_with is not None:
            counted = {
                v.arm for v in self.record.acknowledged if v.epoch == view.epoch and v.in_voter_set
            }
            gone = self.settled_with - view.remaining
            if self.settled_epoch == view.epoch and gone <= counted:
                return  # the coordinator still holds the flag
            self.settled_with = None
        try:
            reply = yield self.message("settled", {"epoch": view.epoch})
        except CoordinatorError as exc:  # e.g. a coordinator without the route: carry on
            if exc.status == 404:
                raise
            self.settle_refused = True
            log.warning("settled message of agent=%s refused: %s", self.record.agent_id, exc)
            return
        self.settled_sent += 1
        log.info(
            "settled agent=%s epoch=%d outcome=%s",
            self.record.agent_id,
            view.epoch,
            reply["outcome"],
        )
        if reply["outcome"] == "settled":
            self.settled_with = frozenset(int(a) for a in reply["remaining_arms"])
            self.settled_epoch = int(reply["epoch"])
        if view.stale(int(reply["version"]), int(reply["epoch"])):
            yield from self.refresh()

    def resend_pending(self) -> Exchange[int]:
        """After a restart: send again the votes decided but not known to be acknowledged, and
        CDE's report if it was not answered (a second copy is harmless); pending votes of another
        epoch are dropped. The votes sent again."""
        self.forget_lost_epoch()
        sent = 0
        if self.record.report is not None and self.record.report_outcome is None:
            yield from self.deliver_report("pending")
        for arm, epoch in list(self.record.pending):
            if epoch == self.view.epoch:
                yield from self.deliver(arm, epoch, "pending")
                sent += 1
            else:
                self.record.pending.remove((arm, epoch))
                self.persist()
        self.votes_resent += sent
        return sent

    def check_reason(self, now: float | None = None) -> str | None:
        """Why this agent should ask the coordinator for its votes now (None: no need). Only while
        it has acknowledged votes in the current epoch: "regression" (the global (epoch, version)
        went backwards since its last check), "loss" (another sure sign of lost writes since then,
        see GlobalView), "count" (an arm still in play has fewer public votes than this agent's own
        vote's reply showed, in a state read after that reply), "period" (the slow check is due at
        `now`; None: not considered)."""
        view = self.view
        acknowledged = [v for v in self.record.acknowledged if v.epoch == view.epoch]
        if not acknowledged:
            return None
        if view.lost_at > self.checked_seq:
            return "regression" if view.regressed_at > self.checked_seq else "loss"
        for v in acknowledged:
            if (
                v.votes is not None
                and (v.in_voter_set or v.outcome == "arm_out")
                and v.seq < view.snapshot_seq
                and v.arm in view.remaining
                and v.arm < len(view.votes)
                and view.votes[v.arm] < v.votes
            ):
                return "count"
        if now is not None and now >= self.next_check:
            return "period"
        return None

    def missing_votes(self, voted_against: Collection[int], before_seq: int) -> list[int]:
        """Arms of acknowledged votes the coordinator lacks: votes of the current epoch,
        acknowledged before the read of `voted_against` was issued (`before_seq`), not among
        them, that were counted (the coordinator lost them) or that were refused as late while
        the arm is now back in the global set."""
        view = self.view
        return [
            v.arm
            for v in self.record.acknowledged
            if v.epoch == view.epoch
            and v.seq < before_seq
            and (v.in_voter_set or v.arm in view.remaining)
            and v.arm not in voted_against
        ]

    def reconcile(self, now: float) -> Exchange[int]:
        """If check_reason says so, read this agent's votes (GET /v1/agents/me) and send again
        the acknowledged ones the coordinator lost; the number sent again."""
        reason = self.check_reason(now)
        if reason is None:
            return 0
        view = self.view
        seq = next_seq()
        self.checked_seq = seq
        self.next_check = now + self.reconcile_seconds * (0.5 + self.jitter())
        try:
            me = yield self.message("me")
        except CoordinatorError as exc:  # e.g. a coordinator without GET /v1/agents/me
            if exc.status == 404:
                raise
            log.warning("check agent=%s of its votes failed: %s", self.record.agent_id, exc)
            return 0
        self.checks += 1
        started = me.get("epoch_started_at")
        same_start = started is None or int(started) == view.epoch_started_at
        if (int(me["epoch"]), int(me["version"])) != (view.epoch, view.version) or not same_start:
            # the view is behind (or ahead of) what `me` describes: another version, or an epoch
            # of the same number that began at another time (a failover lost the view's one)
            yield from self.refresh()
            if view.epoch != int(me["epoch"]) or (
                started is not None and int(started) != view.epoch_started_at
            ):
                return 0  # another epoch meanwhile: these votes no longer count
        self.forget_lost_epoch()
        voted_against = {int(arm) for arm in me["voted_against"]}
        for v in self.record.acknowledged:  # present: the count to watch is the current one
            if v.epoch == view.epoch and v.arm in voted_against and v.arm < len(view.votes):
                v.votes = None if v.votes is None else min(v.votes, view.votes[v.arm])
        missing = self.missing_votes(voted_against, seq)
        if missing and reason in ("count", "period"):  # news: the other agents lost votes too?
            view.note_loss(f"agent {self.record.agent_id} lost {len(missing)} acknowledged vote(s)")
            self.checked_seq = view.lost_at  # this agent's check is done
        for arm in missing:
            log.warning(
                "vote agent=%s arm=%d was acknowledged but is missing (check: %s)",
                self.record.agent_id,
                arm,
                reason,
            )
            yield from self.deliver(arm, view.epoch, "resent")
        self.votes_resent += len(missing)
        return len(missing)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
