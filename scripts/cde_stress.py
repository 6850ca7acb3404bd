"""Print CDE's stress figures (docs/CDE.md, section 4): local answers wrong with probability
exactly eta (each bad arm eta / (K - 1)), then the real randomized response and accept rule in the
fast engine. With two arms the certificate is exact; with ten it is a union and a race.
`python3 scripts/cde_stress.py [--trials 20000]` (about a minute)."""

from __future__ import annotations

import argparse

from common.algorithms import AlgorithmConfig
from common.certificate import certify_simulation, upper
from common.environments import Environment, problem
from common.simulation import SimulationConfig, run_trials
from common.stats import clopper_pearson

ROWS: tuple[tuple[str, tuple[float, ...], float, float, float, int], ...] = (
    # (label, means, eps, eta, privacy, agents)
    ("K = 2", (0.7, 0.3), 0.25, 0.1, 0.75, 20),
    ("K = 2", (0.7, 0.3), 0.25, 0.1, 0.6, 200),
    ("K = 10, Problem 1", problem("problem-1").environment.means, 0.15, 0.5, 0.6, 64),
    ("K = 10, Problem 1", problem("problem-1").environment.means, 0.15, 0.3, 0.6, 64),
    ("K = 10, Problem 1", problem("problem-1").environment.means, 0.15, 0.1, 0.3, 200),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=99)
    args = parser.parse_args()
    print(f"{args.trials:,} trials per row, fast engine, seed {args.seed}, 99.9 % Clopper-Pearson")
    print(
        "| instance | eps | eta | privacy P | N | M | certified failure | measured [99.9 %] | "
        "measured / certified | wrong arm accepted | no answer |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, means, eps, eta, privacy, agents in ROWS:
        algo = AlgorithmConfig("cde", epsilon=eps, eta=eta, privacy=privacy, delta=0.05)
        config = SimulationConfig(Environment(means), algo, n_agents=agents, exact_local_error=True)
        cert = certify_simulation(config)
        results = run_trials(config, args.trials, seed=args.seed)
        failures = sum(not r.correct for r in results)
        wrong = sum(r.stopped_by == "global" and not r.correct for r in results)
        low, high = clopper_pearson(failures, args.trials, 0.999)
        rate = failures / args.trials
        print(
            f"| {label} | {eps} | {eta} | {privacy} | {agents} | {config.threshold} | "
            f"{upper(cert.failure)} | {rate:.4f} [{low:.4f}, {high:.4f}] | "
            f"{rate / cert.failure:.2f} | {wrong / args.trials:.4f} (bound "
            f"{upper(cert.wrong_arm)}) | {(failures - wrong) / args.trials:.4f} |"
        )


if __name__ == "__main__":
    main()
