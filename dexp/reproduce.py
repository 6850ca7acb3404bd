"""Run one of the papers' experiments (dexp.experiments) and write its CSV files and figures.

DIR/NAME.csv: one row per (series, N, trial). DIR/NAME_summary.csv: one row per (series, N).
DIR/NAME_{suffix}.png: the figures. DIR/NAME.json: what was run (parameters, engine, seed, files).
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from common.certificate import certify_simulation
from common.errors import ParameterError
from common.privacy import certified_epsilon, hit_rate_uniform_prior
from common.simulation import SimulationConfig, TrialResult, trial_seeds
from common.simulation.config import DEFAULT_BUDGET
from common.stats import describe, proportion_interval
from dexp.engines import check_engine, trial_function
from dexp.experiments import Experiment, Series

TRIAL_COLUMNS = (
    "experiment",
    "series",
    "algorithm",
    "subroutine",
    "eta",
    "xi",
    "dp_epsilon",
    "beta",
    "privacy",
    "activation",
    "stop",
    "every_arm",
    "n_agents",
    "threshold",
    "trial",
    "seed",
    "engine",
    "sample_complexity",
    "messages",
    "best_arm",
    "correct",
    "stopped_by",
    "resets",
)

SUMMARY_COLUMNS = (
    "experiment",
    "series",
    "algorithm",
    "n_agents",
    "threshold",
    "trials",
    "sample_complexity_mean",
    "sample_complexity_std",
    "sample_complexity_ci95_low",
    "sample_complexity_ci95_high",
    "messages_mean",
    "messages_std",
    "messages_ci95_low",
    "messages_ci95_high",
    "failure_rate",
    "failures",
    "failure_ci95_low",
    "failure_ci95_high",
    "certified_failure",
    "certified_epsilon",
    "hit_rate_uniform_prior",
    "stopped_by",
)


@dataclass
class Point:
    """One (series, N) of an experiment and, once run, its trials in order."""

    series: Series
    n_agents: int
    config: SimulationConfig
    results: list[TrialResult | None] = field(default_factory=list)

    @property
    def threshold(self) -> int | None:
        return self.config.threshold

    @property
    def done(self) -> bool:
        return all(r is not None for r in self.results)

    def trial_results(self) -> list[TrialResult]:
        return [r for r in self.results if r is not None]


@dataclass
class Outcome:
    experiment: Experiment
    points: list[Point]
    trials: int
    seed: int
    engine: str
    files: list[Path]
    elapsed: float

    def summary_rows(self) -> list[dict[str, Any]]:
        return [summary_row(self.experiment, p) for p in self.points]


def build_points(
    exp: Experiment,
    agents: Sequence[int],
    series: Sequence[Series],
    budget: int = DEFAULT_BUDGET,
) -> list[Point]:
    """Every (series, N) configuration, validated before anything runs."""
    env = exp.problem_def.environment
    points = []
    for s in series:
        activation = s.activation_for(exp)
        for n in agents:
            try:
                config = SimulationConfig(
                    environment=env,
                    algorithm=s.algorithm_config(exp, n),
                    n_agents=n,
                    activation=activation,
                    stop=exp.stop,
                    budget=budget,
                )
            except ParameterError as err:
                raise ParameterError(
                    err.name, err.value, f"{err.valid} (series {s.label})"
                ) from None
            points.append(Point(s, n, config))
    return points


def _run_job(
    job: tuple[int, int, SimulationConfig, np.random.SeedSequence, str],
) -> tuple[int, int, TrialResult]:
    point, trial, config, seed, engine = job
    return point, trial, trial_function(engine)(config, seed)


def run_experiment(
    exp: Experiment,
    out_dir: Path,
    *,
    trials: int | None = None,
    seed: int = 0,
    workers: int = 1,
    agents: Sequence[int] | None = None,
    series: list[str] | None = None,
    engine: str = "fast",
    budget: int = DEFAULT_BUDGET,
    plots: bool = True,
    on_start: Callable[[list[Point]], None] | None = None,
    on_trial: Callable[[Point], None] | None = None,
    on_point: Callable[[Point], None] | None = None,
) -> Outcome:
    """Run every (series, N) point, `trials` trials each, then write the files into `out_dir`."""
    trials = exp.trials if trials is None else trials
    if trials < 1:
        raise ParameterError("trials", trials, "must be >= 1")
    if workers < 1:
        raise ParameterError("workers", workers, "must be >= 1")
    if seed < 0:
        raise ParameterError("seed", seed, "must be >= 0")
    agents = tuple(agents or exp.agents)
    for n in agents:
        if n < 1:
            raise ParameterError("agents", n, "must be >= 1")
    check_engine(engine)
    points = build_points(exp, agents, exp.select(series), budget)
    trial_function(engine)  # fail now, not in a worker, if the engine cannot be imported
    out_dir.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    seeds = trial_seeds(seed, trials)
    for p in points:
        p.results = [None] * trials
    if on_start:
        on_start(points)

    def record(i: int, trial: int, result: TrialResult) -> None:
        point = points[i]
        point.results[trial] = result
        if on_trial:
            on_trial(point)
        if on_point and point.done:
            on_point(point)

    jobs = [(i, t, p.config, seeds[t], engine) for i, p in enumerate(points) for t in range(trials)]
    if workers == 1:
        for job in jobs:
            record(*_run_job(job))
    else:
        # Largest N first, so that the long trials do not all land at the end.
        jobs.sort(key=lambda j: -points[j[0]].n_agents)
        pool = ProcessPoolExecutor(max_workers=workers)
        try:
            pending: set[Future[tuple[int, int, TrialResult]]] = {
                pool.submit(_run_job, job) for job in jobs
            }
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    record(*future.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()

    outcome = Outcome(exp, points, trials, seed, engine, [], time.perf_counter() - started)
    outcome.files = write_outputs(outcome, out_dir, plots=plots)
    return outcome


def trial_rows(outcome: Outcome) -> list[dict[str, Any]]:
    exp = outcome.experiment
    rows = []
    for p in outcome.points:
        algo = p.config.algorithm
        for t, r in enumerate(p.trial_results()):
            rows.append(
                {
                    "experiment": exp.name,
                    "series": p.series.label,
                    "algorithm": algo.algorithm,
                    "subroutine": algo.local_subroutine,
                    "eta": algo.eta,
                    "xi": algo.xi,
                    "dp_epsilon": algo.dp_epsilon if algo.algorithm == "dp-mase" else "",
                    "beta": algo.beta if algo.algorithm == "dp-mase" else "",
                    "privacy": algo.privacy if algo.reports else "",
                    "activation": p.config.activation.spec,
                    "stop": p.config.stop,
                    "every_arm": algo.every_arm,
                    "n_agents": p.n_agents,
                    "threshold": "" if p.threshold is None else p.threshold,
                    "trial": t,
                    "seed": outcome.seed,
                    "engine": outcome.engine,
                    "sample_complexity": r.sample_complexity,
                    "messages": r.messages,
                    "best_arm": r.best_arm,
                    "correct": r.correct,
                    "stopped_by": r.stopped_by,
                    "resets": r.resets,
                }
            )
    return rows


def stopped_by_text(results: Sequence[TrialResult]) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.stopped_by] = counts.get(r.stopped_by, 0) + 1
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items()))


def summary_row(exp: Experiment, p: Point) -> dict[str, Any]:
    results = p.trial_results()
    sample = describe([r.sample_complexity for r in results])
    messages = describe([r.messages for r in results])
    failures = sum(not r.correct for r in results)
    failure_ci = proportion_interval(failures, len(results)) if results else (np.nan, np.nan)
    e0, hit_rate = certified_epsilon(p.config), hit_rate_uniform_prior(p.config)
    return {
        "experiment": exp.name,
        "series": p.series.label,
        "algorithm": p.config.algorithm.algorithm,
        "n_agents": p.n_agents,
        "threshold": "" if p.threshold is None else p.threshold,
        "trials": len(results),
        "sample_complexity_mean": sample.mean,
        "sample_complexity_std": sample.std,
        "sample_complexity_ci95_low": sample.ci95_low,
        "sample_complexity_ci95_high": sample.ci95_high,
        "messages_mean": messages.mean,
        "messages_std": messages.std,
        "messages_ci95_low": messages.ci95_low,
        "messages_ci95_high": messages.ci95_high,
        "failure_rate": float(np.mean([not r.correct for r in results])) if results else np.nan,
        "failures": failures,
        "failure_ci95_low": failure_ci[0],
        "failure_ci95_high": failure_ci[1],
        "certified_failure": certify_simulation(p.config).failure,
        "certified_epsilon": "" if e0 is None else e0,
        "hit_rate_uniform_prior": "" if hit_rate is None else hit_rate,
        "stopped_by": stopped_by_text(results),
    }


def _write_csv(path: Path, columns: Sequence[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)


def write_outputs(outcome: Outcome, out_dir: Path, plots: bool = True) -> list[Path]:
    exp = outcome.experiment
    files = []
    trials_csv = out_dir / f"{exp.name}.csv"
    _write_csv(trials_csv, TRIAL_COLUMNS, trial_rows(outcome))
    files.append(trials_csv)
    summary_csv = out_dir / f"{exp.name}_summary.csv"
    summary = outcome.summary_rows()
    _write_csv(summary_csv, SUMMARY_COLUMNS, summary)
    files.append(summary_csv)
    if plots:
        from dexp.plots import plot_figure

        for figure in exp.figures:
            path = out_dir / f"{exp.name}_{figure.suffix}.png"
            if plot_figure(figure, summary, path, trials=outcome.trials):
                files.append(path)
    meta = out_dir / f"{exp.name}.json"
    files.append(meta)
    meta.write_text(json.dumps(metadata(outcome, files), indent=2) + "\n")
    return files


def _version() -> str:
    try:
        return version("dexp")
    except PackageNotFoundError:
        return "unknown"


def metadata(outcome: Outcome, files: list[Path]) -> dict[str, Any]:
    exp = outcome.experiment
    series = []
    for label in dict.fromkeys(p.series.label for p in outcome.points):
        point = next(p for p in outcome.points if p.series.label == label)
        series.append(
            {
                **asdict(point.series),
                "activation": point.config.activation.spec,
                "threshold": point.threshold,
            }
        )
    return {
        "experiment": exp.name,
        "description": exp.description,
        "source": exp.source,
        "claims": list(exp.claims),
        "problem": exp.problem,
        "stop": exp.stop,
        "every_arm": exp.every_arm,
        "epsilon": exp.epsilon,
        "delta": exp.delta,
        "eta": exp.eta,
        "agents": sorted({p.n_agents for p in outcome.points}),
        "trials": outcome.trials,
        "seed": outcome.seed,
        "engine": outcome.engine,
        "budget": outcome.points[0].config.budget if outcome.points else DEFAULT_BUDGET,
        "series": series,
        "elapsed_seconds": round(outcome.elapsed, 3),
        "dexp_version": _version(),
        "files": [f.name for f in files],
    }
