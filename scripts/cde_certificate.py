"""Print CDE's certificate over a grid (docs/CDE.md, section 3): for K arms, eta and privacy P, the
threshold M chosen at N, the two terms of the bound (a wrong arm accepted, with the number s of
eps-optimal arms at which it is likeliest; no answer with the N agents), the fewest agents that
certify delta, and the strongest privacy that does. Pure arithmetic (common.cde):
`python3 scripts/cde_certificate.py` (a few seconds)."""

from __future__ import annotations

import time

from common import cde
from common.certificate import upper
from common.subroutines.fixed_budget import samples_per_arm

DELTA, EPSILON, ETA = 0.05, 0.25, 0.1


def main() -> None:
    started = time.process_time()
    print(f"delta = {DELTA}, eps = {EPSILON}, eta = {ETA}, no liars")
    print(
        "| K | T per arm ([0, 1] / Bernoulli) | privacy P | e0 | N | M | wrong arm (worst s) | "
        "no answer | certified failure | fewest N |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, privacy in ((2, 0.6), (2, 0.75), (10, 0.3), (10, 0.5)):
        fewest = cde.smallest_agents(DELTA, ETA, privacy, k)
        budget = (
            f"{samples_per_arm(EPSILON, ETA, k, None)} / "
            f"{samples_per_arm(EPSILON, ETA, k, None, bernoulli=True)}"
        )
        for n in (64, 1024, 10_000):
            m = cde.threshold_for(n, DELTA, ETA, privacy, k)
            bound = cde.failure(n, m, ETA, privacy, k)
            print(
                f"| {k} | {budget} | {privacy} | {cde.report_epsilon(privacy, k):.3f} | {n:,} | "
                f"{m} | {upper(bound.wrong_arm)} ({bound.optimal_arms}) | "
                f"{upper(bound.no_answer)} | {upper(bound.total)} | {fewest:,} |"
            )
    print()
    print(f"The strongest privacy that certifies delta, eta = {ETA}: P (e0)")
    print("| K | N = 64 | N = 1,024 | N = 10,000 | a uniform guess, 1/K |")
    print("|---:|---:|---:|---:|---:|")
    for k in (2, 10):
        cells = []
        for n in (64, 1024, 10_000):
            p = cde.strongest_privacy(n, DELTA, ETA, k)
            cells.append("none" if p is None else f"{p:g} ({cde.report_epsilon(p, k):.3f})")
        print(f"| {k} | {' | '.join(cells)} | {1 / k:g} |")
    print(f"\n({time.process_time() - started:.1f} s of CPU)")


if __name__ == "__main__":
    main()
