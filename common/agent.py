"""One agent's local side of DE / CE / DP-MASE: sync with the global set, run the subroutine, vote.

Under CDE (`AgentSpec.report_privacy` set) the agent does not vote: when its fixed-budget run ends
it draws its one randomized report (`common.cde.randomize`), which the caller sends (`report`);
once the experiment has decided it stops, reported or not.

The same object runs inside the agent service (one activation at a time, state persisted between
activations) and inside the reference simulator.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.cde import randomize
from common.subroutines import ArmSelection, LocalParams, restore, subroutine_class


@dataclass(frozen=True)
class AgentSpec:
    n_arms: int
    subroutine: str
    params: LocalParams
    vote_drop: float = 0.0  # CE's xi: a vote is dropped before sending with this probability
    report_privacy: float | None = None  # CDE: P of its randomized report (sets e0; common.cde)


class LocalAgent:
    """Local set K_n, the votes already cast (lambda^n_k, per experiment epoch), and the subroutine."""

    def __init__(self, spec: AgentSpec, rng: np.random.Generator) -> None:
        self.spec = spec
        self.rng = rng
        self.sub: ArmSelection = subroutine_class(spec.subroutine)(spec.n_arms, spec.params, rng)
        self.voted: set[int] = set()  # decided against, sent or dropped: never decided twice
        self.epoch = 0
        self.report: int | None = None  # CDE: the randomized report, once drawn
        self.decided = False  # CDE: the experiment accepted an arm; nothing more to do

    @property
    def local_arms(self) -> list[int]:
        return list(self.sub.active)

    @property
    def reports(self) -> bool:
        return self.spec.report_privacy is not None

    @property
    def done(self) -> bool:
        return self.decided or self.sub.done

    def sync(self, remaining: Collection[int], epoch: int = 0) -> list[int]:
        """K_n := K_n & K; an empty intersection restarts on K with fresh statistics; a new epoch
        (DSER4 reset) restarts everything, votes included. Returns votes to send (rarely any).
        CDE: arms leave only when one is accepted, and then the agent stops."""
        if self.reports:
            if len(set(remaining)) < self.spec.n_arms:
                self.decided = True
            return []
        if epoch != self.epoch:
            self.epoch = epoch
            self.voted = set()
            self.sub.restart(remaining)
            return []
        gone = [a for a in self.sub.active if a not in remaining]
        if not gone:
            return []
        if len(gone) == len(self.sub.active):
            self.sub.restart(remaining)
            return []
        return self._votes(self.sub.discard(gone))

    def wants_reset(self) -> bool:
        """SER4's coin, drawn once per activation (always False for other subroutines)."""
        wants = getattr(self.sub, "wants_reset", None)
        return bool(wants()) if wants is not None else False

    def reset(self, remaining: Collection[int]) -> None:
        """SER4's local reset: statistics forgotten, K_n := K."""
        self.sub.restart(remaining)

    def select(self) -> list[int]:
        return self.sub.select()

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        eliminated = self.sub.observe(arms, rewards)
        if self.spec.report_privacy is None:
            return self._votes(eliminated)
        if self.sub.done and self.report is None:
            answer = self.sub.active[0]
            self.report = randomize(answer, self.spec.n_arms, self.spec.report_privacy, self.rng)
        return []

    def _votes(self, eliminated: list[int]) -> list[int]:
        fresh = [a for a in eliminated if a not in self.voted]
        self.voted.update(fresh)
        if self.spec.vote_drop > 0.0:
            keep = self.rng.random(len(fresh)) >= self.spec.vote_drop
            fresh = [a for a, k in zip(fresh, keep, strict=True) if k]
        return fresh

    def to_state(self) -> dict[str, Any]:
        return {
            "sub": self.sub.to_state(),
            "voted": sorted(self.voted),
            "epoch": self.epoch,
            "report": self.report,
            "decided": self.decided,
        }

    @classmethod
    def from_state(
        cls, spec: AgentSpec, state: dict[str, Any], rng: np.random.Generator
    ) -> LocalAgent:
        agent = cls(spec, np.random.default_rng(0))  # construction must not draw from `rng`
        agent.rng = rng
        agent.sub = restore(state["sub"], rng)
        agent.voted = {int(a) for a in state["voted"]}
        agent.epoch = int(state["epoch"])
        report = state.get("report")
        agent.report = None if report is None else int(report)
        agent.decided = bool(state.get("decided", False))
        return agent
