"""Run many seeded trials of one configuration with either simulator, and summarize them."""

from __future__ import annotations

import dataclasses
import math
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
    """Trials in order; `workers` > 1 spreads them over processes (results are the same). LDP
    configurations run on common.simulation.ldp whichever engine is named (both dispatch)."""
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
    """Means and std of sample complexity and messages; failures (not eps-correct: a tie counts
    as a failure when a candidate is not eps-optimal) and ties, as counts and rates; stops."""
    sample = np.array([r.sample_complexity for r in results], dtype=float)
    messages = np.array([r.messages for r in results], dtype=float)
    failures = sum(not r.correct for r in results)
    ties = sum(r.stopped_by == "tie" for r in results)
    return {
        "sample_complexity": {"mean": float(sample.mean()), "std": float(sample.std())},
        "messages": {"mean": float(messages.mean()), "std": float(messages.std())},
        "settled_messages": float(np.mean([r.settled_messages for r in results])),  # a mean
        "failure_rate": failures / len(results),
        "failures": failures,
        "tie_rate": ties / len(results),
        "ties": ties,
        "stopped_by": {
            k: sum(r.stopped_by == k for r in results) for k in {r.stopped_by for r in results}
        },
    }


PILOT_MIN_BUDGET = 2_000_000


def run_length_without_resets(config: SimulationConfig, seed: int) -> tuple[int, bool]:
    """A pilot for DSER4: trial 0 of `seed` with SER3 in place of SER4 (no resets), on the fast
    engine, cut at max(1/phi + 1, 2M) activations (and the configuration's budget): (activations,
    whether it was cut short). One trial: an estimate of a run's length, not a measurement."""
    algo = config.algorithm
    if algo.phi <= 0:
        raise ParameterError("phi", algo.phi, "the pilot is for SER4 (phi > 0)")
    budget = min(config.budget, max(math.ceil(1.0 / algo.phi) + 1, PILOT_MIN_BUDGET))
    pilot = dataclasses.replace(
        config,
        algorithm=dataclasses.replace(algo, subroutine="ser3", phi=0.0),
        budget=budget,
    )
    result = _engine("fast")(pilot, trial_seeds(seed, 1)[0])
    return result.sample_complexity, result.stopped_by == "budget"


def reset_rate_warning(config: SimulationConfig, seed: int) -> str | None:
    """DSER4 (voting with SER4): each activation resets the experiment with probability phi, so
    1/phi activations pass between resets on average. When that is shorter than a run without
    resets (the pilot's length), most epochs end before the votes can finish: say so, with both
    numbers. None otherwise, and when the fast engine is not available for the pilot."""
    algo = config.algorithm
    if not algo.global_reset:
        return None
    try:
        length, cut = run_length_without_resets(config, seed)
    except ImportError:
        return None
    between = 1.0 / algo.phi
    if between >= length:
        return None
    run = f"more than {length:,}" if cut else f"about {length:,}"
    return (
        f"phi={algo.phi:g}: DSER4 resets the experiment every 1/phi = {between:,.0f} "
        f"activations on average, but a run without resets takes {run} (a SER3 pilot trial, "
        "same seed): most epochs end before their votes do, and runs may reach the budget"
    )


def attackers_warning(config: SimulationConfig) -> str | None:
    """The Byzantine agents vote against one arm only: every other arm needs the threshold's
    votes from the N - A honest agents. With fewer, no other arm can ever leave (CDE: they report
    one arm, and no other can be accepted)."""
    honest = config.n_agents - config.attackers
    threshold = config.threshold
    if config.attackers == 0 or threshold is None or honest >= threshold:
        return None
    if config.algorithm.reports:
        return (
            f"{honest} honest agents (N - attackers) < threshold {threshold}: no arm but the "
            f"liars' arm {config.lie_arm} can ever be accepted, so every run ends with it or with "
            "no answer"
        )
    return (
        f"{honest} honest agents (N - attackers) < threshold {threshold}: no arm other than the "
        f"attacked arm {config.attacked_arm} can ever leave, so every run ends tied"
    )


def simulation_warnings(config: SimulationConfig, seed: int) -> list[str]:
    """What a valid configuration risks: ties (N < 2 (M + f) - 1, or too few honest agents),
    DSER4 resets that come faster than a run can finish. None of them stops it."""
    warnings = config.algorithm.warnings(config.environment.n_arms, config.n_agents)
    extra = (attackers_warning(config), reset_rate_warning(config, seed))
    return [*warnings, *(w for w in extra if w)]
