"""LDP's side of an agent (docs/LDP.md): no learning, one private report per activation.

At an activation the agent draws an arm from the allocation the coordinator published (read from
the experiment's document, which the GlobalView reads again every `allocation_seconds`: the
allocation moves at publications, and the event stream announces only changes of the global set),
plays it, privatizes the reward (common.ldp.Mechanism) and sends the report numbered
`private_sent + 1`, at most B in all. The report is on record before it is sent: a retry or a
restart sends that same report (a duplicate for the coordinator), never another draw, so what
leaves the process is B privatized bits at most. A stale allocation is harmless: the coordinator's
guarantee holds for any allocation (docs/LDP.md, section 3); only arms still in the global set are
drawn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from agent.state import AgentRecord
from clients.coordinator import CoordinatorClient, CoordinatorError
from common.ldp import Mechanism, unit_reward

if TYPE_CHECKING:
    from agent.library import GlobalView

log = logging.getLogger("dexp.agent")


def draw_arm(
    allocation: Sequence[float], remaining: frozenset[int], rng: np.random.Generator
) -> int:
    """An arm drawn from the allocation restricted to the remaining arms (uniform over them when
    the allocation gives them no weight: none read yet, or one older than the last elimination)."""
    arms = sorted(remaining)
    weights = np.array([allocation[a] if a < len(allocation) else 0.0 for a in arms], dtype=float)
    total = weights.sum()
    if not total > 0:
        return int(arms[int(rng.integers(len(arms)))])
    return int(arms[int(rng.choice(len(arms), p=weights / total))])


class CrowdReporter:
    """One agent's private reports: drawn, put on record, sent; at most B (`reports_per_agent`)."""

    def __init__(
        self,
        client: CoordinatorClient,
        view: GlobalView,
        record: AgentRecord,
        rng: np.random.Generator,
        persist: Callable[[], None],
    ) -> None:
        self.client, self.view, self.record, self.rng = client, view, record, rng
        self.persist = persist
        self.budget = int(view.config.reports_per_agent)
        self.mechanism = Mechanism(view.config.dp_epsilon)
        self.sent = 0  # reports sent by this object (counted or duplicate)

    @property
    def spent(self) -> bool:
        return self.record.private_sent >= self.budget

    def choose(self) -> list[int]:
        """The arm to play now: the identified one once identified (no report then); none once
        the B reports are spent; else one drawn from the published allocation."""
        if self.view.identified:
            return sorted(self.view.remaining)
        if self.spent or self.record.private_pending is not None or not self.view.remaining:
            return []
        return [draw_arm(self.view.allocation, self.view.remaining, self.rng)]

    def observe(self, arm: int, reward: float) -> None:
        """The reward of the arm played: privatized, on record, then sent."""
        if self.view.identified or self.spent or self.record.private_pending is not None:
            return
        unit = unit_reward(float(reward), 0.0, 1.0)  # rewards outside [0, 1] are clipped first
        bit = self.mechanism.privatize(unit, float(self.rng.random()), float(self.rng.random()))
        self.record.private_pending = (arm, bit, self.record.private_sent + 1)
        self.persist()  # made: a crash from here on sends this report again, never another
        self.deliver("made")

    def deliver(self, kind: str) -> None:
        """Send the report on record. A 409 (decided, spent, out of order) ends it: the view is
        read again (decided) or the count taken from the refusal's meaning (spent)."""
        pending = self.record.private_pending
        if pending is None:
            return
        arm, _, seq = pending
        try:
            reply = self.client.private_report(self.view.experiment, self.record.token, *pending)
        except CoordinatorError as exc:
            if exc.status != 409:
                raise
            detail = str(exc)
            if "spent" in detail:
                self.record.private_sent = self.budget
            log.info("report agent=%s seq=%d refused: %s", self.record.agent_id, seq, detail)
            self.record.private_pending = None
            self.persist()
            if "decided" in detail:
                self.view.refresh(self.client)
            return
        self.sent += 1
        self.record.private_sent = max(self.record.private_sent, int(reply["sent"]))
        self.record.private_pending = None
        self.persist()
        log.info(
            "report agent=%s arm=%d seq=%d outcome=%s kind=%s",
            self.record.agent_id,
            arm,
            seq,
            reply["outcome"],
            kind,
        )
