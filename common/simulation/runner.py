"""Run many seeded trials of one configuration with either simulator, and summarize them."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from common.errors import ParameterError
from common.simulation.config import SimulationConfig, TrialResult

ENGINES = ("fast", "reference")


def _engine(name: str) -> Callable[[SimulationConfig, np.random.SeedSequence], TrialResult]:
    if name == "reference":
        from common.simulation.reference import run_trial

        return run_trial
    if name == "fast":
        from common.simulation.fast import run_trial as fast_trial

        return fast_trial
    raise ParameterError("engine", name, f"must be one of {', '.join(ENGINES)}")


def trial_seeds(seed: int, trials: int) -> list[np.random.SeedSequence]:
    """Trial i of seed s is the same whatever the number of trials or workers."""
    return np.random.SeedSequence(seed).spawn(trials)


def _run_one(args: tuple[SimulationConfig, np.random.SeedSequence, str]) -> TrialResult:
    config, seed, engine = args
    return _engine(engine)(config, seed)


def run_trials(
    config: SimulationConfig,
    trials: int,
    seed: int = 0,
    engine: str = "fast",
    on_trial: Callable[[TrialResult], None] | None = None,
    workers: int = 1,
) -> list[TrialResult]:
    """Trials in order; `workers` > 1 spreads them over processes (results are the same)."""
    if trials < 1:
        raise ParameterError("trials", trials, "must be >= 1")
    _engine(engine)
    jobs = [(config, s, engine) for s in trial_seeds(seed, trials)]
    results: list[TrialResult] = []
    if workers <= 1:
        for job in jobs:
            results.append(_run_one(job))
            if on_trial:
                on_trial(results[-1])
        return results
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for result in pool.map(_run_one, jobs):
            results.append(result)
            if on_trial:
                on_trial(result)
    return results


def summarize(results: list[TrialResult]) -> dict[str, Any]:
    sample = np.array([r.sample_complexity for r in results], dtype=float)
    messages = np.array([r.messages for r in results], dtype=float)
    return {
        "sample_complexity": {"mean": float(sample.mean()), "std": float(sample.std())},
        "messages": {"mean": float(messages.mean()), "std": float(messages.std())},
        "failure_rate": float(np.mean([not r.correct for r in results])),
        "stopped_by": {
            k: sum(r.stopped_by == k for r in results) for k in {r.stopped_by for r in results}
        },
    }
