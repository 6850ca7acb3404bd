"""The Arm Selection interface: driven one activation at a time, state serializable.

An activation is `select()` (which arms to play now), then `observe(arms, rewards)`, which returns
the arms eliminated locally (the agent turns them into votes). `discard(arms)` applies a global
elimination to the local set and may itself end a round, so it returns local eliminations too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from common.errors import ParameterError


@dataclass(frozen=True)
class LocalParams:
    """How one local run is parameterised.

    confidence: the local failure probability (eta for DE, eta_xi for CE, delta/N for independent
    agents, delta for the central baseline, beta for DP-MASE). sigma: None for rewards in [0, 1],
    else the sub-Gaussian scale. every_arm: Rio et al.'s model, every arm of the local set is played
    at each activation (else one arm per activation, as in Feraud et al.). pulls: CDE's T, the
    pulls per arm of its fixed-budget run, as the experiment fixed it (None: the sub-Gaussian T
    from eps, confidence and sigma; common.subroutines.fixed_budget).
    """

    epsilon: float = 0.25
    confidence: float = 0.9
    sigma: float | None = None
    every_arm: bool = False
    phi: float = 0.0
    dp_epsilon: float = 0.1
    pulls: int | None = None

    def __post_init__(self) -> None:
        if not self.epsilon > 0:
            raise ParameterError("epsilon", self.epsilon, "must be > 0")
        if not 0 < self.confidence < 1:
            raise ParameterError("confidence", self.confidence, "must be in (0, 1)")
        if self.sigma is not None and not self.sigma > 0:
            raise ParameterError("sigma", self.sigma, "must be > 0")
        if not 0 <= self.phi < 1:
            raise ParameterError("phi", self.phi, "must be in [0, 1)")
        if not self.dp_epsilon > 0:
            raise ParameterError("dp_epsilon", self.dp_epsilon, "must be > 0")
        if self.pulls is not None and (
            isinstance(self.pulls, bool) or not isinstance(self.pulls, int) or self.pulls < 1
        ):
            raise ParameterError("pulls", self.pulls, "must be an integer >= 1")


BOUNDED = "bounded"  # rewards in [0, 1] (Bernoulli among them)
SUB_GAUSSIAN = (
    "sub-gaussian"  # sigma-sub-Gaussian rewards with a stated sigma (Gaussian among them)
)


class ArmSelection(ABC):
    """Per-arm state over all K arms (numpy), and the local set `active` (sorted arm indices).

    Each subclass says what `dexp subroutines` lists: its `name`, the reward models its
    confidence bounds are valid for (`rewards`), a one-line `summary` and the `reference` it
    follows; `selectable` is False for a subroutine that only an algorithm picks (DP-MASE's)."""

    name: ClassVar[str]
    rewards: ClassVar[tuple[str, ...]] = (BOUNDED, SUB_GAUSSIAN)
    summary: ClassVar[str] = ""
    reference: ClassVar[str] = ""
    selectable: ClassVar[bool] = True

    def __init__(
        self,
        n_arms: int,
        params: LocalParams,
        rng: np.random.Generator,
        arms: Sequence[int] | None = None,
    ) -> None:
        if n_arms < 2:
            raise ParameterError("arms", n_arms, "need at least 2 arms")
        self.n_arms = n_arms
        self.active: list[int] = []
        self.params = params
        self.rng = rng
        self.restart(range(n_arms) if arms is None else arms)

    # -- the activation cycle -------------------------------------------------------------
    @abstractmethod
    def select(self) -> list[int]:
        """Arms to play at this activation (empty once done)."""

    @abstractmethod
    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        """Record the rewards; return the arms eliminated locally by them."""

    def discard(self, arms: Iterable[int]) -> list[int]:
        """Drop arms that left the global set; the caller restarts instead if none would remain."""
        gone = set(arms)
        self.active = [a for a in self.active if a not in gone]
        return self._after_discard()

    def _after_discard(self) -> list[int]:
        return []

    def restart(self, arms: Iterable[int]) -> None:
        """Fresh statistics on `arms`."""
        self.active = sorted(set(arms))
        if not self.active:
            raise ParameterError("arms", self.active, "a local set needs at least one arm")
        self.initial_arms = len(self.active)
        self.counts = np.zeros(self.n_arms, dtype=np.int64)
        self.sums = np.zeros(self.n_arms, dtype=float)
        self._restart()

    @abstractmethod
    def _restart(self) -> None: ...

    @property
    def done(self) -> bool:
        return len(self.active) <= 1

    def means(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums / np.maximum(self.counts, 1), 0.0)

    def _record(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> None:
        idx = np.asarray(arms, dtype=int)
        np.add.at(self.counts, idx, 1)
        np.add.at(self.sums, idx, np.asarray(rewards, dtype=float))

    def _eliminate(self, arms: Iterable[int]) -> list[int]:
        out = sorted(set(arms) & set(self.active))
        self.active = [a for a in self.active if a not in out]
        return out

    def _keep_only(self, arm: int) -> list[int]:
        return self._eliminate(a for a in self.active if a != arm)

    def _empirical_best(self) -> int:
        mu = self.means()
        return max(self.active, key=lambda a: (mu[a], -a))

    # -- persistence ---------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """A JSON-able snapshot (the agent service persists it); the rng is not part of it."""
        state: dict[str, Any] = {
            "name": self.name,
            "n_arms": self.n_arms,
            "params": asdict(self.params),
            "active": list(self.active),
            "initial_arms": self.initial_arms,
            "counts": self.counts.tolist(),
            "sums": self.sums.tolist(),
        }
        state.update(self._extra_state())
        return state

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra(self, state: dict[str, Any]) -> None:
        return None

    @classmethod
    def from_state(cls, state: dict[str, Any], rng: np.random.Generator) -> ArmSelection:
        # built on a throwaway generator: construction may draw (SER3's order), and the restored
        # object must continue from `rng` exactly as the original would
        obj = cls(state["n_arms"], LocalParams(**state["params"]), np.random.default_rng(0))
        obj.rng = rng
        obj.active = [int(a) for a in state["active"]]
        obj.initial_arms = int(state["initial_arms"])
        obj.counts = np.asarray(state["counts"], dtype=np.int64)
        obj.sums = np.asarray(state["sums"], dtype=float)
        obj._load_extra(state)
        return obj
