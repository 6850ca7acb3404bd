"""Hillel et al.'s synchronous algorithms on the command line (common/hillel.py).

`dexp simulate --algorithm hillel-one-round | hillel-multi-round` reports `time` (pulls per agent,
the paper's measure) next to `sample_complexity` (all pulls), `messages` and `rounds`.

`dexp reproduce hillel-speedup`: the parallel speed-up as the number of players k grows, on
SPEEDUP_MEANS (32 Bernoulli arms, one 0.2 above the rest), best-arm identification (epsilon = 0).
- multi-round (delta = 0.05): speed-up = the mean time of one player over the mean time of k.
- one-round (the paper's version at success 2/3, no amplification): for each k, the smallest
  horizon T on a 2^(1/4) grid whose success rate over the trials is >= 2/3, found by doubling then
  bisection (the same trial seeds at every T); the baseline is one player running A (Successive
  Elimination at confidence 2/3) on all arms with T pulls, searched the same way.
Files: hillel-speedup.csv (one row per algorithm and k), .json (parameters, slopes), .png.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time as clock
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from common.environments import Environment
from common.errors import ParameterError
from common.hillel import HillelConfig, HillelResult, run_trial, run_trials, serial_trial
from common.stats import describe, proportion_interval

NAME = "hillel-speedup"
DESCRIPTION = "parallel speed-up of Hillel et al.'s one- and multi-round algorithms against k"
SPEEDUP_MEANS = (0.7,) + (0.5,) * 31
SPEEDUP_AGENTS = (1, 4, 16, 36, 64, 144, 256, 576, 1024)
SPEEDUP_DELTA = 0.05
TARGET = 2.0 / 3.0
GRID = 2.0**0.25
CSV_COLUMNS = (
    "algorithm",
    "k",
    "in_theorem_range",
    "trials",
    "time_mean",
    "time_ci95_low",
    "time_ci95_high",
    "horizon",
    "horizon_below",
    "success_rate",
    "success_ci95_low",
    "success_ci95_high",
    "speedup",
    "speedup_over_sqrt_k",
    "sample_complexity_mean",
    "messages",
    "rounds_mean",
)


def summary_json(results: list[HillelResult]) -> dict[str, Any]:
    """Mean, std and 95% t interval of each count; failures with a 95% Wilson interval."""
    out: dict[str, Any] = {}
    for metric in ("time", "sample_complexity", "messages", "rounds"):
        d = describe([getattr(r, metric) for r in results])
        ci = [d.ci95_low, d.ci95_high] if math.isfinite(d.ci95_low) else None
        out[metric] = {"mean": d.mean, "std": d.std, "ci95": ci}
    failures = sum(not r.correct for r in results)
    out["failures"] = failures
    out["failure_rate"] = failures / len(results)
    out["failure_rate_ci95"] = list(proportion_interval(failures, len(results)))
    stops = sorted({r.stopped_by for r in results})
    out["stopped_by"] = {s: sum(r.stopped_by == s for r in results) for s in stops}
    return out


def simulate(
    config: HillelConfig,
    problem: str | None,
    trials: int,
    seed: int,
    as_json: bool,
    per_trial: bool | None,
) -> None:
    """`dexp simulate` for the two Hillel algorithms: a table, or one JSON object."""
    for warning in config.warnings():
        sys.stderr.write(f"warning: {warning}\n")
    results = run_trials(config, trials, seed)
    env = config.environment
    config_json = {
        "problem": problem,
        "means": list(env.means),
        "rewards": env.rewards,
        "sigma": None if env.bounded else env.sigma,
        "agents": config.n_agents,
        "algorithm": config.algorithm,
        "epsilon": config.epsilon,
        "delta": config.delta,
        "horizon": config.horizon,
        "repeats": config.runs if config.algorithm == "hillel-one-round" else None,
        "subset_size": config.subset_size if config.algorithm == "hillel-one-round" else None,
        "max_time": config.max_time,
        "trials": trials,
        "seed": seed,
    }
    summary = summary_json(results)
    if as_json:
        document = {
            "config": config_json,
            "trials": [r.to_json() for r in results],
            "summary": summary,
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    console = Console(highlight=False, width=160)
    table = Table(title="dexp simulate (synchronous players)", show_header=False)
    for key, value in config_json.items():
        if value is not None:
            table.add_row(key, str(value))
    console.print(table)
    if per_trial if per_trial is not None else trials <= 30:
        rows = Table(title="trials", title_justify="left")
        for column in ("trial", "time", "pulls", "messages", "rounds", "best arm", "correct"):
            rows.add_column(column, justify="right")
        for i, r in enumerate(results):
            rows.add_row(
                str(i),
                f"{r.time:,}",
                f"{r.sample_complexity:,}",
                f"{r.messages:,}",
                str(r.rounds),
                str(r.best_arm),
                "yes" if r.correct else "[red]no[/red]",
            )
        console.print(rows)
    table = Table(title=f"summary of {trials} trials", title_justify="left")
    for column in ("metric", "mean", "std", "95% CI"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for metric, label in (
        ("time", "time (pulls per agent)"),
        ("sample_complexity", "sample complexity (all pulls)"),
        ("messages", "messages"),
        ("rounds", "rounds"),
    ):
        s = summary[metric]
        ci = f"[{s['ci95'][0]:,.1f}, {s['ci95'][1]:,.1f}]" if s["ci95"] else "-"
        table.add_row(label, f"{s['mean']:,.1f}", f"{s['std']:,.1f}", ci)
    low, high = summary["failure_rate_ci95"]
    table.add_row(
        "failure rate",
        f"{summary['failure_rate']:.3g} ({summary['failures']}/{trials})",
        "",
        f"[{low:.3g}, {high:.3g}]",
    )
    console.print(table)


# ----------------------------------------------------------------------------- speed-up


def _success(k: int, horizon: int, seeds: list[np.random.SeedSequence], env: Environment) -> int:
    if k == 1:
        return sum(serial_trial(env, 0.0, horizon, s)[1] for s in seeds)
    config = HillelConfig(
        env, "hillel-one-round", n_agents=k, epsilon=0.0, delta=0.5, horizon=horizon, repeats=1
    )
    return sum(run_trial(config, s).correct for s in seeds)


def smallest_horizon(
    k: int, env: Environment, seeds: list[np.random.SeedSequence], start: int
) -> tuple[int, int, int]:
    """(T, successes at T, the grid point below T): the smallest T of the grid
    round(start * 2^(g/4)) whose success rate is >= 2/3, by doubling then bisection."""
    need = math.ceil(TARGET * len(seeds) - 1e-9)

    def grid(g: int) -> int:
        return max(2, round(start * GRID**g))

    ok: dict[int, int] = {}

    def good(g: int) -> bool:
        if g not in ok:
            ok[g] = _success(k, grid(g), seeds, env)
        return ok[g] >= need

    low, high = -1, 0  # grid(low) fails (or is below the grid), grid(high) succeeds
    while not good(high):
        low, high = high, high + 4
        if grid(high) > 2**24:
            raise ParameterError("horizon", grid(high), "no horizon up to 2^24 reached 2/3")
    if low == -1:  # the start already succeeds: walk down
        while high > -64 and grid(high - 1) < grid(high) and good(high - 1):
            high -= 1
        low = high - 1
    while high - low > 1:
        mid = (low + high) // 2
        if good(mid):
            high = mid
        else:
            low = mid
    return grid(high), ok[high], grid(low)


def _fit_slope(ks: list[int], speedups: list[float]) -> float | None:
    """Least-squares slope of log(speed-up) on log(k); None with fewer than two points."""
    if len(ks) < 2:
        return None
    x, y = np.log(np.asarray(ks, float)), np.log(np.asarray(speedups, float))
    return float(np.polyfit(x, y, 1)[0])


def run_speedup(
    out_dir: Path,
    trials: int = 200,
    seed: int = 0,
    agents: tuple[int, ...] = SPEEDUP_AGENTS,
    plots: bool = True,
    on_point: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Both algorithms for every k of `agents` (1 is added: it is the baseline)."""
    if trials < 3:
        raise ParameterError("trials", trials, "must be >= 3 (a 2/3 success rate)")
    if any(k < 1 for k in agents):
        raise ParameterError("agents", agents, "must be >= 1")
    ks = sorted({1, *agents})
    env = Environment(means=SPEEDUP_MEANS)
    n = env.n_arms
    seeds = np.random.SeedSequence(seed).spawn(trials)
    started = clock.perf_counter()
    rows: list[dict[str, Any]] = []
    for k in ks:  # multi-round
        if on_point:
            on_point(f"multi-round k={k}")
        config = HillelConfig(env, "hillel-multi-round", n_agents=k, epsilon=0.0,
                              delta=SPEEDUP_DELTA)  # fmt: skip
        results = [run_trial(config, s) for s in seeds]
        rows.append(_row("multi-round", k, results, None, None, True))
    base = rows[0]["time_mean"]
    for row in rows:
        row["speedup"] = base / row["time_mean"]
    start = 4 * n
    for k in ks:  # one-round
        if on_point:
            on_point(f"one-round k={k}")
        horizon, successes, below = smallest_horizon(k, env, seeds, start)
        start = horizon
        in_range = k == 1 or 6 <= math.sqrt(k) <= n
        row = _row("one-round", k, None, horizon, below, in_range)
        low, high = proportion_interval(successes, trials)
        row.update(success_rate=successes / trials, success_ci95_low=low, success_ci95_high=high)
        rows.append(row)
    one = [r for r in rows if r["algorithm"] == "one-round"]
    for row in one:
        row["speedup"] = one[0]["horizon"] / row["horizon"]
    for row in rows:  # Theorem 3.1 bounds the one-round time by O(serial / sqrt(k)): no constant
        row["speedup_over_sqrt_k"] = row["speedup"] / math.sqrt(row["k"])
    slopes = {
        "multi-round": _fit_slope(
            [r["k"] for r in rows[1 : len(ks)]], [r["speedup"] for r in rows[1 : len(ks)]]
        ),
        "one-round (theorem range)": _fit_slope(
            [r["k"] for r in one if r["k"] > 1 and r["in_theorem_range"]],
            [r["speedup"] for r in one if r["k"] > 1 and r["in_theorem_range"]],
        ),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [out_dir / f"{NAME}.csv"]
    with files[0].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    if plots:
        files.append(_plot(rows, out_dir / f"{NAME}.png", trials))
    meta = {
        "experiment": NAME,
        "description": DESCRIPTION,
        "means": list(SPEEDUP_MEANS),
        "epsilon": 0.0,
        "delta_multi_round": SPEEDUP_DELTA,
        "one_round_target": TARGET,
        "trials": trials,
        "seed": seed,
        "agents": ks,
        "slopes": slopes,
        "elapsed_s": clock.perf_counter() - started,
        "files": [f.name for f in files] + [f"{NAME}.json"],
    }
    files.append(out_dir / f"{NAME}.json")
    files[-1].write_text(json.dumps(meta, indent=2) + "\n")
    return {"rows": rows, "slopes": slopes, "files": files, "elapsed": meta["elapsed_s"]}


def _row(
    algorithm: str,
    k: int,
    results: list[HillelResult] | None,
    horizon: int | None,
    below: int | None,
    in_range: bool,
) -> dict[str, Any]:
    row: dict[str, Any] = {c: "" for c in CSV_COLUMNS}
    row.update(algorithm=algorithm, k=k, in_theorem_range=in_range, horizon=horizon or "")
    row["horizon_below"] = below or ""
    if results is None:  # one-round: every player makes exactly T pulls
        row.update(time_mean=horizon, sample_complexity_mean=(horizon or 0) * k, messages=k)
        row["rounds_mean"] = 1
        return row
    t = describe([r.time for r in results])
    failures = sum(not r.correct for r in results)
    low, high = proportion_interval(len(results) - failures, len(results))
    row.update(
        trials=len(results),
        time_mean=t.mean,
        time_ci95_low=t.ci95_low,
        time_ci95_high=t.ci95_high,
        success_rate=1 - failures / len(results),
        success_ci95_low=low,
        success_ci95_high=high,
        sample_complexity_mean=float(np.mean([r.sample_complexity for r in results])),
        messages=float(np.mean([r.messages for r in results])),
        rounds_mean=float(np.mean([r.rounds for r in results])),
    )
    return row


def _plot(rows: list[dict[str, Any]], path: Path, trials: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for algorithm, marker in (("multi-round", "o"), ("one-round", "s")):
        pts = [r for r in rows if r["algorithm"] == algorithm and r["k"] > 1]
        ax.plot([r["k"] for r in pts], [r["speedup"] for r in pts], marker=marker,
                label=f"{algorithm} (measured)")  # fmt: skip
    ks = np.array(sorted({r["k"] for r in rows if r["k"] > 1}), float)
    ax.plot(ks, ks, ":", color="grey", label="k")
    ax.plot(ks, np.sqrt(ks), "--", color="grey", label="sqrt(k)")
    ax.axvspan(36, 1024, color="0.93", zorder=0, label="one-round theorem: 6 <= sqrt(k) <= n")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("players k")
    ax.set_ylabel("speed-up (serial time / time per player)")
    ax.set_title(f"Hillel et al.: 32 arms, best-arm identification ({trials} trials per point)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def print_speedup(outcome: dict[str, Any], trials: int, seed: int) -> None:
    console = Console(highlight=False, width=160)
    table = Table(title=f"{NAME}: {DESCRIPTION}; {trials} trials per point, seed {seed}")
    for column in ("algorithm", "k", "time per player [95% CI]", "T found", "success [95%]",
                   "speed-up", "/ sqrt(k)", "messages"):  # fmt: skip
        table.add_column(column, justify="left" if column == "algorithm" else "right")
    for r in outcome["rows"]:
        if r["time_ci95_low"] != "" and math.isfinite(r["time_ci95_low"]):
            t = f"{r['time_mean']:,.1f} [{r['time_ci95_low']:,.1f}, {r['time_ci95_high']:,.1f}]"
        else:
            t = f"{r['time_mean']:,.0f}"
        success = (
            f"{r['success_rate']:.3f} [{r['success_ci95_low']:.3f}, {r['success_ci95_high']:.3f}]"
        )
        found = f"{r['horizon']} (>{r['horizon_below']})" if r["horizon"] != "" else "-"
        table.add_row(r["algorithm"] + ("" if r["in_theorem_range"] else " *"), str(r["k"]), t,
                      found, success, f"{r['speedup']:.2f}", f"{r['speedup_over_sqrt_k']:.2f}",
                      f"{r['messages']:,.0f}")  # fmt: skip
    console.print(table)
    slopes = ", ".join(
        f"{a}: {'-' if s is None else f'{s:.3f}'}" for a, s in outcome["slopes"].items()
    )
    console.print(f"log-log slope of the speed-up against k: {slopes}")
    console.print("* outside the one-round theorem's range 6 <= sqrt(k) <= n = 32")
