"""LDP on a device (docs/LDP.md), without I/O: no learning here, one private report per activation.

At an activation the device draws an arm from the allocation the coordinator publishes (its own
randomness, never its data), the application plays it and observes the reward, and the device
sends one report: the arm and `common.ldp.Mechanism.privatize(reward)`, one bit, numbered
seq = 1..B (B = reports_per_agent). The reward never leaves: a reward outside [0, 1] is clipped to
the range the experiment declares (`reward_range`, if it declares one) before the mechanism, and
refused otherwise (a Bernoulli experiment takes 0 and 1 only).

The report is put on record (agent.state.AgentRecord.private_pending) and saved before it is sent:
a reply lost on the way, or a crash, sends that same report again (the coordinator answers
"duplicate" for a number it counted, and nothing changes), never a second privatization of the
reward. Once B reports are counted the device sends nothing more: `choose` still gives an arm from
the allocation (the leader once identified), `decide` gives no report.

`PrivateProtocol.deliver` is an exchange (agent/protocol.py): it yields the message and takes the
reply, so the transport is injected (agent/device.py: the coordinator client; tests: a transport
that drops a reply). The uniforms come from the caller: `system_uniform` (os.urandom, what a device
uses) or `generator_uniform` (a seeded numpy Generator, for tests); never from a reward.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.protocol import Exchange, message
from agent.state import AgentRecord
from clients.coordinator import CoordinatorError
from common.errors import ParameterError
from common.ldp import Mechanism, unit_reward
from common.params import BERNOULLI_REWARDS, BOUNDED_REWARDS

log = logging.getLogger("dexp.agent.private")

Uniform = Callable[[], float]  # one uniform draw in [0, 1)


def system_uniform() -> Uniform:
    """Uniforms from the operating system's generator (os.urandom): what protects a report."""
    return random.SystemRandom().random


def generator_uniform(rng: np.random.Generator) -> Uniform:
    """Uniforms from a numpy Generator: reproducible, for tests and simulations."""
    return lambda: float(rng.random())


def draw_arm(allocation: Sequence[float], u: float) -> int:
    """The arm of the allocation's inverse CDF at u in [0, 1) (weights need not sum to 1; arms of
    weight 0 are never drawn). The JavaScript SDK's drawArm walks the weights the same way."""
    total = sum(w for w in allocation if w > 0.0)
    if not total > 0.0:
        raise ParameterError("allocation", list(allocation), "needs a positive weight")
    target, acc, last = u * total, 0.0, -1
    for arm, weight in enumerate(allocation):
        if weight > 0.0:
            acc += weight
            last = arm
            if target < acc:
                return arm
    return last  # u * total rounded up to the total


def report_reward(reward: float, rewards: str, reward_range: tuple[float, float] | None) -> float:
    """The reward the mechanism takes, in [0, 1]: clipped to the declared range and mapped to
    [0, 1] if the experiment declares one (common.ldp.unit_reward); else refused unless in [0, 1]
    (0 or 1 in a Bernoulli experiment). Checked before anything is recorded."""
    value = float(reward)
    if reward_range is not None:
        return unit_reward(value, *reward_range)
    if rewards == BERNOULLI_REWARDS and value not in (0.0, 1.0):
        raise ParameterError("reward", reward, "this experiment's rewards are Bernoulli: 0 or 1")
    if not 0.0 <= value <= 1.0:
        raise ParameterError(
            "reward", reward, "must be in [0, 1] (the experiment declares no range)"
        )
    return value


@dataclass(frozen=True)
class PrivateReport:
    """What leaves the device at an activation: the arm played, one privatized bit, its number."""

    arm: int
    bit: int
    seq: int

    @property
    def body(self) -> dict[str, int]:
        return {"arm": self.arm, "bit": self.bit, "seq": self.seq}


class PrivateProtocol:
    """One device's side of LDP: the experiment's published part (allocation, estimates, lift,
    status), the reports on record, and the exchange that sends one. `persist` saves the record."""

    def __init__(
        self,
        experiment: str,
        record: AgentRecord,
        persist: Callable[[], None],
        document: dict[str, Any],
    ) -> None:
        self.experiment, self.record, self.persist = experiment, record, persist
        self.mechanism = Mechanism(float(document["dp_epsilon"]))
        self.budget = int(document["reports_per_agent"])
        self.n_arms = len(document["arms"])
        self.rewards = str(document.get("rewards") or BOUNDED_REWARDS)
        declared = document.get("reward_range")
        self.reward_range = None if declared is None else (float(declared[0]), float(declared[1]))
        self.allocation: tuple[float, ...] = ()
        self.remaining: frozenset[int] = frozenset()
        self.status = "exploring"
        self.estimates: list[dict[str, Any]] | None = None
        self.lift: list[dict[str, Any]] | None = None
        self.closed = False  # the coordinator refused a report as decided: it counts no more
        self.outcomes: dict[str, int] = {}  # replies by outcome (counted, duplicate, refused)
        self.update(document)

    def update(self, document: dict[str, Any]) -> None:
        """Take what a read of the experiment document published."""
        self.allocation = tuple(float(w) for w in document["allocation"])
        self.remaining = frozenset(int(a) for a in document["remaining_arms"])
        self.status = "identified" if len(self.remaining) == 1 else str(document["status"])
        self.estimates = document.get("estimates")
        self.lift = document.get("lift")

    # -- what the device reads ----------------------------------------------------------------
    @property
    def sent(self) -> int:
        """Reports sent and answered: counted (or duplicates of counted ones), or refused (their
        numbers are used: the device sends at most B whatever the answers)."""
        return self.record.private_sent

    @property
    def reports_left(self) -> int:
        """Reports this device may still send: B, less those counted and the one pending."""
        pending = 1 if self.record.private_pending is not None else 0
        return max(self.budget - self.sent - pending, 0)

    @property
    def identified(self) -> bool:
        return len(self.remaining) == 1

    @property
    def decided(self) -> bool:
        """The experiment ended (one arm left, or a report refused as decided)."""
        return self.identified or self.closed or self.status != "exploring"

    @property
    def spent(self) -> bool:
        """Every report this device may send is counted (none pending)."""
        return self.sent >= self.budget and self.record.private_pending is None

    def choose(self, u: float) -> int:
        """The arm to play: the identified one, else drawn from the allocation over the arms
        still in play at u (the device's uniform, never its data)."""
        if self.identified:
            return next(iter(self.remaining))
        weights = [w if a in self.remaining else 0.0 for a, w in enumerate(self.allocation)]
        if not any(w > 0.0 for w in weights):  # a stale allocation: uniform over the set
            weights = [1.0 if a in self.remaining else 0.0 for a in range(self.n_arms)]
        return draw_arm(weights, u)

    def check(self, arm: int, reward: float) -> float:
        """The reward the mechanism takes; refuses a bad arm or reward (nothing recorded)."""
        if isinstance(arm, bool) or not isinstance(arm, int | np.integer):
            raise ParameterError("arm", arm, "must be an arm index")
        if not 0 <= int(arm) < self.n_arms:
            raise ParameterError("arm", arm, f"must be in [0, {self.n_arms - 1}]")
        return report_reward(reward, self.rewards, self.reward_range)

    def decide(
        self, arm: int, reward: float, u_round: float, u_flip: float
    ) -> PrivateReport | None:
        """The report of this activation, on record and saved before it is sent; None when no
        report is to be sent (B counted, one pending, or the experiment decided)."""
        unit = self.check(arm, reward)
        if self.record.private_pending is not None or self.sent >= self.budget or self.decided:
            return None
        report = PrivateReport(
            int(arm), self.mechanism.privatize(unit, u_round, u_flip), self.sent + 1
        )
        self.record.private_pending = (report.arm, report.bit, report.seq)
        self.persist()  # decided: a crash from here on sends this report again, never another
        return report

    def deliver(self, kind: str) -> Exchange[str | None]:
        """Send the pending report (the same one again after a lost reply or a restart) and
        record the answer: counted or duplicate (it is counted: never sent again), or refused
        as the experiment decided, spent or out of order (409: it can never count, dropped). The
        outcome; None if nothing was pending."""
        pending = self.record.private_pending
        if pending is None:
            return None
        report = PrivateReport(*pending)
        try:
            reply = yield message("private_report", self.experiment, self.record.token, report.body)
        except CoordinatorError as exc:
            if exc.status != 409:
                raise  # 404: gone; others: this request is wrong, the report stays on record
            outcome = "refused"
            self.closed = self.closed or "decided" in exc.detail
            log.warning(
                "report agent=%s seq=%d refused: %s", self.record.agent_id, report.seq, exc.detail
            )
        else:
            outcome = str(reply["outcome"])
            self.record.private_sent = max(self.sent, int(reply["sent"]))
        # Its number is used whatever the answer: a refused report left the device too, and a
        # next one numbered the same would be a (B + 1)-th release of a reward.
        self.record.private_sent = max(self.sent, report.seq)
        self.record.private_pending = None
        self.persist()
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        log.info(
            "private report agent=%s seq=%d outcome=%s kind=%s",
            self.record.agent_id,
            report.seq,
            outcome,
            kind,
        )
        return outcome
