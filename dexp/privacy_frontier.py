"""`dexp reproduce privacy-frontier`: the vote audit against eta (beta), for DE, CE and DP-MASE.

Problem 1 (feraud-1), N = 64 by default. Each point is `dexp audit votes` with the same options
(SER3 for DE and CE), so any row can be re-run alone. The series:
- DE: eta over ETAS; the papers' figure (`papers_privacy`, no bound on a hit rate) 1 - eta.
- CE xi = 0.1: eta over CE_ETAS (CE needs (1 - xi)^(K-1) > 1 - eta); the papers' 1 - eta too.
- DE at CE's threshold: DE run at eta = eta_xi of each CE point, i.e. with CE's vote threshold M:
  what is left of CE's difference once M is the same is what the dropped votes do.
- DP-MASE eps_dp = 0.1: beta over BETAS, its local failure probability; the papers' 1 - beta.
Files: privacy-frontier.csv (a row per point), .json (the points, the command's parameters) and
.png (the votes-only hit rate against eta (beta) and against the sample complexity, with
95% intervals, the papers' figures dashed, the public baselines grey).
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.algorithms import AlgorithmConfig
from common.environments import problem
from common.params import corrupted_local_confidence
from common.simulation.config import DEFAULT_BUDGET
from dexp.audit_votes import build_config, run_point

NAME = "privacy-frontier"
DESCRIPTION = "what one agent's votes reveal, against eta (beta) and the sample complexity"
ETAS = (0.5, 0.7, 0.8, 0.9, 0.95)
CE_ETAS = (0.7, 0.8, 0.9, 0.95)
BETAS = (0.5, 0.7, 0.8, 0.9)
XI = 0.1
DP_EPSILON = 0.1
PROBLEM = "feraud-1"
CSV_COLUMNS = (
    "series",
    "level",
    "agents",
    "threshold",
    "trials",
    "papers_privacy",
    "votes_only",
    "votes_only_low",
    "votes_only_high",
    "votes_only_adversary",
    "never_voted_against",
    "never_voted_against_low",
    "never_voted_against_high",
    "with_outcome",
    "baseline",
    "baseline_low",
    "baseline_high",
    "uniform",
    "named_exactly",
    "sample_complexity",
    "sample_complexity_low",
    "sample_complexity_high",
    "messages",
)


@dataclass
class FrontierOutcome:
    points: list[dict[str, Any]]
    files: list[Path] = field(default_factory=list)
    elapsed: float = 0.0


def series_points(n_agents: int) -> list[tuple[str, float, AlgorithmConfig]]:
    """(series label, eta or beta on the x axis, algorithm) for every point."""
    k = problem(PROBLEM).environment.n_arms
    points: list[tuple[str, float, AlgorithmConfig]] = []
    points += [("DE", eta, AlgorithmConfig("de", eta=eta)) for eta in ETAS]
    points += [(f"CE xi={XI:g}", eta, AlgorithmConfig("ce", eta=eta, xi=XI)) for eta in CE_ETAS]
    for eta in CE_ETAS:
        eta_xi = corrupted_local_confidence(eta, XI, k)
        points.append(("DE at CE's M (at CE's eta)", eta, AlgorithmConfig("de", eta=eta_xi)))
    points += [
        (f"DP-MASE eps_dp={DP_EPSILON:g}", beta, AlgorithmConfig("dp-mase", beta=beta))
        for beta in BETAS
    ]
    return points


def run_frontier(
    out_dir: Path,
    trials: int = 20,
    training_trials: int = 20,
    seed: int = 0,
    n_agents: int = 64,
    engine: str = "fast",
    workers: int = 1,
    plots: bool = True,
    on_point: Callable[[str], None] | None = None,
) -> FrontierOutcome:
    started = time.perf_counter()
    built = problem(PROBLEM)
    configs = [
        (
            label,
            level,
            build_config(
                built.environment, built.activation, algo, n_agents, "all-agents", DEFAULT_BUDGET
            ),
        )
        for label, level, algo in series_points(n_agents)
    ]  # every configuration is checked before the first trial
    out_dir.mkdir(parents=True, exist_ok=True)
    points = []
    for label, level, config in configs:
        if on_point:
            on_point(f"{label} level={level:g}")
        point = run_point(config, trials, training_trials, seed, engine, workers)
        points.append({"series": label, "level": level, **point})
    outcome = FrontierOutcome(points)
    csv_path = out_dir / f"{NAME}.csv"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for p in points:
            writer.writerow(csv_row(p, trials))
    json_path = out_dir / f"{NAME}.json"
    parameters = {
        "problem": PROBLEM,
        "agents": n_agents,
        "trials": trials,
        "training_trials": training_trials,
        "seed": seed,
        "engine": engine,
    }
    json_path.write_text(json.dumps({"parameters": parameters, "points": points}, indent=2) + "\n")
    outcome.files += [csv_path, json_path]
    if plots:
        from dexp.plots import plot_privacy_frontier

        png = out_dir / f"{NAME}.png"
        plot_privacy_frontier(points, png, trials, n_agents)
        outcome.files.append(png)
    outcome.elapsed = time.perf_counter() - started
    return outcome


def csv_row(p: dict[str, Any], trials: int) -> dict[str, Any]:
    never = p["adversaries"]["never-voted-against"]
    return {
        "series": p["series"],
        "level": p["level"],
        "agents": p["agents"],
        "threshold": p["threshold"],
        "trials": trials,
        "papers_privacy": p["papers_privacy"],
        "votes_only": p["votes_only"]["mean"],
        "votes_only_low": p["votes_only"]["ci95"][0],
        "votes_only_high": p["votes_only"]["ci95"][1],
        "votes_only_adversary": p["votes_only"]["adversary"],
        "never_voted_against": never["mean"],
        "never_voted_against_low": never["ci95"][0],
        "never_voted_against_high": never["ci95"][1],
        "with_outcome": p["hit_rate"]["mean"],
        "baseline": p["baseline"]["mean"],
        "baseline_low": p["baseline"]["ci95"][0],
        "baseline_high": p["baseline"]["ci95"][1],
        "uniform": p["baselines"]["uniform"]["mean"],
        "named_exactly": p["named_exactly"]["mean"],
        "sample_complexity": p["sample_complexity"]["mean"],
        "sample_complexity_low": p["sample_complexity"]["ci95"][0],
        "sample_complexity_high": p["sample_complexity"]["ci95"][1],
        "messages": p["messages"],
    }
