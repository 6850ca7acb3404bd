"""`dexp audit ldp`: an empirical lower bound on the epsilon of what one LDP device sends.

The attack of common/ldp_audit.py on the product's own mechanism: with --noise-multiplier 1 the
bound must stay below the claim (B x dp_epsilon); a smaller multiplier cuts the noise (the
mechanism then runs at dp_epsilon / X) and shows that the attack finds a leak when there is one.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from common.ldp import DEFAULT_DP_EPSILON
from common.ldp_audit import PAIRS, STATISTICS, LDPAudit
from dexp.audit_dp import CONFIDENCE, _at_least, _verdict


def ldp(
    dp_epsilon: Annotated[
        float, typer.Option(help="The claimed privacy of one report.")
    ] = DEFAULT_DP_EPSILON,
    reports_per_agent: Annotated[
        int, typer.Option(help="B: the reports one device sends (the claim is B x dp_epsilon).")
    ] = 1,
    noise_multiplier: Annotated[
        float,
        typer.Option(help="X: the mechanism runs at dp_epsilon / X (1: the product)."),
    ] = 1.0,
    runs: Annotated[int, typer.Option(help="Fresh runs per history of the chosen pair.")] = 20_000,
    selection_runs: Annotated[
        int, typer.Option(help="Runs per history of every pair, to choose the test.")
    ] = 2_000,
    seed: Annotated[int, typer.Option(help="Seed of every run's coins.")] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout.")
    ] = False,
) -> None:
    """Distinguishing attack on the B reports of one LDP device over neighbouring reward
    histories; prints a 95% lower bound on epsilon beside the claim."""
    audit = LDPAudit(dp_epsilon, reports_per_agent, noise_multiplier, seed)
    _at_least("runs", runs, 1)
    _at_least("selection_runs", selection_runs, 1)
    started = time.perf_counter()
    result = audit.attack(selection_runs, runs, CONFIDENCE)
    test = result.test
    document: dict[str, Any] = {
        "dp_epsilon": dp_epsilon,
        "reports_per_agent": reports_per_agent,
        "claim": audit.claim,
        "noise_multiplier": noise_multiplier,
        "noise_epsilon": audit.mechanism.dp_epsilon * reports_per_agent,
        "epsilon_lower_bound": {"value": result.bound, "confidence": CONFIDENCE},
        "pair": PAIRS[test.pair],
        "event": f"{STATISTICS[test.statistic]} {'>' if test.above else '<='} {test.threshold:g}",
        "p1": result.p1,
        "p0": result.p0,
        "p1_ci": list(result.p1_ci),
        "p0_ci": list(result.p0_ci),
        "runs": runs,
        "selection_runs": selection_runs,
        "seed": seed,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if as_json:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    table = Table(title="dexp audit ldp", show_header=False, title_justify="left")
    table.add_column("item", style="bold")
    table.add_column("value")
    table.add_row(
        "mechanism",
        f"randomized response, dp_epsilon {dp_epsilon:g} per report, B = {reports_per_agent}, "
        f"noise x {noise_multiplier:g}: claim {audit.claim:g}",
    )
    table.add_row("runs", f"{selection_runs:,} to select, {runs:,} fresh (seed {seed})")
    table.add_row("pair", document["pair"])
    table.add_row("event", document["event"])
    for p in ("p1", "p0"):
        low, high = document[f"{p}_ci"]
        table.add_row(p, f"{document[p]:.4f}  [{low:.4f}, {high:.4f}]")
    bound = result.bound
    verdict = _verdict(bound, audit.claim, document["noise_epsilon"], noise_multiplier)
    table.add_row("epsilon >=", f"{bound:.4f} (confidence {CONFIDENCE:g}): {verdict}")
    Console(highlight=False, width=120).print(table)
