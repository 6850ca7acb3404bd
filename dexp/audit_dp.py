"""`dexp audit dp`: an empirical lower bound on the epsilon of DP-MASE's local algorithm.

A distinguishing attack on neighbouring reward datasets (common/dp_audit.py): selection runs pick
the pair and the event, fresh runs give a Clopper-Pearson lower bound on epsilon at 95%. With
--noise-multiplier 1 the bound must stay below --dp-epsilon; a smaller multiplier weakens the noise
(its noise then gives epsilon = dp_epsilon / X) and shows that the attack can find a leak when there is one.
"""

from __future__ import annotations

import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from common.dp_audit import AttackResult, DPMASEAudit, MapFunction
from common.environments import build_problem
from common.errors import ParameterError
from dexp.options import DEFAULT_PROBLEM, DriftOption, MeansOption, ProblemOption, RewardsOption

CONFIDENCE = 0.95


def _at_least(name: str, value: int, low: int) -> None:
    if value < low:
        raise ParameterError(name, value, f"must be >= {low}")


def attack_json(audit: DPMASEAudit, result: AttackResult) -> dict[str, Any]:
    return {
        "pair": audit.describe(result.test.pair),
        "event": audit.describe_test(result.test),
        "p1": result.p1,
        "p0": result.p0,
        "p1_ci": list(result.p1_ci),
        "p0_ci": list(result.p0_ci),
        "k1": result.k1,
        "k0": result.k0,
        "selection_bound": result.selection.bound,
        "tests_compared": result.selection.tests_compared,
    }


def dp(
    problem: ProblemOption = None,
    means: MeansOption = None,
    rewards: RewardsOption = None,
    drift: DriftOption = None,
    dp_epsilon: Annotated[
        float, typer.Option(help="DP-MASE's claimed differential privacy level E.")
    ] = 0.1,
    noise_multiplier: Annotated[
        float,
        typer.Option(
            help="X: Laplace noise times X (1: the product; the noise then gives epsilon E / X)."
        ),
    ] = 1.0,
    beta: Annotated[float, typer.Option(help="DP-MASE: local failure probability.")] = 0.5,
    runs: Annotated[
        int, typer.Option(help="Fresh evaluation runs per dataset of the chosen pair.")
    ] = 10_000,
    selection_runs: Annotated[
        int, typer.Option(help="Runs per dataset of every candidate pair, to choose the test.")
    ] = 2_000,
    max_epochs: Annotated[
        int, typer.Option(help="Epochs per run (DP-SE has no eps-stop; later ones cost more).")
    ] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the datasets and of every run's noise.")] = 0,
    workers: Annotated[int, typer.Option(help="Processes running the runs.")] = 1,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout.")
    ] = False,
) -> None:
    """Distinguishing attack on DP-MASE's local algorithm (DP successive elimination) over
    neighbouring reward datasets; prints a 95% lower bound on its epsilon."""
    name = problem if problem is not None or means is not None else DEFAULT_PROBLEM
    env = build_problem(name, means, rewards, drift).environment
    audit = DPMASEAudit.for_environment(
        env,
        dp_epsilon=dp_epsilon,
        noise_multiplier=noise_multiplier,
        beta=beta,
        max_epochs=max_epochs,
        seed=seed,
    )
    _at_least("runs", runs, 1)
    _at_least("selection_runs", selection_runs, 1)
    _at_least("workers", workers, 1)

    started = time.perf_counter()
    if workers == 1:
        result = audit.attack(selection_runs, runs, CONFIDENCE)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            pool_map: MapFunction = pool.map
            chunk = math.ceil(max(runs, selection_runs) / workers)
            result = audit.attack(selection_runs, runs, CONFIDENCE, pool_map, chunk)
    elapsed = time.perf_counter() - started

    document = {
        "epsilon": dp_epsilon,
        "noise_multiplier": noise_multiplier,
        "noise_epsilon": audit.noise_epsilon,
        "epsilon_lower_bound": {"value": result.bound, "confidence": CONFIDENCE},
        "runs": runs,
        "selection_runs": selection_runs,
        "attack": attack_json(audit, result),
        "problem": name,
        "means": list(env.means),
        "beta": beta,
        "max_epochs": max_epochs,
        "candidate_pairs": len(audit.pairs()),
        "seed": seed,
        "workers": workers,
        "seconds": round(elapsed, 3),
    }
    if as_json:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    print_summary(document)


def _verdict(bound: float, epsilon: float, noise_epsilon: float, multiplier: float) -> str:
    if bound > epsilon:
        if multiplier == 1.0:
            return "ABOVE the claimed epsilon: evidence of a privacy bug"
        return (
            "above the claimed epsilon, as expected with the noise reduced (the attack has power)"
        )
    if bound == 0.0:
        return "no leak detected: a bound of 0 is no evidence that epsilon is small"
    return f"consistent with epsilon <= {noise_epsilon:g}"


def print_summary(doc: dict[str, Any]) -> None:
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=160)
    attack = doc["attack"]
    bound = doc["epsilon_lower_bound"]["value"]
    table = Table(title="dexp audit dp", show_header=False, title_justify="left")
    table.add_column("item", style="bold")
    table.add_column("value")
    means = ", ".join(f"{m:g}" for m in doc["means"])
    table.add_row("problem", f"{doc['problem']}: Bernoulli {means}")
    table.add_row(
        "mechanism",
        f"DP-SE, dp_epsilon E={doc['epsilon']:g}, beta={doc['beta']:g}, noise x "
        f"{doc['noise_multiplier']:g} (noise for epsilon {doc['noise_epsilon']:g}), "
        f"{doc['max_epochs']} epochs at most",
    )
    table.add_row(
        "runs",
        f"{doc['selection_runs']:,} per dataset x 2 x {doc['candidate_pairs']} pairs to select; "
        f"{doc['runs']:,} fresh per dataset to evaluate (seed {doc['seed']}, {doc['seconds']:.1f} s)",
    )
    table.add_row("pair", attack["pair"])
    table.add_row("event", attack["event"])
    for p in ("p1", "p0"):
        low, high = attack[f"{p}_ci"]
        table.add_row(p, f"{attack[p]:.4f}  [{low:.4f}, {high:.4f}]")
    table.add_row(
        "epsilon >=",
        f"{bound:.4f} (confidence {doc['epsilon_lower_bound']['confidence']:g}): "
        + _verdict(bound, doc["epsilon"], doc["noise_epsilon"], doc["noise_multiplier"]),
    )
    out.print(table)
