#!/usr/bin/env python3
"""The LDP mode (common.ldp) measured: one visit, one private report (B = 1), at N = 10^3 .. 10^6.

    PYTHONPATH=$PWD python scripts/ldp_results.py [--workers 2] [--json results/ldp.json]

For Problem 1 (feraud-1), Problem 2 (feraud-2) and gauss-8, eps = 0.25, delta = 0.05, B = 1, each
dp_epsilon in {0.5, 1, 2} and each N: the activations (mean and 95 % t interval), the reports, the
failures (the leader not eps-optimal; in parentheses those of the runs that answered, what delta
bounds) and the trials that ended exhausted (N B reports spent, no answer). Beside them the
project's central baseline on the same instance (one learner that sees every reward: KL-LUCB, or
stitched-LUCB on gauss-8, whose Gaussian rewards KL-LUCB's bounds do not cover), the ideal
((e^eps + 1) / (e^eps - 1))^2 x central (what privatizing every reward of the central run would
cost), the ratio to it (where no trial exhausted), the same rule with no privacy to speak of (LDP
at dp_epsilon 10, at the largest N: a report is its reward's bit) and the ratio to overhead x
that (the price of privacy alone, apart from the choice of rule), and per (problem, dp_epsilon)
the ratio of the activations at the largest N to those at the smallest N that never exhausted,
and, where N B reports did not suffice, the devices needed: the mean reports at the largest N,
over B.

Trials: TRIALS per row, SLOW_TRIALS where a trial takes seconds (gauss-8 at dp_epsilon <= 1: tens
of thousands of reports, a decision every 10). Trial i of a row is `dexp simulate`'s trial i with
the same seed. Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common.algorithms import AlgorithmConfig
from common.environments import problem
from common.ldp import MAX_DP_EPSILON, Mechanism
from common.simulation import SimulationConfig, TrialResult, run_trials
from common.stats import describe

PROBLEMS = ("feraud-1", "feraud-2", "gauss-8")
AGENTS = (1_000, 10_000, 100_000, 1_000_000)
DP_EPSILONS = (0.5, 1.0, 2.0)
EPSILON, DELTA, REPORTS_PER_AGENT = 0.25, 0.05, 1
TRIALS, SLOW_TRIALS, CENTRAL_TRIALS = 100, 30, 200
CENTRAL = {"feraud-1": "kl-lucb", "feraud-2": "kl-lucb", "gauss-8": "stitched-lucb"}


def trials_for(name: str, dp_epsilon: float) -> int:
    return SLOW_TRIALS if name == "gauss-8" and dp_epsilon <= 1.0 else TRIALS


@dataclass(frozen=True)
class Row:
    problem: str
    dp_epsilon: float
    agents: int
    trials: int
    activations: float
    low: float
    high: float
    reports: float
    failures: int
    wrong_answers: int  # failures among the identified runs: what delta bounds
    exhausted: int
    central: float
    ideal: float
    same_rule: float  # the same rule without privacy to speak of: LDP at MAX_DP_EPSILON

    @property
    def ratio(self) -> float:
        return self.activations / self.ideal

    @property
    def ratio_same_rule(self) -> float:
        """Against what randomized response would cost the same rule: overhead x same_rule."""
        return self.activations / (Mechanism(self.dp_epsilon).overhead * self.same_rule)


def ldp_config(name: str, agents: int, dp_epsilon: float) -> SimulationConfig:
    p = problem(name)
    algo = AlgorithmConfig(
        "ldp",
        epsilon=EPSILON,
        delta=DELTA,
        dp_epsilon=dp_epsilon,
        reports_per_agent=REPORTS_PER_AGENT,
    )
    return SimulationConfig(p.environment, algo, n_agents=agents, activation=p.activation)


def central_activations(name: str, seed: int, workers: int) -> float:
    """The central baseline's mean samples (its sample complexity does not depend on N)."""
    p = problem(name)
    algo = AlgorithmConfig("central", CENTRAL[name], epsilon=EPSILON, delta=DELTA)
    config = SimulationConfig(p.environment, algo, n_agents=1, activation=p.activation)
    results = run_trials(config, CENTRAL_TRIALS, seed=seed, workers=workers)
    return describe([r.sample_complexity for r in results]).mean


def same_rule_activations(name: str, agents: int, seed: int, workers: int) -> float:
    """The LDP rule with no privacy to speak of (dp_epsilon = MAX_DP_EPSILON: a report is its
    reward's bit with probability 0.99995), at the largest N: the central run of the same rule,
    to set the price of privacy apart from the choice of rule."""
    results = run_trials(
        ldp_config(name, agents, MAX_DP_EPSILON), TRIALS, seed=seed, workers=workers
    )
    return describe([r.sample_complexity for r in results]).mean


def measure(
    name: str,
    agents: int,
    dp_epsilon: float,
    central: float,
    same_rule: float,
    seed: int,
    workers: int,
) -> Row:
    trials = trials_for(name, dp_epsilon)
    results: list[TrialResult] = run_trials(
        ldp_config(name, agents, dp_epsilon), trials, seed=seed, workers=workers
    )
    spent = describe([r.sample_complexity for r in results])
    return Row(
        problem=name,
        dp_epsilon=dp_epsilon,
        agents=agents,
        trials=trials,
        activations=spent.mean,
        low=spent.ci95_low,
        high=spent.ci95_high,
        reports=sum(r.messages for r in results) / trials,
        failures=sum(not r.correct for r in results),
        wrong_answers=sum(not r.correct and r.stopped_by == "global" for r in results),
        exhausted=sum(r.stopped_by == "exhausted" for r in results),
        central=central,
        ideal=Mechanism(dp_epsilon).overhead * central,
        same_rule=same_rule,
    )


def scaling(rows: list[Row]) -> list[dict[str, object]]:
    """Per (problem, dp_epsilon): the ratio of the activations at the largest N to those at the
    smallest N where no trial exhausted, and the devices the exhausted rows would need."""
    out = []
    for name in PROBLEMS:
        for dp_epsilon in DP_EPSILONS:
            group = [r for r in rows if r.problem == name and r.dp_epsilon == dp_epsilon]
            if not group:
                continue
            largest = max(group, key=lambda r: r.agents)
            whole = [r for r in group if r.exhausted == 0]
            smallest = min(whole, key=lambda r: r.agents) if whole else None
            short = [r.agents for r in group if r.exhausted > 0]
            out.append(
                {
                    "problem": name,
                    "dp_epsilon": dp_epsilon,
                    "smallest_whole_agents": None if smallest is None else smallest.agents,
                    "ratio_largest_to_smallest_whole": None
                    if smallest is None
                    else largest.activations / smallest.activations,
                    "exhausted_at_agents": short,
                    "devices_needed": math.ceil(largest.reports / REPORTS_PER_AGENT)
                    if short and largest.exhausted == 0
                    else None,
                }
            )
    return out


def table(rows: list[Row]) -> str:
    head = (
        "| problem | dp_eps | N | trials | activations [95% CI] | reports | failures (answered) "
        "| exhausted | central | ideal | x ideal | same rule | x same rule |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = [
        f"| {r.problem} | {r.dp_epsilon:g} | {r.agents:,} | {r.trials} | {r.activations:,.0f} "
        f"[{r.low:,.0f}, {r.high:,.0f}] | {r.reports:,.0f} | {r.failures}/{r.trials} "
        f"({r.wrong_answers}) | "
        f"{r.exhausted}/{r.trials} | {r.central:,.0f} | {r.ideal:,.0f} | "
        f"{'-' if r.exhausted else f'{r.ratio:.2f}'} | {r.same_rule:,.0f} | "
        f"{'-' if r.exhausted else f'{r.ratio_same_rule:.2f}'} |"
        for r in rows
    ]
    return head + "\n".join(lines)


def scaling_table(groups: list[dict[str, object]], largest: int) -> str:
    head = (
        f"| problem | dp_eps | smallest N never exhausted | N = {largest:,} / that N "
        "| exhausted at N | devices needed (B = 1) |\n|---|---:|---:|---:|---|---:|\n"
    )
    lines = []
    for g in groups:
        ratio = g["ratio_largest_to_smallest_whole"]
        smallest, needed = g["smallest_whole_agents"], g["devices_needed"]
        short = g["exhausted_at_agents"]
        assert isinstance(short, list)
        lines.append(
            f"| {g['problem']} | {g['dp_epsilon']:g} | "
            f"{'-' if smallest is None else f'{smallest:,}'} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} | "
            f"{', '.join(f'{n:,}' for n in short) or '-'} | "
            f"{'-' if needed is None else f'{needed:,}'} |"
        )
    return head + "\n".join(lines)


def commit() -> str:
    """The commit the run is on, and whether the work tree differs from it."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=here
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            cwd=here,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{head} + uncommitted" if dirty else head


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--agents", default=",".join(str(n) for n in AGENTS))
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    agents = [int(n) for n in args.agents.split(",")]
    names = [n for n in args.problems.split(",") if n]
    start = time.time()
    rows: list[Row] = []
    for name in names:
        central = central_activations(name, args.seed, args.workers)
        same = same_rule_activations(name, max(agents), args.seed, args.workers)
        for dp_epsilon in DP_EPSILONS:
            for n in agents:
                rows.append(measure(name, n, dp_epsilon, central, same, args.seed, args.workers))
                r = rows[-1]
                print(
                    f"{name} dp_eps={dp_epsilon:g} N={n:,}: {r.activations:,.0f} activations, "
                    f"{r.exhausted}/{r.trials} exhausted ({time.time() - start:.0f} s)",
                    file=sys.stderr,
                )
    groups = scaling(rows)
    elapsed = time.time() - start
    print(f"commit {commit()}; seed {args.seed}; workers {args.workers}; {elapsed:.0f} s\n")
    print(
        f"eps = {EPSILON}, delta = {DELTA}, B = {REPORTS_PER_AGENT}; trials per row: {TRIALS} "
        f"({SLOW_TRIALS} for gauss-8 at dp_epsilon <= 1); central: {CENTRAL_TRIALS} trials of "
        + ", ".join(f"{CENTRAL[n]} on {n}" for n in names)
        + "\n"
    )
    print(table(rows) + "\n")
    print(scaling_table(groups, max(agents)))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "commit": commit(),
            "seed": args.seed,
            "elapsed_seconds": elapsed,
            "rows": [
                {**r.__dict__, "ratio_to_ideal": r.ratio, "ratio_to_same_rule": r.ratio_same_rule}
                for r in rows
            ],
            "scaling": groups,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
