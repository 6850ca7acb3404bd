"""The DP audit of the LDP mode: a distinguishing attack on everything one device sends.

A device's output is its B reports (common/ldp.py, `Mechanism.privatize`, the product's own
function). Two neighbouring reward histories are compared: B rewards of 0 against B rewards of 1
(the whole history changed: the claim is B dp_epsilon, `user_privacy`), and a history that differs
in its first reward only (the claim per report, dp_epsilon). The attack of common/dp_audit.py
selects the pair and the event on selection runs and bounds epsilon from below on fresh runs.

`noise_multiplier` X runs the mechanism at dp_epsilon / X: X = 1 is the product; X < 1 cuts the
noise, and an audit with power must then find a bound above the claim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common.dp_audit import Audited, SampleJob
from common.errors import ParameterError
from common.ldp import Mechanism, check_dp_epsilon, check_reports_per_agent

PAIRS = ("every reward: 0 ... 0 against 1 ... 1", "the first reward only: 0 against 1")
STATISTICS = ("the number of ones reported", "the first report's bit")


@dataclass(frozen=True)
class LDPAudit(Audited):
    dp_epsilon: float
    reports_per_agent: int = 1
    noise_multiplier: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        check_dp_epsilon(self.dp_epsilon)
        check_reports_per_agent(self.reports_per_agent)
        if not 0.0 < self.noise_multiplier <= 1e3:
            raise ParameterError("noise_multiplier", self.noise_multiplier, "must be in (0, 1000]")

    @property
    def n_pairs(self) -> int:
        return len(PAIRS)

    @property
    def mechanism(self) -> Mechanism:
        return Mechanism(self.dp_epsilon / self.noise_multiplier)

    @property
    def claim(self) -> float:
        """What the product claims for a device's whole output: B dp_epsilon."""
        return self.reports_per_agent * self.dp_epsilon

    def history(self, pair: int, side: int) -> np.ndarray:
        """The rewards of side `side` of pair `pair` (side 0 is all zeros)."""
        rewards = np.zeros(self.reports_per_agent)
        if side == 1:
            rewards[: self.reports_per_agent if pair == 0 else 1] = 1.0
        return rewards

    def sample(self, job: SampleJob) -> np.ndarray:
        """The statistics of the job's runs; run i's coins come from a Generator seeded by
        (seed; stage, pair, side, i), so a run does not depend on how runs are split."""
        mechanism = self.mechanism
        rewards = self.history(job.pair, job.side)
        out = np.empty((job.count, len(STATISTICS)), dtype=np.int64)
        for row, i in enumerate(range(job.start, job.start + job.count)):
            key = (job.stage, job.pair, job.side, i)
            rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=key))
            coins = rng.random((len(rewards), 2))
            bits = [
                mechanism.privatize(float(r), a, b)
                for r, (a, b) in zip(rewards, coins, strict=True)
            ]
            out[row] = (sum(bits), bits[0])
        return out
