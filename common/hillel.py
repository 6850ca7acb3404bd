"""Hillel, Karnin, Koren, Lempel and Somekh (NIPS 2013): k synchronous players explore together.

Not DE: every player pulls one arm per time step (no activation process), and the players share
what they learned in communication rounds. `time` is the paper's measure, pulls per player; the
speed-up of k players is the serial time over it.

- hillel-one-round (their Algorithms 1 and 2): each player runs a serial algorithm A (Successive
  Elimination, the paper's example of A, at confidence 2/3) on a random subset of
  min(n, ceil(c n / sqrt(k))) arms (c = 6 for best-arm identification, epsilon = 0; c = 12 with
  epsilon > 0) for at most T/2 pulls, then pulls its pick T/2 times and sends (pick, mean) once.
  epsilon = 0: the arms picked by more than sqrt(k) players compete on their pooled means.
  epsilon > 0: Algorithm 2 run at accuracy epsilon/2, so that its 2 (epsilon/2)-best answer is
  epsilon-best: A(A_j, epsilon/2), and the arms with k_i T/2 >= (4/epsilon^2) ln(12 n) samples
  compete. With no arm in the running the answer is the most picked arm (the paper: arbitrary).
  Guarantee (Theorems 3.1 and 3.5): correct with probability >= 2/3 once T is large enough, for
  6 <= sqrt(k) <= n (24 <= sqrt(k) with epsilon > 0). Amplified (Theorem 3.2): `repeats` = R
  independent runs in parallel, one message of R pairs, the answer most runs gave; for
  epsilon = 0, P(wrong) <= exp(-R/18) (Hoeffding on R runs each right w.p. >= 2/3), hence
  R = ceil(18 ln(1/delta)) for delta < 1/3. With epsilon > 0 several epsilon-best arms can split
  the vote, and no such bound is proved: the measured rate is all there is.
- hillel-multi-round (their Algorithm 3): round r, eps_r = 2^-r; every player samples every
  surviving arm up to t_r = ceil(c (2 / (k eps_r^2)) ln(4 n r^2 / delta)) pulls (c = 1 for rewards
  in [0, 1], 4 sigma^2 for sigma-sub-Gaussian rewards: the same Hoeffding step), the players share
  their means, and the arms below the best pooled mean minus eps_r leave; it stops once
  eps_r <= epsilon/2 or one arm is left. Guarantee (Theorem 4.1): epsilon-best with probability
  >= 1 - delta, in at most 1 + ceil(log2(1/epsilon)) rounds.

Every player has the same number of pulls of each surviving arm, so the pooled mean of Algorithm 3
is the mean of all pulls: the simulator draws an arm's k players' rewards of a round as one sum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from common.algorithms import HILLEL_ALGORITHMS
from common.environments import Environment
from common.errors import ParameterError

EXPLORE_CONFIDENCE = 1.0 / 3.0  # A's failure probability in Algorithms 1 and 2
MAX_ROUNDS = 64  # multi-round with epsilon = 0 and two equal best arms would never stop


def repeats_for(delta: float) -> int:
    """Theorem 3.2's amplification: R runs, majority vote; exp(-R/18) <= delta."""
    if delta >= EXPLORE_CONFIDENCE:
        return 1
    return math.ceil(18.0 * math.log(1.0 / delta))


@dataclass(frozen=True)
class HillelConfig:
    """horizon: T, pulls per player of one run (one-round only). repeats: None = repeats_for(delta).
    max_time: the most pulls per player the multi-round algorithm may take (None: no cap)."""

    environment: Environment
    algorithm: str = "hillel-multi-round"
    n_agents: int = 64
    epsilon: float = 0.25
    delta: float = 0.05
    horizon: int | None = None
    repeats: int | None = None
    max_time: int | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in HILLEL_ALGORITHMS:
            raise ParameterError(
                "algorithm", self.algorithm, f"must be one of {', '.join(HILLEL_ALGORITHMS)}"
            )
        if self.environment.drift:
            raise ParameterError(
                "drift",
                list(self.environment.drift),
                "Hillel et al.'s players pull in lockstep from stationary arms: no drift",
            )
        if isinstance(self.n_agents, bool) or self.n_agents < 1:
            raise ParameterError("agents", self.n_agents, "must be >= 1")
        if not (0.0 <= self.epsilon <= (1.0 if self.environment.bounded else math.inf)):
            raise ParameterError("epsilon", self.epsilon, "must be >= 0 (and <= 1 for [0, 1])")
        if not 0.0 < self.delta < 1.0:
            raise ParameterError("delta", self.delta, "must be in (0, 1)")
        if self.algorithm == "hillel-one-round":
            if self.horizon is None:
                raise ParameterError(
                    "horizon",
                    None,
                    "hillel-one-round needs --horizon T (pulls per agent of one run); "
                    "`dexp reproduce hillel-speedup` finds the smallest that works",
                )
            if self.horizon < 2:
                raise ParameterError("horizon", self.horizon, "must be >= 2 (explore + exploit)")
            if self.repeats is not None and self.repeats < 1:
                raise ParameterError("repeats", self.repeats, "must be >= 1")
        else:
            if self.horizon is not None or self.repeats is not None:
                raise ParameterError(
                    "horizon" if self.horizon is not None else "repeats",
                    self.horizon if self.horizon is not None else self.repeats,
                    "hillel-multi-round takes no horizon or repeats (its rounds fix its pulls)",
                )
            if self.max_time is not None and self.max_time < 1:
                raise ParameterError("max_time", self.max_time, "must be >= 1")

    @property
    def runs(self) -> int:
        if self.algorithm != "hillel-one-round":
            return 1
        return self.repeats if self.repeats is not None else repeats_for(self.delta)

    @property
    def subset_size(self) -> int:
        """|A_j| = min(n, ceil(c n / sqrt(k))): c = 6 (epsilon = 0) or 12 (Algorithm 2)."""
        n, k = self.environment.n_arms, self.n_agents
        c = 6.0 if self.epsilon == 0 else 12.0
        return min(n, math.ceil(c * n / math.sqrt(k) - 1e-9))

    def warnings(self) -> list[str]:
        """Outside the theorems' range the algorithms still run, but nothing is guaranteed."""
        if self.algorithm != "hillel-one-round":
            return []
        root = math.sqrt(self.n_agents)
        low = 6 if self.epsilon == 0 else 24
        if low <= root <= self.environment.n_arms:
            return []
        return [
            f"sqrt(agents) = {root:.3g} is outside [{low}, n = {self.environment.n_arms}]: "
            "the one-round theorem does not apply here (measured only)"
        ]


@dataclass
class HillelResult:
    time: int  # pulls per player (the most any player made)
    sample_complexity: int  # pulls of all players
    messages: int  # one per player per communication round
    rounds: int  # communication rounds
    best_arm: int
    correct: bool  # epsilon-optimal (epsilon = 0: the best arm)
    stopped_by: str  # "done" | "budget" (multi-round's max_time)
    survivors: list[int] = field(default_factory=list)  # multi-round: S_r at the stop

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            "sample_complexity": self.sample_complexity,
            "messages": self.messages,
            "rounds": self.rounds,
            "best_arm": self.best_arm,
            "correct": self.correct,
            "stopped_by": self.stopped_by,
            "survivors": list(self.survivors),
        }


# ----------------------------------------------------------------------------- one round


@njit(cache=True)
def _radius(rounds, n_arms, confidence, sigma, bounded):
    """common.subroutines.radius.elimination_radius, compiled (tests compare the two)."""
    level = np.log(4.0 * n_arms * rounds * rounds / confidence)
    if bounded:
        return np.sqrt(level / (2.0 * rounds))
    return sigma * np.sqrt(2.0 * level / rounds)


@njit(cache=True)
def _explore(seed, means, subsets, half, confidence, eps_a, sigma, bounded, picks, used):
    """Successive Elimination of every player on its subset, at most `half` pulls each; a round
    that does not fit in what is left is not started. picks[j]: the survivor, or the empirical
    best of the survivors when the budget ran out first; used[j]: the pulls it took."""
    np.random.seed(seed)
    k, m = subsets.shape
    sums = np.zeros(m)
    alive = np.zeros(m, np.bool_)
    for j in range(k):
        sums[:] = 0.0
        alive[:] = True
        n_alive = m
        rounds = 0
        pulls = 0
        while n_alive > 1 and pulls + n_alive <= half:
            rounds += 1
            for i in range(m):
                if alive[i]:
                    mu = means[subsets[j, i]]
                    if bounded:
                        sums[i] += 1.0 if np.random.random() < mu else 0.0
                    else:
                        sums[i] += np.random.normal(mu, sigma)
            pulls += n_alive
            a = _radius(rounds, m, confidence, sigma, bounded)
            best = -np.inf
            for i in range(m):
                if alive[i] and sums[i] / rounds > best:
                    best = sums[i] / rounds
            for i in range(m):
                if alive[i] and best - sums[i] / rounds >= 2.0 * a:
                    alive[i] = False
                    n_alive -= 1
            if eps_a > 0 and a <= eps_a / 2.0:
                break
        pick = -1
        top = -np.inf
        for i in range(m):
            if alive[i] and (rounds == 0 or sums[i] / rounds > top):
                top = sums[i] / max(rounds, 1)
                pick = i
        picks[j] = subsets[j, pick]
        used[j] = pulls


def _one_run(config: HillelConfig, rng: np.random.Generator) -> tuple[int, int, int]:
    """One run of Algorithm 1 (epsilon = 0) or 2: (answer, most pulls of a player, all pulls)."""
    env = config.environment
    n, k, horizon = env.n_arms, config.n_agents, config.horizon
    assert horizon is not None
    means = np.asarray(env.means, dtype=float)
    m = config.subset_size
    subsets = np.argsort(rng.random((k, n)), axis=1)[:, :m].astype(np.int64)
    half = horizon // 2
    picks = np.zeros(k, np.int64)
    used = np.zeros(k, np.int64)
    eps_a = config.epsilon / 2.0
    seed = int(rng.integers(0, 2**31 - 1))
    _explore(seed, means, subsets, half, EXPLORE_CONFIDENCE, eps_a, env.sigma, env.bounded,
             picks, used)  # fmt: skip
    exploit = horizon - half
    if env.bounded:
        q = rng.binomial(exploit, means[picks]) / exploit
    else:
        q = rng.normal(means[picks], env.sigma / math.sqrt(exploit))
    counts = np.bincount(picks, minlength=n)
    pooled = np.bincount(picks, weights=q, minlength=n) / np.maximum(counts, 1)
    if config.epsilon == 0:
        running = counts > math.sqrt(k)
    else:
        running = counts * exploit >= (4.0 / config.epsilon**2) * math.log(12.0 * n)
    if running.any():
        answer = int(np.flatnonzero(running)[np.argmax(pooled[running])])
    else:
        answer = int(np.argmax(counts))
    pulls = used + exploit
    return answer, int(pulls.max()), int(pulls.sum())


def serial_trial(
    environment: Environment, epsilon: float, horizon: int, seed: np.random.SeedSequence | int
) -> tuple[int, bool, int]:
    """The one-round speed-up's baseline: one player runs A (Successive Elimination at
    confidence 2/3, accuracy epsilon) on all arms with T pulls. (answer, correct, pulls)."""
    rng = np.random.default_rng(seed)
    n = environment.n_arms
    picks = np.zeros(1, np.int64)
    used = np.zeros(1, np.int64)
    subsets = np.arange(n, dtype=np.int64).reshape(1, n)
    means = np.asarray(environment.means, dtype=float)
    _explore(int(rng.integers(0, 2**31 - 1)), means, subsets, horizon, EXPLORE_CONFIDENCE,
             epsilon, environment.sigma, environment.bounded, picks, used)  # fmt: skip
    answer = int(picks[0])
    return answer, environment.eps_optimal(answer, epsilon), int(used[0])


def _one_round(config: HillelConfig, rng: np.random.Generator) -> HillelResult:
    n = config.environment.n_arms
    answers, time, total = [], 0, 0
    for _ in range(config.runs):  # the R runs are parallel: a player's pulls add up
        answer, most, pulls = _one_run(config, rng)
        answers.append(answer)
        time += most
        total += pulls
    best = int(np.argmax(np.bincount(answers, minlength=n)))
    return HillelResult(
        time=time,
        sample_complexity=total,
        messages=config.n_agents,
        rounds=1,
        best_arm=best,
        correct=config.environment.eps_optimal(best, config.epsilon),
        stopped_by="done",
    )


# ----------------------------------------------------------------------------- multi round


def round_pulls(config: HillelConfig, r: int) -> int:
    """t_r: each player's pulls of each surviving arm after round r (all rounds so far)."""
    env, k = config.environment, config.n_agents
    scale = 1.0 if env.bounded else 4.0 * env.sigma**2
    eps_r = 2.0**-r
    return math.ceil(
        scale * 2.0 / (k * eps_r**2) * math.log(4.0 * env.n_arms * r * r / config.delta) - 1e-9
    )


def _multi_round(config: HillelConfig, rng: np.random.Generator) -> HillelResult:
    env, k = config.environment, config.n_agents
    means = np.asarray(env.means, dtype=float)
    survivors = np.arange(env.n_arms)
    sums = np.zeros(env.n_arms)
    t_prev, time, rounds = 0, 0, 0
    stopped = "done"
    while True:
        r = rounds + 1
        t_r = max(round_pulls(config, r), t_prev)
        extra = t_r - t_prev
        if config.max_time is not None and time + extra * survivors.size > config.max_time:
            stopped = "budget"
            break
        rounds = r
        draws = k * extra
        if env.bounded:
            sums[survivors] += rng.binomial(draws, means[survivors])
        else:
            sums[survivors] += rng.normal(draws * means[survivors], env.sigma * math.sqrt(draws))
        time += extra * survivors.size
        t_prev = t_r
        pooled = sums[survivors] / (k * t_r)
        survivors = survivors[pooled >= pooled.max() - 2.0**-r]
        if 2.0**-r <= config.epsilon / 2.0 or survivors.size == 1 or rounds >= MAX_ROUNDS:
            break
    pooled_all = sums / max(k * t_prev, 1)
    best = int(survivors[np.argmax(pooled_all[survivors])])
    return HillelResult(
        time=time,
        sample_complexity=time * k,
        messages=rounds * k,
        rounds=rounds,
        best_arm=best,
        correct=env.eps_optimal(best, config.epsilon),
        stopped_by=stopped,
        survivors=[int(a) for a in survivors],
    )


def run_trial(config: HillelConfig, seed: np.random.SeedSequence | int) -> HillelResult:
    rng = np.random.default_rng(seed)
    if config.algorithm == "hillel-one-round":
        return _one_round(config, rng)
    return _multi_round(config, rng)


def run_trials(config: HillelConfig, trials: int, seed: int = 0) -> list[HillelResult]:
    """Trial i of seed s is the same whatever the number of trials (SeedSequence.spawn)."""
    if trials < 1:
        raise ParameterError("trials", trials, "must be >= 1")
    return [run_trial(config, s) for s in np.random.SeedSequence(seed).spawn(trials)]
