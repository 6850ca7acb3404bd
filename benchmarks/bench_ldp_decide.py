"""What one LDP decision costs the coordinator: `common.ldp.decide` on growing counts.

    PYTHONPATH=$PWD python benchmarks/bench_ldp_decide.py [--decisions 20000]

A coordinator runs `decide` once per publication (every 10 reports), on the published counts:
here 4 arms, 10 more reports on one arm per decision (so each call meets one new count, as in a
run), epsilon 0.05, delta 0.05, dp_epsilon 0.135 (bench_ldp_fleet.py's experiment). Prints the
process CPU time per decision and per report.
"""

from __future__ import annotations

import argparse
import random
import time

from common.ldp import decide


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    reports, ones = [0, 0, 0, 0], [0, 0, 0, 0]
    start = time.process_time()
    for _ in range(args.decisions):
        arm = rng.randrange(4)
        reports[arm] += 10
        ones[arm] += rng.randint(3, 7)
        decide(reports, ones, [0, 1, 2, 3], epsilon=0.05, delta=0.05, dp_epsilon=0.135)
    per = (time.process_time() - start) / args.decisions
    print(
        f"{args.decisions:,} decisions: {per * 1e6:.1f} us of CPU each, "
        f"{per * 1e6 / 10:.1f} us per report (a decision every 10 reports)"
    )


if __name__ == "__main__":
    main()
