"""Print CDE's certificate over a grid (docs/CDE.md, section 3): for K arms, eta and privacy P, the
threshold M chosen at N, the horizon n the bound counts, its two terms, and the fewest agents that
certify delta. Pure arithmetic (common.cde): `python3 scripts/cde_certificate.py`."""

from __future__ import annotations

from common import cde
from common.certificate import upper
from common.subroutines.fixed_budget import samples_per_arm

DELTA, EPSILON = 0.05, 0.25


def main() -> None:
    print(f"delta = {DELTA}, eps = {EPSILON}, rewards in [0, 1], no liars")
    print(
        "| K | eta | T per arm | privacy P | e0 | N | M | horizon n | wrong arm | no answer | "
        "certified failure | fewest N |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, eta, privacy in ((2, 0.1, 0.6), (2, 0.1, 0.75), (10, 0.1, 0.3), (10, 0.1, 0.5)):
        fewest = cde.smallest_agents(DELTA, eta, privacy, k)
        for n in (64, 1024, 10_000):
            m = cde.threshold_for(n, DELTA, eta, privacy, k)
            bound = cde.failure(n, m, eta, privacy, k)
            print(
                f"| {k} | {eta} | {samples_per_arm(EPSILON, eta, k, None)} | {privacy} | "
                f"{cde.report_epsilon(privacy, k):.3f} | {n:,} | {m} | {bound.horizon:,} | "
                f"{upper(bound.wrong_arm)} | {upper(bound.no_answer)} | {upper(bound.total)} | "
                f"{fewest:,} |"
            )
    print()
    print(
        "The strongest privacy (smallest P, the hit-rate bound under a uniform prior, so the "
        "smallest e0) that certifies delta, eta = 0.1:"
    )
    print("| K | N = 64 | N = 1,024 | N = 10,000 | uniform guess 1/K |")
    print("|---:|---:|---:|---:|---:|")
    for k in (2, 10):
        row = [cde.strongest_privacy(n, DELTA, 0.1, k) for n in (64, 1024, 10_000)]
        cells = " | ".join("none" if p is None else f"{p:g}" for p in row)
        print(f"| {k} | {cells} | {1 / k:g} |")


if __name__ == "__main__":
    main()
