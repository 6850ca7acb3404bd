#!/usr/bin/env python3
"""The tables of docs/SUBROUTINES.md, section 3: each configuration's error bound p per agent, its
certified failure at several N, and what would certify delta, from common/certificate.py.

    python3 scripts/certified_failure.py [--delta 0.05] [--eta 0.9] [--arms 10]

Markdown on stdout. `dexp simulate --agents N --trials 1 --budget 1 --json` prints any one
configuration's `certified_failure` (and its warning) for one N.
"""

from __future__ import annotations

import argparse

from common.algorithms import AlgorithmConfig
from common.certificate import (
    LOCAL_ERROR_FACTORS,
    certify,
    largest_agents,
    remedy,
    upper,
)
from common.subroutines import USER_SUBROUTINES

AGENTS = (32, 48, 64, 128, 1024, 10_000)


def configurations(delta: float, eta: float) -> list[tuple[str, AlgorithmConfig]]:
    rows = [
        (f"DE-{name}", AlgorithmConfig(subroutine=name, delta=delta, eta=eta))
        for name in USER_SUBROUTINES
        if name != "ser4"  # SER4 is SER3 within an epoch (DSER4: the bound holds per epoch)
    ]
    rows.append(("CE xi=0.1 (ser3)", AlgorithmConfig(algorithm="ce", xi=0.1, delta=delta, eta=eta)))
    rows.append(
        ("DP-MASE beta=0.5", AlgorithmConfig(algorithm="dp-mase", subroutine="se", delta=delta))
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delta", type=float, default=0.05)
    parser.add_argument("--eta", type=float, default=0.9)
    parser.add_argument("--arms", type=int, default=10)
    args = parser.parse_args()
    k = args.arms
    header = ["configuration", "constant", "p", "M", *(f"N = {n:,}" for n in AGENTS)]
    header += ["most N", f"threshold at N = {AGENTS[-2]:,}"]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for label, algo in configurations(args.delta, args.eta):
        certificates = [certify(algo, k, n) for n in AGENTS]
        first = certificates[0]
        threshold = first.threshold or 0
        most = largest_agents(threshold, first.local_error, args.delta)
        fix = remedy(AGENTS[-2], threshold, first.local_error, args.delta, 0)
        cells = [
            label,
            f"{LOCAL_ERROR_FACTORS[algo.local_subroutine]:.4f}",
            upper(first.local_error),
            str(threshold),
            *(upper(c.failure) for c in certificates),
            "-" if most is None else f"{most:,}",
            f"{fix.threshold:,}",
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
