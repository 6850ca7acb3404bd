"""Empirical differential-privacy audit: a distinguishing attack turned into a lower bound on eps.

An eps-DP mechanism M satisfies P[M(D1) in S] <= e^eps P[M(D0) in S] for every event S and every
pair of neighbouring datasets (D0, D1). Running M many times on both datasets and bounding the two
probabilities with Clopper-Pearson intervals gives log(p1_low / p0_high), a lower bound on eps
that holds with the stated confidence. A bound above the claimed eps is evidence of a privacy bug;
a bound far below it only says the attack is weak (auditing proves nothing in that direction).

The protocol (`distinguishing_attack`): SELECTION runs choose the neighbouring pair, the statistic,
the threshold and the direction that maximise the bound on those runs; FRESH EVALUATION runs then
evaluate that single test. One test on fresh data needs no multiple-testing correction.

The DP-MASE harness (`DPMASEAudit`) drives the product's own `DPSuccessiveElimination` on fixed
reward sequences, with its noise multiplied by X (X = 1: the product as it is; the noise then gives eps = E / X),
on worst-case "canary" datasets whose epoch-1 gap sits near the elimination boundary. Pure: no I/O.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common.environments import Environment
from common.errors import ParameterError
from common.stats import clopper_pearson
from common.subroutines.base import LocalParams
from common.subroutines.dp import DPSuccessiveElimination
from common.subroutines.radius import dp_elimination_gap, dp_epoch_length

SELECTION = 0  # stage of a SampleJob: the runs that choose the test
EVALUATION = 1  # the fresh runs that the final bound is computed on
_DATA = 2  # seed stream of the fixed datasets

# The datasets are arrays of K x L rewards (two of them in memory per job); beyond this the
# run would need gigabytes, so --max-epochs is refused instead.
MAX_REWARDS = 30_000_000


# ----------------------------------------------------------------------------- the bound


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ParameterError("confidence", confidence, "must be in (0, 1)")


def epsilon_lower_bound(k1: int, n1: int, k0: int, n0: int, confidence: float = 0.95) -> float:
    """log(p1_low / p0_high) for an event seen k1/n1 times under D1 and k0/n0 under D0; 0 if not
    positive.

    Each one-sided Clopper-Pearson bound holds with probability >= 1 - alpha/2 (alpha = 1 -
    confidence), so both hold together with probability >= confidence whatever the dependence
    between the two samples. A two-sided interval at level L is one-sided (1 + L) / 2 on each side,
    so L = confidence.
    """
    _check_confidence(confidence)
    p1_low = clopper_pearson(k1, n1, confidence)[0]
    p0_high = clopper_pearson(k0, n0, confidence)[1]
    if not p1_low > 0:
        return 0.0
    return max(0.0, math.log(p1_low / p0_high))


def epsilon_lower_bounds(
    k1: np.ndarray, n1: int, k0: np.ndarray, n0: int, confidence: float = 0.95
) -> np.ndarray:
    """`epsilon_lower_bound` over arrays of counts at once (the selection scores thousands)."""
    from scipy.stats import beta

    _check_confidence(confidence)
    k1 = np.asarray(k1, dtype=float)
    k0 = np.asarray(k0, dtype=float)
    tail = (1.0 - confidence) / 2
    low = np.where(k1 > 0, beta.ppf(tail, np.maximum(k1, 1.0), n1 - k1 + 1.0), 0.0)
    high = np.where(k0 < n0, beta.ppf(1.0 - tail, k0 + 1.0, np.maximum(n0 - k0, 1.0)), 1.0)
    with np.errstate(divide="ignore"):
        bounds = np.log(np.where(low > 0, low, 1.0) / high)
    return np.where(low > 0, np.maximum(bounds, 0.0), 0.0)


# ----------------------------------------------------------------------------- a known mechanism


def randomized_response(bits: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Each bit kept with probability e^eps / (1 + e^eps), else flipped: exactly eps-DP, so an
    audit of it must not exceed eps and a strong one should come close."""
    if not epsilon >= 0:
        raise ParameterError("epsilon", epsilon, "must be >= 0")
    bits = np.asarray(bits, dtype=np.int64)
    keep = rng.random(bits.shape) < 1.0 / (1.0 + math.exp(-epsilon))
    return np.where(keep, bits, 1 - bits)


# ----------------------------------------------------------------------------- the protocol


@dataclass(frozen=True)
class SampleJob:
    """Runs start .. start+count-1 of the mechanism on one side (0: D, 1: its neighbour D') of
    one candidate pair. Run i's randomness depends on (stage, pair, side, i) only, so results do
    not depend on how runs are split into jobs or workers."""

    pair: int
    side: int
    stage: int
    start: int
    count: int


# A sampler returns the statistics of the job's runs: shape (count, n_statistics).
Sampler = Callable[[SampleJob], np.ndarray]
MapFunction = Callable[[Sampler, Sequence[SampleJob]], Iterable[np.ndarray]]


@dataclass(frozen=True)
class ThresholdTest:
    """The event {T_statistic > threshold} (above) or {T_statistic <= threshold}, with side
    `numerator` playing D1 (the dataset whose hit rate must be e^eps times the other's)."""

    pair: int
    statistic: int
    threshold: float
    above: bool
    numerator: int

    def hits(self, outputs: np.ndarray) -> int:
        column = outputs[:, self.statistic]
        event = column > self.threshold if self.above else column <= self.threshold
        return int(event.sum())


@dataclass(frozen=True)
class Selection:
    test: ThresholdTest
    bound: float  # on the selection runs (optimistic: the maximum over every candidate test)
    tests_compared: int


@dataclass(frozen=True)
class AttackResult:
    selection: Selection
    k1: int
    n1: int
    k0: int
    n0: int
    confidence: float
    p1_ci: tuple[float, float] = field(init=False)
    p0_ci: tuple[float, float] = field(init=False)
    bound: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "p1_ci", clopper_pearson(self.k1, self.n1, self.confidence))
        object.__setattr__(self, "p0_ci", clopper_pearson(self.k0, self.n0, self.confidence))
        bound = epsilon_lower_bound(self.k1, self.n1, self.k0, self.n0, self.confidence)
        object.__setattr__(self, "bound", bound)

    @property
    def test(self) -> ThresholdTest:
        return self.selection.test

    @property
    def p1(self) -> float:
        return self.k1 / self.n1

    @property
    def p0(self) -> float:
        return self.k0 / self.n0


def select_test(
    samples: Sequence[tuple[np.ndarray, np.ndarray]], confidence: float = 0.95
) -> Selection:
    """The threshold test with the largest bound on these (selection) runs, over pairs,
    statistics, thresholds, both events and both directions. Ties, e.g. when every bound is 0,
    go to the largest smoothed likelihood ratio, so that the fresh runs still test the most
    promising event. `samples[p]` holds the statistics of pair p's runs on D and on D'."""
    best: tuple[float, float] | None = None
    chosen: ThresholdTest | None = None
    compared = 0
    for pair, (a, b) in enumerate(samples):
        n = (len(a), len(b))
        for statistic in range(a.shape[1]):
            values = np.unique(np.concatenate([a[:, statistic], b[:, statistic]]))[:-1]
            if values.size == 0:
                continue  # constant statistic: no event separates anything
            at_most = [
                np.searchsorted(np.sort(s[:, statistic]), values, side="right") for s in (a, b)
            ]
            for above in (False, True):
                hits = [n[i] - at_most[i] if above else at_most[i] for i in (0, 1)]
                for numerator in (0, 1):
                    k1, k0 = hits[numerator], hits[1 - numerator]
                    n1, n0 = n[numerator], n[1 - numerator]
                    bounds = epsilon_lower_bounds(k1, n1, k0, n0, confidence)
                    ratio = np.log((k1 + 0.5) / (n1 + 1.0)) - np.log((k0 + 0.5) / (n0 + 1.0))
                    compared += values.size
                    i = int(np.lexsort((-ratio, -bounds))[0])
                    key = (float(bounds[i]), float(ratio[i]))
                    if best is None or key > best:
                        best = key
                        chosen = ThresholdTest(pair, statistic, float(values[i]), above, numerator)
    if best is None or chosen is None:
        # nothing varied on the selection runs: test the one event that always happened there
        # (still a valid test on the fresh runs, whose bound will be 0 or close to it)
        a = samples[0][0]
        return Selection(ThresholdTest(0, 0, float(a[0, 0]), False, 0), 0.0, 0)
    return Selection(chosen, best[0], compared)


def evaluate_test(
    selection: Selection, outputs: tuple[np.ndarray, np.ndarray], confidence: float = 0.95
) -> AttackResult:
    """The chosen test on fresh runs of its pair: the final, valid bound."""
    test = selection.test
    one, zero = outputs[test.numerator], outputs[1 - test.numerator]
    return AttackResult(selection, test.hits(one), len(one), test.hits(zero), len(zero), confidence)


def _jobs(pairs: Iterable[int], stage: int, runs: int, chunk: int) -> list[SampleJob]:
    return [
        SampleJob(pair, side, stage, start, min(chunk, runs - start))
        for pair in pairs
        for side in (0, 1)
        for start in range(0, runs, chunk)
    ]


def _gather(
    jobs: Sequence[SampleJob], outputs: Iterable[np.ndarray]
) -> dict[tuple[int, int], np.ndarray]:
    parts: dict[tuple[int, int], list[np.ndarray]] = {}
    for job, out in zip(jobs, outputs, strict=True):
        parts.setdefault((job.pair, job.side), []).append(out)
    return {key: np.concatenate(value) for key, value in parts.items()}


def distinguishing_attack(
    sample: Sampler,
    n_pairs: int,
    selection_runs: int,
    runs: int,
    confidence: float = 0.95,
    map_fn: MapFunction = map,
    chunk: int | None = None,
) -> AttackResult:
    """Select a test on `selection_runs` runs per dataset of every pair, then evaluate it on
    `runs` fresh runs per dataset of the chosen pair. `map_fn` may be a process pool's map (the
    sampler must then be picklable); `chunk` splits each dataset's runs into jobs."""
    _check_confidence(confidence)
    for name, value in (("pairs", n_pairs), ("selection_runs", selection_runs), ("runs", runs)):
        if value < 1:
            raise ParameterError(name, value, "must be >= 1")
    if chunk is not None and chunk < 1:
        raise ParameterError("chunk", chunk, "must be >= 1")
    jobs = _jobs(range(n_pairs), SELECTION, selection_runs, chunk or selection_runs)
    found = _gather(jobs, map_fn(sample, jobs))
    selection = select_test([(found[p, 0], found[p, 1]) for p in range(n_pairs)], confidence)
    jobs = _jobs([selection.test.pair], EVALUATION, runs, chunk or runs)
    fresh = _gather(jobs, map_fn(sample, jobs))
    pair = selection.test.pair
    return evaluate_test(selection, (fresh[pair, 0], fresh[pair, 1]), confidence)


class Audited:
    """A mechanism the attack runs on: `sample` runs it on a job's side of one of `n_pairs`
    neighbouring pairs, and `attack` selects a test and bounds epsilon from below."""

    @property
    def n_pairs(self) -> int:
        raise NotImplementedError

    def sample(self, job: SampleJob) -> np.ndarray:
        raise NotImplementedError

    def attack(
        self,
        selection_runs: int,
        runs: int,
        confidence: float = 0.95,
        map_fn: MapFunction = map,
        chunk: int | None = None,
    ) -> AttackResult:
        return distinguishing_attack(
            self.sample, self.n_pairs, selection_runs, runs, confidence, map_fn, chunk
        )


# ----------------------------------------------------------------------------- DP-MASE


class AuditedDPSE(DPSuccessiveElimination):
    """The product's DP-SE with its Laplace scale multiplied by X, credited one epoch at a time.

    Crediting a whole epoch at once is equivalent to pull-by-pull play because DP-SE decides
    nothing inside an epoch: only the epoch's sums and its end matter.
    """

    def __init__(
        self,
        n_arms: int,
        params: LocalParams,
        rng: np.random.Generator,
        noise_multiplier: float = 1.0,
    ) -> None:
        self.noise_multiplier = noise_multiplier
        super().__init__(n_arms, params, rng)

    def noise_scale(self) -> float:
        return self.noise_multiplier * super().noise_scale()

    def credit_epoch(self, epoch_sums: np.ndarray) -> list[int]:
        """Every active arm pulled epoch_rounds times with these reward sums; returns the arms
        eliminated at the epoch's end."""
        arms = np.asarray(self.active)
        self.counts[arms] += self.epoch_rounds
        self.sums[arms] += epoch_sums[arms]
        return self._end_epoch_if_complete()


def run_dp_se(
    prefix: np.ndarray,
    params: LocalParams,
    rng: np.random.Generator,
    noise_multiplier: float = 1.0,
    max_epochs: int = 5,
) -> np.ndarray:
    """One run on a fixed dataset (prefix sums, shape (K, L + 1): arm k's j-th pull reads reward
    j). Per arm, the epoch that eliminated it, 0 if none did within max_epochs (truncation is
    post-processing, so it keeps DP)."""
    n_arms = prefix.shape[0]
    se = AuditedDPSE(n_arms, params, rng, noise_multiplier)
    eliminated = np.zeros(n_arms, dtype=np.int64)
    pointer = 0  # every active arm is pulled equally often, so all share one position
    while not se.done and se.epoch <= max_epochs:
        epoch, rounds = se.epoch, se.epoch_rounds
        if pointer + rounds >= prefix.shape[1]:
            raise ParameterError("dataset", prefix.shape, f"too short for epoch {epoch}")
        sums = (prefix[:, pointer + rounds] - prefix[:, pointer]).astype(float)
        eliminated[se.credit_epoch(sums)] = epoch
        pointer += rounds
    return eliminated


def prefix_sums(rewards: np.ndarray) -> np.ndarray:
    """(K, L) rewards in {0, 1} -> (K, L + 1) prefix sums, so an epoch's sum is one subtraction."""
    out = np.zeros((rewards.shape[0], rewards.shape[1] + 1), dtype=np.int32)
    np.cumsum(rewards, axis=1, dtype=np.int32, out=out[:, 1:])
    return out


@dataclass(frozen=True)
class PairSpec:
    """A neighbouring pair: D' is D with reward `index` of arm `arm` flipped (1 -> 0 on canaries).

    Canary: epoch-1 rewards set so that the gap leader - target sits at the elimination boundary
    plus `offset` noise scales in D (D' adds one reward's worth, 1/R(1)). Natural: D drawn from
    the problem.
    """

    kind: str  # "canary" | "natural"
    arm: int
    index: int = 0
    leader: int = -1
    offset: float = 0.0
    ones: int = 0  # canary: the target's epoch-1 ones in D

    def describe(self, rounds: int) -> str:
        if self.kind == "natural":
            return (
                f"natural: a draw from the problem; D' flips arm {self.arm}'s reward {self.index}"
            )
        return (
            f"canary: epoch-1 rewards of arm {self.leader} {rounds}/{rounds} ones, of arm "
            f"{self.arm} {self.ones}/{rounds} (their gap = elimination boundary "
            f"{self.offset:+g} noise scales); D' turns one of arm {self.arm}'s epoch-1 ones to 0"
        )


DEFAULT_OFFSETS = tuple(float(x) for x in range(-2, 7))


@dataclass(frozen=True)
class DPMASEAudit(Audited):
    """DP-MASE's local algorithm on fixed datasets; `sample` is the protocol's (picklable) sampler.

    Statistics: per arm, the elimination epoch (not eliminated = max_epochs + 1, later than any).
    """

    means: tuple[float, ...]
    dp_epsilon: float = 0.1
    noise_multiplier: float = 1.0
    beta: float = 0.5
    max_epochs: int = 5
    seed: int = 0
    offsets: tuple[float, ...] = DEFAULT_OFFSETS

    def __post_init__(self) -> None:
        if not (math.isfinite(self.dp_epsilon) and self.dp_epsilon > 0):
            raise ParameterError("dp_epsilon", self.dp_epsilon, "must be > 0")
        if not (math.isfinite(self.noise_multiplier) and self.noise_multiplier > 0):
            raise ParameterError("noise_multiplier", self.noise_multiplier, "must be > 0")
        if not 0 < self.beta < 1:
            raise ParameterError("beta", self.beta, "must be in (0, 1)")
        if self.max_epochs < 1:
            raise ParameterError("max_epochs", self.max_epochs, "must be >= 1")
        if self.seed < 0:
            raise ParameterError("seed", self.seed, "must be >= 0")
        Environment(self.means)  # K >= 2, Bernoulli means in [0, 1]
        if self.n_arms * self.length > MAX_REWARDS:
            raise ParameterError(
                "max_epochs",
                self.max_epochs,
                f"the datasets would hold {self.n_arms * self.length:,} rewards "
                f"(at most {MAX_REWARDS:,}); use fewer epochs",
            )

    @classmethod
    def for_environment(cls, env: Environment, **kwargs: Any) -> DPMASEAudit:
        """Refuses what DP-MASE's privacy does not cover or a fixed dataset cannot hold."""
        if not env.bounded:
            raise ParameterError("rewards", env.rewards, "the DP audit needs Bernoulli rewards")
        if any(rate != 0 for rate in env.drift):
            raise ParameterError("drift", env.drift, "the DP audit needs stationary arms")
        return cls(tuple(float(m) for m in env.means), **kwargs)

    @property
    def n_arms(self) -> int:
        return len(self.means)

    @property
    def params(self) -> LocalParams:
        # epsilon (the accuracy) is unused by DP-SE, which has no eps-stop
        return LocalParams(
            epsilon=0.25, confidence=self.beta, dp_epsilon=self.dp_epsilon, every_arm=True
        )

    @property
    def noise_epsilon(self) -> float:
        """One reward moves an epoch mean by 1/R; the noise scale is X / (E R)."""
        return self.dp_epsilon / self.noise_multiplier

    @property
    def first_rounds(self) -> int:
        return dp_epoch_length(1, self.n_arms, self.beta, self.dp_epsilon)

    @property
    def first_gap(self) -> float:
        return dp_elimination_gap(1, self.first_rounds, self.n_arms, self.beta, self.dp_epsilon)

    @property
    def length(self) -> int:
        """Rewards per arm: the epochs' lengths with every arm active (the longest they get)."""
        return sum(
            dp_epoch_length(e, self.n_arms, self.beta, self.dp_epsilon)
            for e in range(1, self.max_epochs + 1)
        )

    def pairs(self) -> list[PairSpec]:
        """Canaries (target = the second-best arm, leader = the best), one per distinct offset
        once rounded to whole rewards, then two natural pairs."""
        order = sorted(range(self.n_arms), key=lambda a: (-self.means[a], a))
        leader, target = order[0], order[1]
        rounds, scale = (
            self.first_rounds,
            self.noise_multiplier / (self.dp_epsilon * self.first_rounds),
        )
        out: list[PairSpec] = []
        seen: set[int] = set()
        for offset in self.offsets:
            # gap in D = 1 - ones / R <= boundary + offset scales (ceil), and D' adds 1 / R
            ones = math.ceil(rounds * (1.0 - self.first_gap - offset * scale))
            ones = min(max(ones, 1), rounds)
            if ones not in seen:
                seen.add(ones)
                out.append(PairSpec("canary", target, 0, leader, offset, ones))
        out.append(PairSpec("natural", target))
        out.append(PairSpec("natural", leader))
        return out

    def describe(self, pair: int) -> str:
        return self.pairs()[pair].describe(self.first_rounds)

    def statistic_name(self, statistic: int) -> str:
        return f"T_{statistic} (arm {statistic}'s elimination epoch; not eliminated = {self.max_epochs + 1})"

    def describe_test(self, test: ThresholdTest) -> str:
        arm, t = test.statistic, test.threshold
        if test.above:
            what = (
                f"arm {arm} not eliminated by epoch {t:g}"
                if t < self.max_epochs + 1
                else f"arm {arm} not eliminated"
            )
            event = f"T_{arm} > {t:g}"
        else:
            what = f"arm {arm} eliminated by epoch {t:g}"
            event = f"T_{arm} <= {t:g}"
        first, second = ("D", "D'") if test.numerator == 0 else ("D'", "D")
        return f"{what} ({event}); P[. | {first}] vs P[. | {second}]"

    def datasets(self, pair: int) -> tuple[np.ndarray, np.ndarray]:
        """Prefix sums of D and D'. All pairs share one draw from the problem (Bernoulli); a
        canary then overwrites the leader's and the target's epoch-1 rewards."""
        return _datasets(self, pair)

    def draw(self) -> np.ndarray:
        """The problem's rewards, (K, L) in {0, 1}, from the seed's data stream."""
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(_DATA,)))
        mu = np.asarray(self.means, dtype=np.float32)[:, None]
        return (rng.random((self.n_arms, self.length), dtype=np.float32) < mu).astype(np.int8)

    def run(self, prefix: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return run_dp_se(prefix, self.params, rng, self.noise_multiplier, self.max_epochs)

    def statistics(self, eliminated: np.ndarray) -> np.ndarray:
        return np.where(eliminated == 0, self.max_epochs + 1, eliminated)

    def sample(self, job: SampleJob) -> np.ndarray:
        """The statistics of the job's runs; run i's Laplace noise comes from a fresh Generator
        seeded by (seed; stage, pair, side, i)."""
        prefix = self.datasets(job.pair)[job.side]
        out = np.empty((job.count, self.n_arms), dtype=np.int64)
        for row, i in enumerate(range(job.start, job.start + job.count)):
            key = (job.stage, job.pair, job.side, i)
            rng = np.random.Generator(
                np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=key))
            )
            out[row] = self.statistics(self.run(prefix, rng))
        return out

    @property
    def n_pairs(self) -> int:
        return len(self.pairs())


# Building a dataset costs far more than a run, and the jobs of one pair come one after the
# other: a worker process keeps the problem's draw and the last pair's datasets.
@functools.lru_cache(maxsize=1)
def _base_prefix(audit: DPMASEAudit) -> tuple[np.ndarray, np.ndarray]:
    rewards = audit.draw()
    return rewards, prefix_sums(rewards)


@functools.lru_cache(maxsize=1)
def _datasets(audit: DPMASEAudit, pair: int) -> tuple[np.ndarray, np.ndarray]:
    spec = audit.pairs()[pair]
    rewards, base = _base_prefix(audit)
    prefix = base.copy()
    if spec.kind == "canary":
        rounds = audit.first_rounds
        for arm, ones in ((spec.leader, rounds), (spec.arm, spec.ones)):
            row = rewards[arm].copy()
            row[:rounds] = 0
            row[:ones] = 1  # the target's reward 0, the one D' flips, is a 1 in D
            prefix[arm] = prefix_sums(row[None, :])[0]
    step = 1 - 2 * int(prefix[spec.arm, spec.index + 1] - prefix[spec.arm, spec.index])
    neighbour = prefix.copy()
    neighbour[spec.arm, spec.index + 1 :] += step  # reward `index` flipped: 0 -> 1 or 1 -> 0
    prefix.flags.writeable = False
    neighbour.flags.writeable = False
    return prefix, neighbour
