"""Activation distributions P_N over agents: who is active at the next step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.errors import ParameterError

KINDS = ("uniform", "groups", "power", "zipf")


@dataclass(frozen=True)
class Activation:
    """uniform | groups(p, q): a fraction p of agents make a fraction q of activations |
    power(alpha, gamma): P(n) ~ (n + alpha)^-gamma | zipf(s): P(n) ~ n^-s, agents n = 1..N."""

    kind: str = "uniform"
    params: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        arity = {"uniform": 0, "groups": 2, "power": 2, "zipf": 1}
        if self.kind not in arity:
            raise ParameterError("activation", self.kind, f"must be one of {', '.join(KINDS)}")
        if len(self.params) != arity[self.kind]:
            raise ParameterError(
                "activation", self.spec, f"{self.kind} takes {arity[self.kind]} parameter(s)"
            )
        if self.kind == "groups":
            p, q = self.params
            if not (0 < p < 1 and 0 < q < 1):
                raise ParameterError("activation", self.spec, "groups:P:Q needs P and Q in (0, 1)")
        if self.kind == "power":
            alpha, gamma = self.params
            if alpha < 0 or gamma <= 0:
                raise ParameterError(
                    "activation", self.spec, "power:ALPHA:GAMMA needs ALPHA >= 0, GAMMA > 0"
                )
        if self.kind == "zipf" and self.params[0] <= 0:
            raise ParameterError("activation", self.spec, "zipf:S needs S > 0")

    @classmethod
    def parse(cls, text: str) -> Activation:
        """'uniform', 'groups:0.5:0.8', 'power:0:0.8', 'zipf:1.1'."""
        kind, *rest = text.strip().split(":")
        try:
            params = tuple(float(x) for x in rest)
        except ValueError:
            raise ParameterError("activation", text, "parameters must be numbers") from None
        return cls(kind, params)

    @property
    def spec(self) -> str:
        return ":".join([self.kind, *(f"{x:g}" for x in self.params)])

    def probabilities(self, n_agents: int) -> np.ndarray:
        if n_agents < 1:
            raise ParameterError("agents", n_agents, "must be >= 1")
        n = np.arange(1, n_agents + 1, dtype=float)
        if self.kind == "uniform":
            weights = np.ones(n_agents)
        elif self.kind == "groups":
            p, q = self.params
            first = min(max(1, round(p * n_agents)), n_agents - 1) if n_agents > 1 else 1
            weights = np.where(n <= first, q / first, (1 - q) / max(1, n_agents - first))
        elif self.kind == "power":
            alpha, gamma = self.params
            weights = (n + alpha) ** -gamma
        else:
            weights = n ** -self.params[0]
        return weights / weights.sum()
