"""Simulator speed: activations per second (fast vs reference) and the Feraud figure-1 sweep.

    python benchmarks/bench_simulator.py            # everything
    python benchmarks/bench_simulator.py --quick    # rates only, no sweep

Prints its figures; docs/RESULTS.md records them with this command.
"""

from __future__ import annotations

import argparse
import os
import time

from common.algorithms import AlgorithmConfig
from common.environments import problem
from common.simulation import SimulationConfig, run_trials
from common.simulation.fast import run_trial as fast_trial
from common.simulation.reference import run_trial as reference_trial

SWEEP_AGENTS = (32, 64, 128, 256, 512, 1024)
SWEEP_SERIES = (("de", "ser3"), ("de", "lucb"), ("independent", "ser3"), ("central", "ser3"))


def rate(run, config: SimulationConfig, seeds: range) -> tuple[float, int, float]:
    activations, start = 0, time.perf_counter()
    for seed in seeds:
        activations += run(config, seed).sample_complexity
    elapsed = time.perf_counter() - start
    return activations / elapsed, activations, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip the figure-1 sweep")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    env = problem("feraud-1").environment
    config = SimulationConfig(env, AlgorithmConfig("de", "ser3"), n_agents=1024)
    fast_trial(SimulationConfig(env, AlgorithmConfig("de", "ser3"), n_agents=32), 0)  # compile
    fast, n_fast, t_fast = rate(fast_trial, config, range(5))
    ref, n_ref, t_ref = rate(reference_trial, config, range(1))
    print("DE-SER3, feraud-1, N=1024, one pull per activation")
    print(f"  fast      {fast:>12,.0f} activations/s  ({n_fast:,} activations in {t_fast:.2f} s)")
    print(f"  reference {ref:>12,.0f} activations/s  ({n_ref:,} activations in {t_ref:.2f} s)")
    print(f"  speed-up  {fast / ref:>12.1f} x")
    if args.quick:
        return
    start = time.perf_counter()
    points = 0
    for algorithm, subroutine in SWEEP_SERIES:
        for n_agents in SWEEP_AGENTS:
            cfg = SimulationConfig(env, AlgorithmConfig(algorithm, subroutine), n_agents=n_agents)
            run_trials(cfg, trials=20, seed=n_agents, engine="fast", workers=args.workers)
            points += 1
    elapsed = time.perf_counter() - start
    print(
        f"Feraud figure-1 sweep: {points} points x 20 trials "
        f"(N={','.join(map(str, SWEEP_AGENTS))}; DE-SER3, DE-LUCB, independent-SER3, "
        f"central-SER3) in {elapsed:.1f} s with {args.workers} worker(s)"
    )


if __name__ == "__main__":
    main()
