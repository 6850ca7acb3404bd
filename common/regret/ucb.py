"""Cooperative UCB on a graph (Dubey & Pentland, AAMAS 2020), all M agents in lockstep.

Every round each agent pulls one arm; a message created by agent m' at round t reaches agent m at
round t + d(m, m') if d(m, m') <= gamma (one hop per round, forwarded gamma times).

- dubey-private-ucb (their Algorithms 1 and 2): an agent publishes (its mean of arm k + Laplace
  noise of scale n^(v/2 - 1), n) every f = ceil(1/eps_dp) pulls of arm k (common/regret/
  estimators.py). Agent m's group estimate adds to its own sum and count n' x' and n' of the
  latest publication of every agent within gamma hops, n' the count at that publication (the
  paper's Algorithm 1 sends the current count with the last published mean: a departure,
  docs/RESULTS.md section 10); the first K f rounds play t mod K, then argmax mean +
  sqrt(2 ln t / N).
- cooperative-ucb: the same with exact means published after every pull (no privacy).
- ucb1: each agent alone (gamma = 0, no noise).
- dubey-byzantine-ucb (their Algorithm 3): messages carry (arm, reward); an agent pools every
  received sample and estimates each arm with the trimmed mean at delta = 1/t^2, index
  = estimate + sigma sqrt(eps) + sqrt(sigma ln(1/delta) / |S|). `contamination` = eps of the
  estimator. Liars: a `liars` fraction of agents (a random set per trial) report, with
  probability `lie_rate`, a value from Q instead of their reward: attack "huber" is the paper's
  model (Q = a point mass at q, whatever the arm); "targeted" (outside the paper's model) reports
  0 for the arm best at the start and 1 for every other arm.
Group regret is the pseudo-regret sum_m sum_t (mu* - mu_{A_m,t}) of all agents (the paper's
R_G(T)); `honest_regret` counts the honest agents only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.errors import ParameterError
from common.regret.estimators import release_interval, release_scale, trimmed_mean
from common.regret.graphs import diameter, distances, erdos_renyi, rings

REGRET_ALGORITHMS = ("dubey-private-ucb", "cooperative-ucb", "ucb1", "dubey-byzantine-ucb")
ATTACKS = ("huber", "targeted")


@dataclass(frozen=True)
class RegretConfig:
    """means: fixed arm means, or None to draw K means uniformly in [means_low, means_high] per
    trial (the paper's "randomly initialized" arms). gamma: None = max(1, diameter // 2)."""

    algorithm: str = "dubey-private-ucb"
    n_agents: int = 200
    n_arms: int = 5
    horizon: int = 1000
    means: tuple[float, ...] | None = None
    means_low: float = 0.0
    means_high: float = 1.0
    graph_p: float = 0.1
    gamma: int | None = None
    dp_epsilon: float = 0.1
    v: float = 1.1
    contamination: float = 1e-3
    sigma: float = 0.5
    liars: float = 0.0
    lie_rate: float = 1.0
    attack: str = "huber"
    q: float = 0.0
    checkpoints: int = 20

    def __post_init__(self) -> None:
        if self.algorithm not in REGRET_ALGORITHMS:
            raise ParameterError(
                "algorithm", self.algorithm, f"must be one of {', '.join(REGRET_ALGORITHMS)}"
            )
        if self.n_agents < 1:
            raise ParameterError("agents", self.n_agents, "must be >= 1")
        if self.means is not None:
            if len(self.means) < 2 or not all(0.0 <= m <= 1.0 for m in self.means):
                raise ParameterError("means", self.means, "need >= 2 Bernoulli means in [0, 1]")
        elif self.n_arms < 2:
            raise ParameterError("arms", self.n_arms, "need at least 2 arms")
        if not 0.0 <= self.means_low < self.means_high <= 1.0:
            raise ParameterError(
                "means_range", (self.means_low, self.means_high), "need 0 <= low < high <= 1"
            )
        if self.horizon < 2:
            raise ParameterError("horizon", self.horizon, "must be >= 2")
        if not 0.0 < self.graph_p <= 1.0:
            raise ParameterError("graph_p", self.graph_p, "must be in (0, 1]")
        if self.gamma is not None and self.gamma < 0:
            raise ParameterError("gamma", self.gamma, "must be >= 0")
        if not 0.0 < self.dp_epsilon <= 1.0:
            raise ParameterError("dp_epsilon", self.dp_epsilon, "must be in (0, 1]")
        if not 1.0 < self.v < 1.5:
            raise ParameterError("v", self.v, "must be in (1, 1.5)")
        if not 0.0 <= self.contamination < 0.5:
            raise ParameterError("contamination", self.contamination, "must be in [0, 0.5)")
        if not self.sigma > 0:
            raise ParameterError("sigma", self.sigma, "must be > 0")
        if not 0.0 <= self.liars <= 1.0:
            raise ParameterError("liars", self.liars, "must be in [0, 1]")
        if not 0.0 <= self.lie_rate <= 1.0:
            raise ParameterError("lie_rate", self.lie_rate, "must be in [0, 1]")
        if self.attack not in ATTACKS:
            raise ParameterError("attack", self.attack, f"must be one of {', '.join(ATTACKS)}")
        if not 0.0 <= self.q <= 1.0:
            raise ParameterError("q", self.q, "must be in [0, 1]")
        if self.liars > 0 and self.algorithm != "dubey-byzantine-ucb":
            raise ParameterError("liars", self.liars, "liars are for dubey-byzantine-ucb only")
        if self.checkpoints < 1:
            raise ParameterError("checkpoints", self.checkpoints, "must be >= 1")

    @property
    def arms(self) -> int:
        return len(self.means) if self.means is not None else self.n_arms

    def times(self) -> np.ndarray:
        """`checkpoints` rounds t (1-based) on a geometric grid whose last point is the horizon."""
        grid = np.geomspace(1, self.horizon, self.checkpoints + 1)[1:]
        return np.unique(np.append(np.ceil(grid).astype(int), self.horizon))


@dataclass
class RegretResult:
    times: list[int]
    group_regret: list[float]  # at each checkpoint, all agents
    honest_regret: list[float]  # at each checkpoint, honest agents
    messages: int  # one per agent per neighbour per round (a broadcast on every edge)
    releases: int  # private algorithms: noisy means published
    gamma: int
    diameter: int
    # honest agents (all, when every agent lies) whose most pulled arm in the last 10% is best
    best_share: float
    means: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "times": self.times,
            "group_regret": self.group_regret,
            "honest_regret": self.honest_regret,
            "messages": self.messages,
            "releases": self.releases,
            "gamma": self.gamma,
            "diameter": self.diameter,
            "best_share": self.best_share,
            "means": self.means,
        }


def _draw_rewards(rng: np.random.Generator, means: np.ndarray, arms: np.ndarray) -> np.ndarray:
    return (rng.random(arms.size) < means[arms]).astype(float)


def _argmax_random(index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Row-wise argmax, ties broken at random (UCB's first rounds have many)."""
    noise = rng.random(index.shape) * 1e-12
    return np.argmax(index + noise, axis=1)


def run_trial(config: RegretConfig, seed: np.random.SeedSequence | int) -> RegretResult:
    rng = np.random.default_rng(seed)
    m_agents, k_arms = config.n_agents, config.arms
    if config.means is not None:
        means = np.asarray(config.means, dtype=float)
    else:
        means = rng.uniform(config.means_low, config.means_high, k_arms)
    adjacency = erdos_renyi(m_agents, config.graph_p, rng)
    dist = distances(adjacency)
    diam = diameter(dist)
    if config.algorithm == "ucb1":
        gamma = 0
    else:
        gamma = config.gamma if config.gamma is not None else max(1, diam // 2)
    hops = rings(dist, gamma)
    liars = np.zeros(m_agents, bool)
    if config.liars > 0:
        liars[rng.permutation(m_agents)[: math.ceil(config.liars * m_agents - 1e-9)]] = True
    if config.algorithm == "dubey-byzantine-ucb":
        arms_played, releases = _byzantine(config, means, hops, liars, rng)
    else:
        arms_played, releases = _private(config, means, hops, rng)
    gaps = means.max() - means
    per_round = gaps[arms_played]  # (T, M)
    cum_all = np.cumsum(per_round.sum(axis=1))
    cum_honest = np.cumsum(per_round[:, ~liars].sum(axis=1))
    times = config.times()
    judged = ~liars if (~liars).any() else np.ones(m_agents, bool)  # all liars: judge them all
    tail = arms_played[-max(1, config.horizon // 10) :, judged]
    counts = np.apply_along_axis(np.bincount, 0, tail, minlength=k_arms)
    best_share = float(np.mean(counts.argmax(axis=0) == int(np.argmax(means))))
    edges = int(adjacency.sum())  # both directions
    return RegretResult(
        times=[int(t) for t in times],
        group_regret=[float(cum_all[t - 1]) for t in times],
        honest_regret=[float(cum_honest[t - 1]) for t in times],
        messages=edges * config.horizon if gamma > 0 else 0,
        releases=releases,
        gamma=gamma,
        diameter=diam,
        best_share=best_share,
        means=[float(m) for m in means],
    )


def _private(
    config: RegretConfig, means: np.ndarray, hops: list[np.ndarray], rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """Algorithms 1 and 2 (and their two baselines): arms played (T, M), releases."""
    m_agents, k_arms, horizon = config.n_agents, means.size, config.horizon
    private = config.algorithm == "dubey-private-ucb"
    interval = release_interval(config.dp_epsilon) if private else 1
    warmup = k_arms * interval if private else k_arms
    gamma = len(hops)
    sums = np.zeros((m_agents, k_arms))
    pulls = np.zeros((m_agents, k_arms))
    pub_n = np.zeros((gamma + 1, m_agents, k_arms))  # ring buffer of publications by round
    pub_s = np.zeros((gamma + 1, m_agents, k_arms))  # n' x' (count times published mean)
    cur_n = np.zeros((m_agents, k_arms))
    cur_s = np.zeros((m_agents, k_arms))
    played = np.zeros((horizon, m_agents), np.int64)
    releases = 0
    rows = np.arange(m_agents)
    for t in range(1, horizon + 1):
        if t <= warmup:
            arms = np.full(m_agents, (t - 1) % k_arms)
        else:
            n_group = pulls.copy()
            s_group = sums.copy()
            for d, ring in enumerate(hops, start=1):
                slot = (t - d) % (gamma + 1)
                n_group += ring @ pub_n[slot]
                s_group += ring @ pub_s[slot]
            with np.errstate(divide="ignore", invalid="ignore"):
                index = s_group / n_group + np.sqrt(2.0 * math.log(t) / n_group)
            index[n_group == 0] = np.inf
            arms = _argmax_random(index, rng)
        rewards = _draw_rewards(rng, means, arms)
        sums[rows, arms] += rewards
        pulls[rows, arms] += 1
        n_now = pulls[rows, arms]
        due = n_now % interval == 0
        if due.any():
            who, arm = rows[due], arms[due]
            mean = sums[who, arm] / n_now[due]
            if private:
                mean = mean + rng.laplace(0.0, release_scale(n_now[due], config.v))
            cur_n[who, arm] = n_now[due]
            cur_s[who, arm] = n_now[due] * mean
            releases += int(due.sum())
        slot = t % (gamma + 1)
        pub_n[slot] = cur_n
        pub_s[slot] = cur_s
        played[t - 1] = arms
    return played, releases


def _values(config: RegretConfig) -> np.ndarray:
    return np.unique(np.array([0.0, 1.0, config.q]))


def _byzantine(
    config: RegretConfig,
    means: np.ndarray,
    hops: list[np.ndarray],
    liars: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, int]:
    """Algorithm 3: per (agent, arm) histograms of the pooled samples' values, split into the
    X and Y halves by a fair coin per message (independent of the value)."""
    m_agents, k_arms, horizon = config.n_agents, means.size, config.horizon
    values = _values(config)
    n_values = values.size
    gamma = len(hops)
    width = k_arms * n_values * 2
    hist = np.zeros((m_agents, width))
    ring_buf = np.zeros((gamma + 1, m_agents, width))
    played = np.zeros((horizon, m_agents), np.int64)
    rows = np.arange(m_agents)
    attacked = int(np.argmax(means))
    for t in range(1, horizon + 1):
        if t <= k_arms:
            arms = np.full(m_agents, t - 1)
        else:
            h = hist.reshape(m_agents, k_arms, n_values, 2)
            delta = 1.0 / t**2
            est = trimmed_mean(values, h[..., 0], h[..., 1], config.contamination, delta)
            size = h.sum(axis=(2, 3))
            bonus = config.sigma * math.sqrt(config.contamination) + np.sqrt(
                config.sigma * math.log(1.0 / delta) / np.maximum(size, 1)
            )
            index = np.where(size > 0, est + bonus, np.inf)
            arms = _argmax_random(index, rng)
        rewards = _draw_rewards(rng, means, arms)
        reported = rewards.copy()
        lying = liars & (rng.random(m_agents) < config.lie_rate)
        if lying.any():
            if config.attack == "huber":
                reported[lying] = config.q
            else:
                reported[lying] = np.where(arms[lying] == attacked, 0.0, 1.0)
        value = np.searchsorted(values, reported)
        half = rng.integers(0, 2, m_agents)
        message = np.zeros((m_agents, width))
        message[rows, (arms * n_values + value) * 2 + half] = 1.0
        incoming = message.copy()  # its own sample, at once
        for d, ring in enumerate(hops, start=1):
            if t - d >= 1:
                incoming += ring @ ring_buf[(t - d) % (gamma + 1)]
        hist += incoming
        ring_buf[t % (gamma + 1)] = message
        played[t - 1] = arms
    return played, 0


def run_trials(config: RegretConfig, trials: int, seed: int = 0) -> list[RegretResult]:
    if trials < 1:
        raise ParameterError("trials", trials, "must be >= 1")
    return [run_trial(config, s) for s in np.random.SeedSequence(seed).spawn(trials)]
