"""An agent an application can embed: choose an arm, observe its reward, vote, follow the global set.

Rewards and local means stay in this object. What leaves it is a vote: an arm index (and the reset
epoch it belongs to), sent to the coordinator.

    view = GlobalView.fetch(client, "demo")
    agent = Agent.enroll(client, view, secret="...", rng=np.random.default_rng())
    arms = agent.choose()                   # arms to play now
    agent.observe(arms, rewards_of(arms))   # may send votes
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.client import CoordinatorClient
from common.agent import AgentSpec, LocalAgent
from common.algorithms import AlgorithmConfig

log = logging.getLogger("dexp.agent")


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

    @classmethod
    def fetch(cls, client: CoordinatorClient, experiment: str) -> GlobalView:
        state = client.experiment(experiment)
        view = cls(
            experiment,
            list(state["arms"]),
            AlgorithmConfig(**state["params"]),
            state.get("sigma"),
            int(state["threshold"]),
        )
        view.update(state)
        return view

    def update(self, state: dict[str, Any]) -> bool:
        """Take a newer state (a GET of the experiment); True if the global set changed."""
        epoch, version = int(state["epoch"]), int(state["version"])
        if (epoch, version) <= (self.epoch, self.version):
            return False
        self.epoch, self.version = epoch, version
        self.remaining = frozenset(int(a) for a in state["remaining_arms"])
        return True

    def stale(self, version: int, epoch: int) -> bool:
        return (epoch, version) > (self.epoch, self.version)

    def refresh(self, client: CoordinatorClient) -> bool:
        return self.update(client.experiment(self.experiment))

    def agent_spec(self) -> AgentSpec:
        params = self.config.local_params(len(self.arms), 1, self.sigma)
        return AgentSpec(
            len(self.arms), self.config.local_subroutine, params, self.config.vote_drop
        )

    @property
    def identified(self) -> bool:
        return len(self.remaining) == 1


class Agent:
    def __init__(
        self,
        client: CoordinatorClient,
        view: GlobalView,
        agent_id: str,
        token: str,
        rng: np.random.Generator,
        voted: Sequence[int] = (),
    ) -> None:
        self.client = client
        self.view = view
        self.agent_id = agent_id
        self.token = token
        self.local = LocalAgent(view.agent_spec(), rng)
        self.local.epoch = view.epoch
        # Votes already on record (e.g. after a restart): never sent again.
        self.local.voted.update(voted)
        self.votes_sent = 0

    @classmethod
    def enroll(
        cls, client: CoordinatorClient, view: GlobalView, secret: str, rng: np.random.Generator
    ) -> Agent:
        reply = client.enroll(secret, view.experiment)
        return cls(client, view, reply["agent_id"], reply["token"], rng)

    def choose(self) -> list[int]:
        """Sync with the global set (maybe voting, or resetting under DSER4); the arms to play."""
        self._send(self.local.sync(self.view.remaining, self.view.epoch))
        if self.local.wants_reset():
            if self.view.config.global_reset:
                self.client.reset(self.view.experiment, self.token, self.view.epoch)
                self.view.refresh(self.client)
                self.local.sync(self.view.remaining, self.view.epoch)
            else:
                self.local.reset(self.view.remaining)
        return self.local.select()

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        """Feed the rewards of the arms played; returns the votes sent."""
        votes = self.local.observe(arms, rewards)
        self._send(votes)
        return votes

    def _send(self, votes: list[int]) -> None:
        for arm in votes:
            reply = self.client.vote(self.view.experiment, self.token, arm, self.view.epoch)
            self.votes_sent += 1
            if self.view.stale(int(reply["version"]), int(reply["epoch"])):
                self.view.refresh(self.client)
