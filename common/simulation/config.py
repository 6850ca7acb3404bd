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
    budget: the most activations a trial may take before it is cut short."""

    environment: Environment
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    n_agents: int = 32
    activation: Activation = field(default_factory=Activation)
    stop: str = "all-agents"
    budget: int = DEFAULT_BUDGET

    def __post_init__(self) -> None:
        if self.stop not in STOP_RULES:
            raise ParameterError("stop", self.stop, f"must be one of {', '.join(STOP_RULES)}")
        if self.budget < 1:
            raise ParameterError("budget", self.budget, "must be >= 1")
        self.algorithm.validate_for(self.environment.n_arms, self.n_agents)
        self.algorithm.local_params(self.environment.n_arms, self.n_agents, self.sigma)

    @property
    def sigma(self) -> float | None:
        return None if self.environment.bounded else self.environment.sigma

    @property
    def threshold(self) -> int | None:
        return self.algorithm.threshold(self.environment.n_arms)

    def probabilities(self) -> np.ndarray:
        return self.activation.probabilities(self.n_agents)


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

    def to_json(self) -> dict[str, object]:
        return {
            "sample_complexity": self.sample_complexity,
            "messages": self.messages,
            "best_arm": self.best_arm,
            "correct": self.correct,
            "stopped_by": self.stopped_by,
            "resets": self.resets,
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
