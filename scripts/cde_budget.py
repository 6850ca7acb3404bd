"""Print CDE's budget T per reward family (docs/CDE.md, sections 1 and 3): the sub-Gaussian T
(rewards in [0, 1]), the exact binomial T (rewards declared Bernoulli), whether every smaller T is
refuted (so the exact T is the smallest there is, not just the smallest the search found), the
certified worst-case chance of one given bad local answer at the sub-Gaussian T (as a fraction of
the eta / (K - 1) it must stay under), the T a Chernoff bound with the Bernoulli moment generating
function would give for every [0, 1] reward (not used: see the docs), and the CPU time of the
search. `python3 scripts/cde_budget.py` (about a minute)."""

from __future__ import annotations

import math
import time

from common.subroutines.bernoulli_budget import certifies, probed, worst_case
from common.subroutines.fixed_budget import samples_per_arm

ETA = 0.1
GRID = ((0.5, (2, 6, 10, 100)), (0.25, (2, 6, 10, 100)), (0.1, (2, 10, 100)), (0.05, (2, 10, 100)))


def smallest(epsilon: float, target: float, pulls: int) -> bool:
    """Every T in [1, pulls) is refuted: its sup of F_T provably exceeds the target."""
    return all(
        probed(epsilon, t) > target or worst_case(epsilon, t, target=target)[0] > target
        for t in range(1, pulls)
    )


def chernoff(epsilon: float, eta: float, n_arms: int) -> int:
    """T from P(mean_b >= mean_a) <= (1 - eps^2)^T, valid for all rewards in [0, 1]."""
    return max(1, math.ceil(math.log((n_arms - 1) / eta) / -math.log1p(-epsilon * epsilon)))


def main() -> None:
    print(f"eta = {ETA}: T pulls per arm, each bad arm's chance kept <= eta / (K - 1)")
    print(
        "| eps | K | sub-Gaussian T | exact Bernoulli T | ratio | smallest T? | "
        "worst case at the sub-Gaussian T / (eta / (K - 1)) | Chernoff [0, 1] T | CPU s |"
    )
    print("|---:|---:|---:|---:|---:|---|---|---:|---:|")
    for epsilon, arms in GRID:
        for k in arms:
            target = ETA / (k - 1)
            sub = samples_per_arm(epsilon, ETA, k, None)
            start = time.process_time()
            exact = samples_per_arm(epsilon, ETA, k, None, bernoulli=True)
            cpu = time.process_time() - start
            assert certifies(epsilon, exact, target)
            low, high = worst_case(epsilon, sub)
            verdict = "yes" if smallest(epsilon, target, exact) else "not shown"
            print(
                f"| {epsilon} | {k} | {sub} | {exact} | {exact / sub:.2f} | {verdict} | "
                f"[{low / target:.3f}, {high / target:.3f}] | {chernoff(epsilon, ETA, k)} | "
                f"{cpu:.2f} |"
            )


if __name__ == "__main__":
    main()
