"""How close the LDP mode's failures come to delta, its certificate (docs/LDP.md, section 3).

    PYTHONPATH=$PWD python scripts/ldp_stress.py            # a few minutes on 2 cores
    PYTHONPATH=$PWD python scripts/ldp_stress.py --trials 2000 --delta 0.2

1. The order that spends the bound (common/ldp_stress.py): two arms, the best known first to the
   last digit, then the other, eps + 0.0005 below, alone, a decision after each report. A wrong
   answer needs one side of one arm: the union gives it delta / 2. Its rate of wrong answers, with
   a 95 % Clopper-Pearson interval, beside delta / 2 and delta.
2. The protocol's own order (the coordinator's allocation), in configurations hard in their own
   way: two arms a little more than eps apart, the same with f liars at the tolerance (corrupt =
   f B), and Problem 1: the rate of wrong answers and of runs whose final estimates miss a mean.
3. The estimates' event (every arm's interval holds at every time): how often one arm's interval
   (two arms, each side at delta / 4, honest reports of mean 1/2, the variance's worst case)
   leaves its mean at some report up to the horizon, beside the delta / 2 the union gives it.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import Environment, problem
from common.ldp import Mechanism, bit_interval, tuning_variance
from common.ldp_stress import Stress
from common.ldp_stress import run as stress_run
from common.simulation import SimulationConfig, TrialResult, run_trials
from common.stats import clopper_pearson


def misses(result: TrialResult, means: tuple[float, ...]) -> bool:
    assert result.estimates is not None
    return any(not e.low <= mu <= e.high for e, mu in zip(result.estimates, means, strict=True))


def crossings(horizon: int, trials: int, delta: float, seed: int) -> int:
    """In how many of `trials` sequences of `horizon` fair bits one arm's estimate interval (of
    two arms, each side at delta / 4, tuned for eps 0.1 at dp_epsilon 1, no corrupt report)
    leaves 1/2 at some report."""
    n = np.arange(1, horizon + 1)
    tuning = tuning_variance(0.1, Mechanism(1.0), 2, delta)
    # the interval is the mean plus or minus this radius (bit_interval's upper end at 0 ones; a
    # radius clipped at 1 covers every mean, as the unclipped one does)
    radius = np.array([bit_interval(0, int(i), delta / 4, tuning, 0)[1] for i in n])
    rng = np.random.default_rng(seed)
    missed = 0
    for _ in range(trials):
        deviation = np.cumsum(rng.random(horizon) < 0.5) / n - 0.5
        missed += bool((np.abs(deviation) >= radius).any())
    return missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--delta", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--horizon", type=int, default=100_000, help="reports per arm, for E")
    parser.add_argument("--event-trials", type=int, default=4000)
    parser.add_argument("--order-trials", type=int, default=4000)
    args = parser.parse_args()
    order = Stress(delta=args.delta)
    result = stress_run(order, args.order_trials, args.seed)
    low, high = clopper_pearson(result.wrong, result.runs)
    print(
        f"the adversarial order: arms {order.best:g} and {order.best - order.gap:g}, eps "
        f"{order.epsilon:g}, dp_epsilon {order.dp_epsilon:g}, delta {order.delta:g}, arm 0 known "
        f"from {order.known:,} reports, then arm 1 alone, {result.runs} runs, seed {args.seed}: "
        f"wrong {result.wrong / result.runs:.4f} [{low:.4f}, {high:.4f}] "
        f"(delta / 2 = {order.delta / 2:g}, delta = {order.delta:g}); "
        f"{result.stopped} stopped, at {result.median_stop:,.0f} reports of arm 1 (median)"
    )
    eps = 0.1
    algo = AlgorithmConfig("ldp", epsilon=eps, delta=args.delta, dp_epsilon=1.0)
    close = Environment((0.6, 0.6 - eps - 0.005))
    skewed = Activation("groups", (0.01, 0.5))  # 1 % of the devices make half the activations
    configs = {
        "two arms eps + 0.005 apart": SimulationConfig(close, algo, n_agents=100_000),
        "the same, 20 liars at the tolerance": SimulationConfig(
            close,
            dataclasses.replace(algo, tolerance=20),
            n_agents=100_000,
            attackers=20,
            activation=skewed,
        ),
        "Problem 1": SimulationConfig(problem("feraud-1").environment, algo, n_agents=100_000),
    }
    print(
        f"LDP, dp_epsilon 1, B = 1, eps {eps:g}, delta {args.delta:g}, {args.trials} trials each, "
        f"seed {args.seed}; rates with 95 % Clopper-Pearson intervals"
    )
    for name, config in configs.items():
        results = run_trials(config, args.trials, seed=args.seed, workers=args.workers)
        wrong = sum(not r.correct for r in results)
        missed = sum(misses(r, config.environment.means) for r in results)
        reports = sum(r.messages for r in results) / len(results)
        lo_w, hi_w = clopper_pearson(wrong, len(results))
        lo_m, hi_m = clopper_pearson(missed, len(results))
        print(
            f"  {name:38s} wrong {wrong / len(results):.4f} [{lo_w:.4f}, {hi_w:.4f}]   "
            f"intervals missing a mean at the stop {missed / len(results):.4f} "
            f"[{lo_m:.4f}, {hi_m:.4f}]   reports {reports:,.0f}"
        )

    missed = crossings(args.horizon, args.event_trials, args.delta, args.seed)
    low, high = clopper_pearson(missed, args.event_trials)
    print(
        f"the event E, one arm of two, {args.horizon:,} reports of mean 1/2, "
        f"{args.event_trials} sequences: its interval left the mean in {missed / args.event_trials:.4f} "
        f"[{low:.4f}, {high:.4f}] of them; the union gives it {args.delta / 2:g}"
    )


if __name__ == "__main__":
    main()
