"""End-to-end throughput of the local stack: activations per second, driven as fast as it goes.

    python benchmarks/bench_end_to_end.py [--agents 64] [--processes 4] [--seed 1]

Real redis-server, coordinator under uvicorn, agent processes and the load generator (the `dexp
demo` stack) on Problem 1 with DE-SER3. Prints the rate, the sample complexity and the wall time.
"""

from __future__ import annotations

import argparse
import time

from common.algorithms import AlgorithmConfig
from common.environments import problem
from common.redis_acl import LOAD_GENERATOR
from dexp.demo import local_stack
from load_generator.generator import LoadGenerator, format_summary
from load_generator.settings import LoadSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=64)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--problem", default="feraud-1")
    args = parser.parse_args()
    env = problem(args.problem).environment
    arms = [f"arm-{k}" for k in range(env.n_arms)]
    start = time.perf_counter()
    with local_stack(AlgorithmConfig(), arms, args.agents, args.processes, seed=args.seed) as stack:
        settings = LoadSettings(
            coordinator_url=stack.coordinator_url,
            redis_url=stack.redis_urls[LOAD_GENERATOR],  # its own Redis user, as deployed
            problem=args.problem,
            seed=args.seed,
            settle_seconds=1.0,
            max_seconds=600,
        )
        with LoadGenerator(settings) as generator:
            summary = generator.run()
    total = time.perf_counter() - start
    print(format_summary(summary, as_json=False))
    print(
        f"end-to-end: {summary.activations_per_second:,.0f} activations/s with {args.agents} agents "
        f"in {args.processes} processes; run {summary.wall_seconds:.1f} s, "
        f"{total:.1f} s with start-up and shut-down"
    )


if __name__ == "__main__":
    main()
