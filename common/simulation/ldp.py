"""The LDP mode's engine (common.ldp): devices report, the coordinator decides, vectorized per batch.

No device learns, so an activation needs no per-device state but the reports it has sent. Between
two publications the allocation is fixed, so the activations that bring the next `publish_batch`
reports are drawn together: a chunk of devices from P_N, each occurrence ranked among the earlier
ones of the same device in the chunk, so that a device drawn twice sends at most B reports in all
(its k-th occurrence sends iff used + k < B); the chunk is cut at the batch's last report, the
activations after it discarded (they are independent future draws, drawn again). A device whose B
reports are spent still plays an arm when activated: its activation counts, it sends nothing.

The coordinator's rule is `common.ldp.decide` itself, on the counts after each batch. A trial ends
when the leader is identified (stopped_by "global", the answer), when every device's reports are
spent (N B reports: "exhausted", no answer; best_arm is the leader) or at the budget ("budget").

Gaussian rewards are clipped to [min mean - 3 sigma, max mean + 3 sigma] and mapped to [0, 1]
(`common.ldp.unit_reward`), and the coordinator is given eps / (high - low): its guarantee is on
the clipped means. The estimates a trial returns are mapped back to the reward scale.

Byzantine devices (agents 0 .. A-1, `SimulationConfig.attackers`) send their B reports at their
first B activations: the j-th report of agent a pushes the best arm down (bit 0) when a + j is
even, else the best arm that is not eps-optimal up (bit 1), so the two halves of the attack
alternate. The coordinator widens its intervals by corrupt = f B (f = the tolerance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from common.ldp import Decision, Estimate, Lift, Mechanism, decide
from common.simulation.config import SimulationConfig, TrialResult

PUBLISH_BATCH = 10  # reports between two publications: the coordinator's DEXP_PUBLISH_BATCH default
GAUSSIAN_RANGE = 3.0  # a Gaussian reward is clipped at this many sigma beyond the extreme means
_CHUNK_SLACK = 1.25  # draw a quarter more activations than the expected need: one chunk usually
_CHUNK_MAX = 1 << 20  # the most activations drawn at once (memory)


@dataclass(frozen=True)
class RewardRange:
    """The declared range [low, high] a reward is clipped to before it is privatized."""

    low: float
    high: float

    @property
    def width(self) -> float:
        return self.high - self.low


def reward_range(config: SimulationConfig) -> RewardRange:
    """[0, 1] for Bernoulli arms; [min mean - 3 sigma, max mean + 3 sigma] for Gaussian ones."""
    env = config.environment
    if env.bounded:
        return RewardRange(0.0, 1.0)
    mu = env.means_at(0)
    spread = GAUSSIAN_RANGE * env.sigma
    return RewardRange(float(mu.min()) - spread, float(mu.max()) + spread)


def privatize(
    unit: np.ndarray, u_round: np.ndarray, u_flip: np.ndarray, mechanism: Mechanism
) -> np.ndarray:
    """`Mechanism.privatize` on arrays: the same bit from the same two uniforms, element by
    element (tests/test_ldp_simulation.py checks it against the scalar rule)."""
    bit = u_round < unit
    return np.where(u_flip < mechanism.keep, bit, ~bit).astype(np.int64)


def occurrence_ranks(agents: np.ndarray) -> np.ndarray:
    """For each entry, how many earlier entries hold the same agent (0 for its first)."""
    order = np.argsort(agents, kind="stable")
    ordered = agents[order]
    index = np.arange(agents.size)
    first = np.ones(agents.size, dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    start = np.maximum.accumulate(np.where(first, index, 0))
    ranks = np.empty(agents.size, dtype=np.int64)
    ranks[order] = index - start
    return ranks


class _Devices:
    """The fleet: P_N, each device's reports sent, and the activation mass of those with reports
    left (how many activations the next reports take)."""

    def __init__(self, config: SimulationConfig, rng: np.random.Generator) -> None:
        self.n = config.n_agents
        self.limit = config.algorithm.reports_per_agent
        self.rng = rng
        self.uniform = config.activation.kind == "uniform"
        self.p = None if self.uniform else config.probabilities()
        self.cdf = None if self.p is None else np.cumsum(self.p)
        self.used = np.zeros(self.n, dtype=np.int64)
        self.live = self.n  # devices with reports left
        self.live_mass = 1.0

    @property
    def spent(self) -> bool:
        return self.live == 0

    def draw(self, size: int) -> np.ndarray:
        if self.cdf is None:
            return self.rng.integers(0, self.n, size=size)
        picks = np.searchsorted(self.cdf, self.rng.random(size), side="right")
        return np.minimum(picks, self.n - 1)

    def chunk_size(self, need: int, room: int) -> int:
        """Activations to draw for `need` more reports, at most `room` (the budget's)."""
        rate = max(self.live_mass, 1e-12)
        return max(1, min(room, _CHUNK_MAX, math.ceil(need / rate * _CHUNK_SLACK) + 8))

    def send(self, senders: np.ndarray) -> None:
        """Count the reports of `senders` (one entry per report) and retire the spent."""
        if self.limit == 1:  # one report each: no device twice among the senders
            self.used[senders] = 1
            newly = senders
        else:
            np.add.at(self.used, senders, 1)
            newly = np.unique(senders[self.used[senders] >= self.limit])
        self.live -= newly.size
        if self.p is None:
            self.live_mass = self.live / self.n
        else:
            self.live_mass = max(self.live_mass - float(self.p[newly].sum()), 0.0)


class _Trial:
    """One trial's state: the counts the coordinator holds and its last decision."""

    def __init__(self, config: SimulationConfig, rng: np.random.Generator, record: bool) -> None:
        algo, env = config.algorithm, config.environment
        self.config = config
        self.rng = rng
        self.k = env.n_arms
        self.mechanism = Mechanism(algo.dp_epsilon)
        self.range = reward_range(config)
        self.epsilon = algo.epsilon / self.range.width
        self.corrupt = algo.tolerance * algo.reports_per_agent
        self.attackers = config.attackers
        self.best, self.bad = config.attacked_arm, config.lie_arm
        self.mu, self.bounded, self.sigma = env.means_at(0), env.bounded, env.sigma
        self.devices = _Devices(config, rng)
        self.reports = np.zeros(self.k, dtype=np.int64)
        self.ones = np.zeros(self.k, dtype=np.int64)
        self.remaining = list(range(self.k))
        self.t = 0
        self.sent = 0
        self.log: list[np.ndarray] | None = [] if record else None
        self.decision = self.decide()

    def decide(self) -> Decision:
        algo = self.config.algorithm
        return decide(
            self.reports.tolist(),
            self.ones.tolist(),
            self.remaining,
            epsilon=self.epsilon,
            delta=algo.delta,
            dp_epsilon=algo.dp_epsilon,
            corrupt=self.corrupt,
        )

    def publish(self) -> None:
        self.decision = self.decide()
        out = set(self.decision.eliminate)
        self.remaining = [a for a in self.remaining if a not in out]

    def batch(self, need: int, budget: int) -> None:
        """Activations until `need` more reports arrive, every device is spent or the budget."""
        cum = self.cumulative_allocation()
        while need > 0 and not self.devices.spent and self.t < budget:
            size = self.devices.chunk_size(need, budget - self.t)
            agents = self.devices.draw(size)
            index = self.devices.used[agents] + occurrence_ranks(agents)
            sending = np.flatnonzero(index < self.devices.limit)
            if sending.size >= need:
                sending = sending[:need]
                self.t += int(sending[-1]) + 1
            else:
                self.t += size
            if sending.size:
                self.report(agents[sending], index[sending], cum)
                need -= sending.size

    def cumulative_allocation(self) -> np.ndarray:
        """The published allocation's CDF, exactly 1 from its last arm with positive weight."""
        weights = np.asarray(self.decision.allocation, dtype=float)
        cum = np.cumsum(weights) / weights.sum()
        cum[int(np.flatnonzero(weights > 0)[-1]) :] = 1.0
        return cum

    def report(self, senders: np.ndarray, index: np.ndarray, cum: np.ndarray) -> None:
        """The reports of one chunk: honest devices play an arm of the allocation and privatize
        its reward; Byzantine ones send their attack (`index`: each report's rank for its device)."""
        m = senders.size
        u_arm, u_round, u_flip = self.rng.random((3, m))
        arms = np.searchsorted(cum, u_arm, side="right")
        bits = privatize(self.unit_rewards(arms), u_round, u_flip, self.mechanism)
        if self.attackers:
            byzantine = senders < self.attackers
            down = byzantine & ((senders + index) % 2 == 0)
            arms = np.where(down, self.best, np.where(byzantine, self.bad, arms))
            bits = np.where(down, 0, np.where(byzantine, 1, bits))
        self.reports += np.bincount(arms, minlength=self.k)
        self.ones += np.bincount(arms[bits == 1], minlength=self.k)
        self.devices.send(senders)
        self.sent += m
        if self.log is not None:
            self.log.append(np.column_stack((senders, arms, bits)))

    def unit_rewards(self, arms: np.ndarray) -> np.ndarray:
        """One reward per arm played (`Environment.draw`'s law: the means are fixed), clipped to
        the declared range and mapped to [0, 1] (`common.ldp.unit_reward`)."""
        mu = self.mu[arms]
        if self.bounded:
            return (self.rng.random(arms.size) < mu).astype(float)
        rewards = self.rng.normal(mu, self.sigma)
        return (np.clip(rewards, self.range.low, self.range.high) - self.range.low) / (
            self.range.width
        )


def run_trial(
    config: SimulationConfig,
    seed: np.random.SeedSequence | int,
    *,
    publish_batch: int = PUBLISH_BATCH,
    record: bool = False,
) -> TrialResult:
    """One trial of an ldp configuration. `record`: keep every report as (agent, arm, bit), in
    order, in `TrialResult.report_log` (for the tests: a long run holds millions)."""
    if not config.algorithm.crowd:
        raise ValueError(f"the LDP engine runs algorithm ldp, not {config.algorithm.algorithm}")
    trial = _Trial(config, np.random.default_rng(seed), record)
    budget = config.budget
    while True:
        trial.batch(publish_batch, budget)
        trial.publish()
        if trial.decision.identified:
            return _result(trial, "global")
        if trial.devices.spent:
            return _result(trial, "exhausted")
        if trial.t >= budget:
            return _result(trial, "budget")


def _result(trial: _Trial, stopped_by: str) -> TrialResult:
    config, decision = trial.config, trial.decision
    leader = decision.leader
    log = trial.log
    return TrialResult(
        sample_complexity=trial.t,
        messages=trial.sent,
        best_arm=leader,
        correct=config.environment.eps_optimal(leader, config.algorithm.epsilon, trial.t),
        stopped_by=stopped_by,
        candidates=[leader] if stopped_by == "global" else list(trial.remaining),
        estimates=tuple(_to_rewards(e, trial.range) for e in decision.estimates),
        lift=tuple(_lift_to_rewards(d, trial.range) for d in decision.lift),
        report_log=None
        if log is None
        else (np.concatenate(log) if log else np.empty((0, 3), dtype=np.int64)),
    )


def _to_rewards(e: Estimate, scale: RewardRange) -> Estimate:
    """An estimate of the [0, 1] scale the coordinator sees, on the rewards' own scale."""
    if scale.low == 0.0 and scale.high == 1.0:
        return e
    w = scale.width
    mean = None if e.mean is None else scale.low + w * e.mean
    return replace(e, mean=mean, low=scale.low + w * e.low, high=scale.low + w * e.high)


def _lift_to_rewards(d: Lift, scale: RewardRange) -> Lift:
    w = scale.width
    return replace(d, mean=None if d.mean is None else w * d.mean, low=w * d.low, high=w * d.high)
