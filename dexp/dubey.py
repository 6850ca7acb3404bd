"""`dexp regret`: Dubey & Pentland's cooperative UCB (common/regret/), group regret on a graph.

`dexp regret run` runs seeded trials of one configuration; `dexp reproduce dubey-private |
dubey-byzantine | dubey-gamma | dubey-liars` runs their Figure 1 (a, b, c) and our liar-fraction
experiment, writing NAME.csv (one row per series, setting and checkpoint), NAME.json and NAME.png.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import sys
import time as clock
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from common.environments import parse_numbers
from common.regret.ucb import REGRET_ALGORITHMS, RegretConfig, RegretResult, run_trials
from common.stats import describe

DUBEY_EXPERIMENTS = {
    "dubey-private": "Fig. 1a: private cooperative UCB (eps_dp 0.1, 0.5, 1) vs cooperative UCB "
    "vs UCB1 alone; M = 200, K = 5 random arms, G(200, 0.1), gamma = diameter // 2",
    "dubey-byzantine": "Fig. 1b: Byzantine-proof UCB, every agent's messages corrupted w.p. "
    "eps = 1e-3 (Q = 0), and eps = 0, vs UCB1 alone; arms in [0.3, 0.7]",
    "dubey-gamma": "Fig. 1c: group regret at T = 1000 against gamma = 1 .. 4",
    "dubey-liars": "Byzantine-proof UCB with a fraction of liars (every message a lie), Huber's "
    "and a targeted attacker",
}
DEFAULT_TRIALS = {"dubey-private": 20, "dubey-byzantine": 20, "dubey-gamma": 10, "dubey-liars": 10}
LIAR_FRACTIONS = (0.0, 0.05, 0.1, 0.2, 0.3)
CSV_COLUMNS = ("series", "setting", "t", "trials", "regret_mean", "regret_ci95_low",
               "regret_ci95_high", "honest_regret_mean", "honest_ci95_low", "honest_ci95_high",
               "best_share_mean", "best_share_ci95_low", "best_share_ci95_high",
               "messages_mean", "releases_mean")  # fmt: skip


def summarize(results: list[RegretResult]) -> dict[str, Any]:
    """Group regret at the horizon (mean, std, 95% t interval), per checkpoint means, the share
    of honest agents on the best arm, messages and releases."""

    def stats(values: list[float]) -> dict[str, Any]:
        d = describe(values)
        ci = [d.ci95_low, d.ci95_high] if math.isfinite(d.ci95_low) else None
        return {"mean": d.mean, "std": d.std, "ci95": ci}

    return {
        "group_regret": stats([r.group_regret[-1] for r in results]),
        "honest_regret": stats([r.honest_regret[-1] for r in results]),
        "best_share": stats([r.best_share for r in results]),
        "messages": stats([float(r.messages) for r in results]),
        "releases": stats([float(r.releases) for r in results]),
        "curve": {
            "times": results[0].times,
            "group_regret": [
                float(np.mean([r.group_regret[i] for r in results]))
                for i in range(len(results[0].times))
            ],
        },
    }


regret_app = typer.Typer(
    help="Regret minimisation on a network: Dubey & Pentland's private and Byzantine-proof UCB.",
    no_args_is_help=True,
)


@regret_app.command("run")
def run(
    algorithm: Annotated[
        str, typer.Option(help=" | ".join(REGRET_ALGORITHMS))
    ] = "dubey-private-ucb",
    agents: Annotated[int, typer.Option(help="Agents M.")] = 200,
    arms: Annotated[int, typer.Option(help="Arms K (means drawn per trial).")] = 5,
    means: Annotated[str | None, typer.Option(help="Fixed Bernoulli means, e.g. 0.9,0.8.")] = None,
    means_range: Annotated[
        str, typer.Option(help="LOW,HIGH: the range random means are drawn from.")
    ] = "0,1",
    horizon: Annotated[int, typer.Option(help="Rounds T.")] = 1000,
    graph_p: Annotated[float, typer.Option(help="Erdos-Renyi edge probability.")] = 0.1,
    gamma: Annotated[
        int | None, typer.Option(help="Hops a message travels (default diameter // 2).")
    ] = None,
    dp_epsilon: Annotated[float, typer.Option(help="Private: eps, release every 1/eps.")] = 0.1,
    v: Annotated[float, typer.Option(help="Private: noise exponent v in (1, 1.5).")] = 1.1,
    contamination: Annotated[
        float, typer.Option(help="Byzantine: the estimator's eps (Huber).")
    ] = 1e-3,
    liars: Annotated[float, typer.Option(help="Byzantine: fraction of lying agents.")] = 0.0,
    lie_rate: Annotated[float, typer.Option(help="Byzantine: a liar's lie probability.")] = 1.0,
    attack: Annotated[str, typer.Option(help="huber | targeted")] = "huber",
    q: Annotated[float, typer.Option(help="Huber's Q: a point mass at q.")] = 0.0,
    trials: Annotated[int, typer.Option(help="Trials.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """Seeded trials of one configuration: group regret at the horizon with its 95% interval."""
    low, high = parse_numbers("means_range", means_range)[:2]
    config = RegretConfig(
        algorithm=algorithm,
        n_agents=agents,
        n_arms=arms,
        horizon=horizon,
        means=parse_numbers("means", means) if means else None,
        means_low=low,
        means_high=high,
        graph_p=graph_p,
        gamma=gamma,
        dp_epsilon=dp_epsilon,
        v=v,
        contamination=contamination,
        liars=liars,
        lie_rate=lie_rate,
        attack=attack,
        q=q,
    )
    results = run_trials(config, trials, seed)
    summary = summarize(results)
    if as_json:
        doc = {
            "config": {**dataclasses.asdict(config), "trials": trials, "seed": seed},
            "trials": [r.to_json() for r in results],
            "summary": summary,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    console = Console(highlight=False, width=160)
    table = Table(title=f"dexp regret run: {algorithm}, {trials} trials, seed {seed}")
    for column in ("metric", "mean", "std", "95% CI"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key, label in (
        ("group_regret", f"group regret at T = {horizon}"),
        ("honest_regret", "honest agents' regret"),
        ("best_share", "honest agents on the best arm (last 10%)"),
        ("messages", "messages (per edge and direction per round)"),
        ("releases", "noisy means published"),
    ):
        s = summary[key]
        ci = f"[{s['ci95'][0]:,.3g}, {s['ci95'][1]:,.3g}]" if s["ci95"] else "-"
        table.add_row(label, f"{s['mean']:,.4g}", f"{s['std']:,.3g}", ci)
    console.print(table)


# ----------------------------------------------------------------------------- reproduce


def _series(name: str) -> list[tuple[str, str, RegretConfig]]:
    """(series, setting, configuration) of an experiment."""
    if name == "dubey-private":
        return [
            ("ucb1 alone", "-", RegretConfig("ucb1")),
            ("cooperative-ucb", "-", RegretConfig("cooperative-ucb")),
            *[
                (f"dubey-private-ucb eps={e:g}", "-", RegretConfig("dubey-private-ucb", dp_epsilon=e))
                for e in (0.1, 0.5, 1.0)
            ],
        ]  # fmt: skip
    if name == "dubey-byzantine":
        box = {"means_low": 0.3, "means_high": 0.7}
        return [
            ("ucb1 alone", "-", RegretConfig("ucb1", **box)),  # type: ignore[arg-type]
            ("byzantine eps=0", "-",
             RegretConfig("dubey-byzantine-ucb", contamination=0.0, **box)),  # type: ignore[arg-type]
            ("byzantine eps=1e-3", "-",
             RegretConfig("dubey-byzantine-ucb", contamination=1e-3, liars=1.0, lie_rate=1e-3,
                          **box)),  # type: ignore[arg-type]
        ]  # fmt: skip
    if name == "dubey-gamma":
        return [
            (alg, f"gamma={g}", RegretConfig(alg, gamma=g, checkpoints=1))
            for alg in ("dubey-private-ucb", "dubey-byzantine-ucb")
            for g in (1, 2, 3, 4)
        ]
    if name == "dubey-liars":
        box = {"means_low": 0.3, "means_high": 0.7}
        return [
            (f"liars {attack}", f"rho={rho:g}",
             RegretConfig("dubey-byzantine-ucb", liars=rho, attack=attack, contamination=max(rho, 1e-3),
                          checkpoints=1, **box))  # type: ignore[arg-type]
            for attack in ("huber", "targeted")
            for rho in LIAR_FRACTIONS
        ]  # fmt: skip
    raise KeyError(name)


def reproduce_dubey(
    name: str,
    out_dir: Path,
    trials: int | None,
    seed: int,
    plots: bool,
    on_point: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run one experiment of DUBEY_EXPERIMENTS; every series uses the same trial seeds."""
    n_trials = DEFAULT_TRIALS[name] if trials is None else trials
    started = clock.perf_counter()
    rows: list[dict[str, Any]] = []
    for series, setting, config in _series(name):
        if on_point:
            on_point(f"{series} {setting}")
        results = run_trials(config, n_trials, seed)
        for i, t in enumerate(results[0].times):
            regret = describe([r.group_regret[i] for r in results])
            honest = describe([r.honest_regret[i] for r in results])
            share = describe([r.best_share for r in results])
            rows.append({
                "series": series, "setting": setting, "t": t, "trials": n_trials,
                "regret_mean": regret.mean, "regret_ci95_low": regret.ci95_low,
                "regret_ci95_high": regret.ci95_high, "honest_regret_mean": honest.mean,
                "honest_ci95_low": honest.ci95_low, "honest_ci95_high": honest.ci95_high,
                "best_share_mean": share.mean, "best_share_ci95_low": share.ci95_low,
                "best_share_ci95_high": share.ci95_high,
                "messages_mean": float(np.mean([r.messages for r in results])),
                "releases_mean": float(np.mean([r.releases for r in results])),
            })  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [out_dir / f"{name}.csv"]
    with files[0].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    if plots:
        files.append(_plot(name, rows, out_dir / f"{name}.png"))
    files.append(out_dir / f"{name}.json")
    meta = {
        "experiment": name,
        "description": DUBEY_EXPERIMENTS[name],
        "trials": n_trials,
        "seed": seed,
        "series": [
            {"series": s, "setting": st, **dataclasses.asdict(c)} for s, st, c in _series(name)
        ],
        "elapsed_s": clock.perf_counter() - started,
        "files": [f.name for f in files],
    }
    files[-1].write_text(json.dumps(meta, indent=2) + "\n")
    return {"rows": rows, "files": files, "elapsed": meta["elapsed_s"], "trials": n_trials}


def _plot(name: str, rows: list[dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    series = list(dict.fromkeys(r["series"] for r in rows))
    for s in series:
        pts = [r for r in rows if r["series"] == s]
        if name in ("dubey-gamma", "dubey-liars"):
            x = [float(r["setting"].split("=")[1]) for r in pts]
            ax.set_xlabel("gamma" if name == "dubey-gamma" else "fraction of liars rho")
        else:
            x = [r["t"] for r in pts]
            ax.set_xlabel("round t")
        y = [r["honest_regret_mean"] for r in pts]
        low = [r["honest_ci95_low"] for r in pts]
        high = [r["honest_ci95_high"] for r in pts]
        ax.plot(x, y, marker="o", markersize=3, label=s)
        if all(math.isfinite(v) for v in low):
            ax.fill_between(x, low, high, alpha=0.2)
    ax.set_ylabel("group regret (honest agents)")
    ax.set_title(f"{name} ({rows[0]['trials']} trials per point, 95% CI)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def print_dubey(name: str, outcome: dict[str, Any], seed: int) -> None:
    console = Console(highlight=False, width=160)
    table = Table(
        title=f"{name}: {DUBEY_EXPERIMENTS[name]}; {outcome['trials']} trials, seed {seed}"
    )
    for column in ("series", "setting", "T", "group regret [95% CI]",
                   "honest regret [95% CI]", "on best arm [95% CI]"):  # fmt: skip
        table.add_column(column, justify="left" if column == "series" else "right")
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for r in outcome["rows"]:
        last[(r["series"], r["setting"])] = r
    for (series, setting), r in last.items():
        table.add_row(
            series,
            setting,
            str(r["t"]),
            f"{r['regret_mean']:,.0f} [{r['regret_ci95_low']:,.0f}, {r['regret_ci95_high']:,.0f}]",
            f"{r['honest_regret_mean']:,.0f} [{r['honest_ci95_low']:,.0f}, {r['honest_ci95_high']:,.0f}]",
            f"{r['best_share_mean']:.3f} [{r['best_share_ci95_low']:.3f}, {r['best_share_ci95_high']:.3f}]",
        )  # fmt: skip
    console.print(table)
