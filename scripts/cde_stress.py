"""Print CDE's certificate against measured failure rates (docs/CDE.md, section 4).

Four tables, each row a configuration of the fast engine with its certified failure and the
measured rate with its 99.9 % Clopper-Pearson interval:
1. one eps-optimal arm, stress mode (local answers wrong with probability exactly eta, each bad
   arm eta / (K - 1)): with two arms the certificate is exact;
2. s = 1 .. 6 eps-optimal arms sharing the right answers evenly, stress mode (issue 33's K = 10,
   eta = 0.1, P = 0.2, N = 400);
3. liars, fixed (they report one bad arm at once) and adaptive (they wait until a bad arm has
   M - f honest reports, then all report it), stress mode;
4. real Bernoulli rewards, s arms at 0.7 and the others at 0.44 (gap 0.26, eps = 0.25).

`python3 scripts/cde_stress.py [--trials 20000] [--real-trials 4000] [--seed 99]` (a few
minutes; progress on stderr).
"""

from __future__ import annotations

import argparse
import sys
import time

from common.algorithms import AlgorithmConfig
from common.certificate import Certificate, certify_simulation, upper
from common.environments import Environment, problem
from common.simulation import SimulationConfig, TrialResult, run_trials
from common.stats import clopper_pearson

PROBLEM_1 = problem("problem-1").environment.means
HEADER = (
    "| instance | N | M | certified failure (wrong arm, worst s) | measured [99.9 %] | "
    "measured / certified | wrong arm accepted | no answer |"
)


def stress(
    means: tuple[float, ...],
    agents: int,
    real: bool = False,
    attackers: int = 0,
    attack: str = "fixed",
    **algorithm: float,
) -> SimulationConfig:
    return SimulationConfig(
        Environment(means),
        AlgorithmConfig("cde", delta=0.05, **algorithm),  # type: ignore[arg-type]
        n_agents=agents,
        exact_local_error=not real,
        attackers=attackers,
        attack=attack,
    )


def row(label: str, config: SimulationConfig, trials: int, seed: int) -> str:
    sys.stderr.write(f"{label} ({trials:,} trials)\n")
    cert: Certificate = certify_simulation(config)
    results: list[TrialResult] = run_trials(config, trials, seed=seed)
    failures = sum(not r.correct for r in results)
    wrong = sum(r.stopped_by == "global" and not r.correct for r in results)
    low, high = clopper_pearson(failures, trials, 0.999)
    rate = failures / trials
    return (
        f"| {label} | {config.n_agents:,} | {config.threshold} | {upper(cert.failure)} "
        f"({upper(cert.wrong_arm)}, s = {cert.optimal_arms}) | {rate:.4f} [{low:.4f}, "
        f"{high:.4f}] | {rate / cert.failure:.2f} | {wrong / trials:.4f} | "
        f"{(failures - wrong) / trials:.4f} |"
    )


def table(title: str, rows: list[str]) -> None:
    print(f"\n{title}\n")
    print(HEADER)
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for line in rows:
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000, help="per stress-mode row")
    parser.add_argument("--real-trials", type=int, default=4_000, help="per real-reward row")
    parser.add_argument("--seed", type=int, default=99)
    args = parser.parse_args()
    started = time.monotonic()
    n, seed = args.trials, args.seed
    print(
        f"`python3 scripts/cde_stress.py --trials {n} --real-trials {args.real_trials} --seed "
        f"{seed}`: fast engine, delta = 0.05, 99.9 % Clopper-Pearson intervals"
    )
    kw = {"eta": 0.1}
    table(
        "1. One eps-optimal arm, stress mode (eps = 0.25; K = 10: Problem 1's means, eps = 0.15)",
        [
            row("K = 2, P = 0.75", stress((0.7, 0.3), 20, privacy=0.75, **kw), n, seed),
            row("K = 2, P = 0.6", stress((0.7, 0.3), 200, privacy=0.6, **kw), n, seed),
            row(
                "K = 10, eta = 0.5, P = 0.6",
                stress(PROBLEM_1, 64, epsilon=0.15, eta=0.5, privacy=0.6),
                n,
                seed,
            ),
            row(
                "K = 10, eta = 0.1, P = 0.3",
                stress(PROBLEM_1, 1_024, epsilon=0.15, privacy=0.3, **kw),
                n,
                seed,
            ),
        ],
    )
    several = [
        row(
            f"s = {s}",
            stress((0.7,) * s + (0.3,) * (10 - s), 400, privacy=0.2, **kw),
            n,
            seed,
        )
        for s in range(1, 7)
    ]
    table(
        "2. s eps-optimal arms of K = 10 sharing the right answers evenly, stress mode "
        "(eta = 0.1, P = 0.2)",
        several,
    )
    liars = []
    for label, means, agents, f, privacy in (
        ("K = 2, P = 0.6, f = 5", (0.7, 0.3), 200, 5, 0.6),
        ("K = 10, s = 5, P = 0.4, f = 3", (0.7,) * 5 + (0.3,) * 5, 200, 3, 0.4),
    ):
        for attack in ("fixed", "adaptive"):
            config = stress(
                means, agents, attackers=f, attack=attack, privacy=privacy, tolerance=f, **kw
            )
            liars.append(row(f"{label}, {attack} liars", config, n, seed))
    table("3. Liars, stress mode (eta = 0.1; f tolerated and f liars)", liars)
    real = [
        row(
            f"s = {s}",
            stress((0.7,) * s + (0.44,) * (10 - s), 1_000, real=True, privacy=0.25, **kw),
            args.real_trials,
            seed,
        )
        for s in (2, 3, 4)
    ]
    table(
        "4. Real Bernoulli rewards: s arms at 0.7, the others at 0.44 (eps = 0.25, eta = 0.1, "
        "P = 0.25)",
        real,
    )
    sys.stderr.write(f"done in {time.monotonic() - started:.0f} s\n")


if __name__ == "__main__":
    main()
