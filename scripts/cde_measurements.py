#!/usr/bin/env python3
"""Issue 24, point 3: CDE measured on Problem 1, Problem 2 and an untuned instance at N = 64, 1,024
and 10,000, against DE-SER3 and DE-stitched-LUCB and the information-theoretic lower bound.

    python3 scripts/cde_measurements.py [--trials 2000] [--audit-trials 20] [--de-trials 10]

For each experiment cde-p1, cde-p2, cde-gauss (dexp/experiments.py: the same configurations as
`dexp reproduce NAME`) and each N: CDE's failure rate with its 95% Wilson interval against its
certified failure; the strongest messages-only adversary of `dexp audit votes` (common/privacy.py)
against its hit-rate bound under a uniform prior, beside its certified e0; the activations (mean,
95% interval) and messages of CDE and of DE-SER3 and DE-stitched-LUCB, at the papers' eta = 0.9
and at the thresholds that certify delta (`dexp plan`'s); the lower bound (common/lower_bound.py) and each one's ratio to it. Trial i of a
row is `dexp simulate`'s trial i with the same seed; the audit reads CDE's first AUDIT trials and
learns its posterior from the next AUDIT. Markdown on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from common.certificate import certify_simulation, upper
from common.lower_bound import LowerBound, lower_bound
from common.privacy import audit_votes, certified_epsilon, hit_rate_uniform_prior
from common.simulation import SimulationConfig, TrialResult, run_trials
from common.stats import describe, proportion_interval
from dexp.experiments import CDE_AGENTS, EXPERIMENTS
from dexp.reproduce import build_points

MEASURED = ("cde-p1", "cde-p2", "cde-gauss")


def interval(low: float, high: float, digits: int = 3) -> str:
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def activations(results: Sequence[TrialResult]) -> tuple[str, float]:
    d = describe([r.sample_complexity for r in results])
    spread = f" ± {d.half_width:,.0f}" if len(results) > 1 else ""
    return f"{d.mean:,.0f}{spread}", d.mean


def cde_row(config: SimulationConfig, results: list[TrialResult], audit: int) -> list[str]:
    """N, M, P, certified failure, failure rate (interval), the failures split into a wrong arm
    accepted and no answer (beside the bound's wrong-arm part), certified e0, hit-rate bound under
    a uniform prior, audited hit rate (interval, adversary), the share of agents that reported,
    activations, messages."""
    failures = sum(not r.correct for r in results)
    unanswered = sum(r.stopped_by == "exhausted" for r in results)
    cert = certify_simulation(config)
    low, high = proportion_interval(failures, len(results))
    found = audit_votes(config, results[:audit], results[audit : 2 * audit])
    name, rate = found.strongest(with_outcome=False)
    e0, hit = certified_epsilon(config), hit_rate_uniform_prior(config)
    spent, _ = activations(results)
    messages = sum(r.messages for r in results) / len(results)
    return [
        f"{config.n_agents:,}",
        str(config.threshold),
        f"{config.algorithm.privacy:g}",
        upper(cert.failure),
        f"{failures / len(results):.4f} {interval(low, high, 4)} ({failures}/{len(results)})",
        f"{failures - unanswered} (<= {upper(cert.wrong_arm)}) / {unanswered}",
        upper(e0 or 0.0),
        upper(hit or 0.0),
        f"{rate.mean:.3f} {interval(rate.low, rate.high)} ({name})",
        f"{found.voters.mean:.2f}",
        spent,
        f"{messages:,.0f}",
    ]


def cost_row(
    label: str, config: SimulationConfig, results: list[TrialResult], bound: LowerBound
) -> list[str]:
    """series, N, M, certified failure, failures, activations, x lower bound, messages."""
    spent, mean = activations(results)
    failures = sum(not r.correct for r in results)
    messages = sum(r.messages for r in results) / len(results)
    eta = config.algorithm.eta
    return [
        f"{label} (eta {eta:g})",
        f"{config.n_agents:,}",
        str(config.threshold),
        upper(certify_simulation(config).failure),
        f"{failures}/{len(results)}",
        spent,
        f"{bound.ratio(mean):,.0f}",
        f"{messages:,.0f}",
    ]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="CDE trials per N")
    parser.add_argument("--audit-trials", type=int, default=20, help="audited (and training)")
    parser.add_argument("--de-trials", type=int, default=10, help="DE trials per series and N")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", default=",".join(str(n) for n in CDE_AGENTS))
    parser.add_argument("--experiments", default=",".join(MEASURED))
    args = parser.parse_args()
    if args.trials < 2 * args.audit_trials or min(args.audit_trials, args.de_trials) < 2:
        parser.error("need --trials >= 2 --audit-trials and at least 2 audited and DE trials")
    agents = [int(n) for n in args.agents.split(",")]
    started = time.monotonic()
    print(
        f"`python3 scripts/cde_measurements.py --trials {args.trials} --audit-trials "
        f"{args.audit_trials} --de-trials {args.de_trials} --seed {args.seed}`\n"
    )
    for name in args.experiments.split(","):
        exp = EXPERIMENTS[name]
        env = exp.problem_def.environment
        bound = lower_bound(env, exp.epsilon, exp.delta, exp.every_arm)
        points = build_points(exp, agents, exp.series)
        cde_rows, cost_rows = [], []
        for point in points:
            cde = point.config.algorithm.reports
            trials = args.trials if cde else args.de_trials
            sys.stderr.write(f"{name}: {point.series.label} N={point.n_agents} ({trials} trials)\n")
            results = run_trials(point.config, trials, seed=args.seed)
            if cde:
                cde_rows.append(cde_row(point.config, results, args.audit_trials))
                cost_rows.append(cost_row("CDE", point.config, results, bound))
            else:
                cost_rows.append(cost_row(point.series.label, point.config, results, bound))
        cost_rows.sort(key=lambda row: (int(row[1].replace(",", "")), row[0]))
        print(f"### {name}: {exp.description}\n")
        cde_config = next(p.config for p in points if p.config.algorithm.reports)
        budget = cde_config.local_params().pulls  # the T the agents play (exact if Bernoulli)
        declared = "Bernoulli, exact T" if cde_config.bernoulli else "sub-Gaussian T"
        print(
            f"eps = {exp.epsilon:g}, delta = {exp.delta:g}; eps-optimal arms "
            f"{list(bound.optimal_arms)}; CDE's local run ({declared}): {budget} pulls per arm "
            f"({cde_config.local_budget:,} activations per agent); lower bound "
            f"{bound.activations:,.1f} activations (T(mu) = {bound.characteristic_time:.3g}, "
            f"kl(delta, 1 - delta) = {bound.information:.3g}).\n"
        )
        print(
            table(
                ("N", "M", "P", "certified failure", "failure rate [95% CI] (failures/trials)",
                 "wrong arm (its bound) / no answer",
                 "certified e0", "hit rate bound, uniform prior",
                 "audited hit rate [95% CI] (adversary)", "reported",
                 "activations", "messages"),
                cde_rows,
            )
        )  # fmt: skip
        print()
        print(
            table(
                ("series", "N", "M", "certified failure", "failures", "activations ± 95% CI",
                 "x lower bound", "messages"),
                cost_rows,
            )
        )  # fmt: skip
        print()
    sys.stderr.write(f"done in {time.monotonic() - started:.0f} s\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
