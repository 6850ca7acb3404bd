"""What one simulated experiment is, and what a trial of it reports."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import Environment
from common.errors import ParameterError
from common.votes import Elimination

STOP_RULES = ("all-agents", "global")
DEFAULT_BUDGET = 200_000_000


@dataclass(frozen=True)
class SimulationConfig:
    """stop: "all-agents" (Feraud: every agent holds one arm still in the global set) or "global"
    (Rio: the global set has one arm; an agent whose local set has one arm retires from P_N).
    budget: the most activations a trial may take before it is cut short.

    attackers: the first `attackers` agents (indices 0 .. A-1: the most active ones under the
    skewed activation distributions, so the strongest attack) are Byzantine. At their first
    activation in each experiment epoch they vote against the best arm (`attacked_arm`: argmax of
    the means at t = 0, lowest index on ties) if it is still in the global set, and against
    nothing else; they run no subroutine (no rewards, no SER4 coin) but still consume their
    activations. Under the all-agents rule only the honest agents must be settled, and `correct`
    and `best_arm` are computed on the honest agents; under the global rule an attacker retires
    after its first activation. Voting algorithms only (de, ce, dp-mase); 0 by default."""

    environment: Environment
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    n_agents: int = 32
    activation: Activation = field(default_factory=Activation)
    stop: str = "all-agents"
    budget: int = DEFAULT_BUDGET
    attackers: int = 0

    def __post_init__(self) -> None:
        if self.stop not in STOP_RULES:
            raise ParameterError("stop", self.stop, f"must be one of {', '.join(STOP_RULES)}")
        if self.budget < 1:
            raise ParameterError("budget", self.budget, "must be >= 1")
        self.algorithm.validate_for(self.environment.n_arms, self.n_agents)
        self.algorithm.local_params(self.environment.n_arms, self.n_agents, self.sigma)
        a = self.attackers
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < self.n_agents:
            raise ParameterError(
                "attackers", a, f"must be an integer in [0, agents - 1 = {self.n_agents - 1}]"
            )
        if a > 0 and not self.algorithm.votes:
            raise ParameterError(
                "attackers", a, "Byzantine agents lie in their votes: voting algorithms only"
            )

    @property
    def sigma(self) -> float | None:
        return None if self.environment.bounded else self.environment.sigma

    @property
    def threshold(self) -> int | None:
        return self.algorithm.threshold(self.environment.n_arms)

    def probabilities(self) -> np.ndarray:
        return self.activation.probabilities(self.n_agents)

    @property
    def attacked_arm(self) -> int:
        """The arm the Byzantine agents vote against: the best at t = 0, lowest index on ties."""
        return int(np.argmax(self.environment.means_at(0)))


@dataclass
class TrialResult:
    sample_complexity: int  # activations until the stop
    messages: int  # votes sent (CE: those not dropped); central: N - 1 broadcasts per activation
    best_arm: int  # 0-based
    correct: bool  # eps-optimal at the stop (all-agents rule: every agent's arm is)
    stopped_by: str  # "all-agents" | "global" | "exhausted" (no agent left to act) | "budget"
    eliminations: list[Elimination] = field(default_factory=list)
    resets: int = 0  # DSER4 global resets
    agent_votes: np.ndarray | None = None  # (N, K) bool: votes each agent sent, current epoch
    agent_arms: np.ndarray | None = None  # (N,) the arm each agent holds at the stop, -1 if several
    # Agents whose sent votes contradict the outcome: they voted against best_arm (current epoch).
    # Every Byzantine agent that voted is one; an honest agent is one only when its local
    # subroutine eliminated the arm the experiment returned.
    suspects: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """The trial as JSON; `suspects` is their COUNT (the list can hold up to N agents)."""
        return {
            "sample_complexity": self.sample_complexity,
            "messages": self.messages,
            "best_arm": self.best_arm,
            "correct": self.correct,
            "stopped_by": self.stopped_by,
            "resets": self.resets,
            "suspects": len(self.suspects),
            "eliminations": [
                {"arm": e.arm, "votes": e.votes, "time": e.time, "order": e.order, "epoch": e.epoch}
                for e in self.eliminations
            ],
        }


def majority_arm(agent_arms: np.ndarray, n_arms: int) -> int:
    held = agent_arms[agent_arms >= 0]
    if held.size == 0:
        return 0
    return int(np.bincount(held, minlength=n_arms).argmax())


def find_suspects(agent_votes: np.ndarray | None, best_arm: int) -> list[int]:
    """The agents whose sent votes contradict the final outcome: they voted against the arm the
    trial returned. Both engines report it through this helper."""
    if agent_votes is None:
        return []
    return [int(n) for n in np.flatnonzero(np.asarray(agent_votes, dtype=bool)[:, best_arm])]


def honest_outcome(
    config: SimulationConfig, agent_arms: np.ndarray, optimal: np.ndarray
) -> tuple[int, bool]:
    """(best_arm, correct) under the all-agents rule (and for the non-voting baselines): the arm
    most honest agents hold, and whether every honest agent holds an eps-optimal arm (`optimal`:
    (K,) bool at the stop). The Byzantine agents 0 .. attackers-1 hold nothing and are left out."""
    honest = agent_arms[config.attackers :]
    best = majority_arm(honest, config.environment.n_arms)
    held = honest[honest >= 0]
    correct = bool(held.size == honest.size and optimal[held].all())
    return best, correct
