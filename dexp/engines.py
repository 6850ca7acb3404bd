"""The simulators behind --engine: common.simulation.{fast,reference}.run_trial(config, seed)."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np

from common.errors import ParameterError
from common.simulation import ENGINES, SimulationConfig, TrialResult

TrialFunction = Callable[[SimulationConfig, np.random.SeedSequence], TrialResult]


class EngineUnavailable(RuntimeError):
    """The engine is a valid name but its module cannot be imported here."""


def check_engine(name: str) -> str:
    if name not in ENGINES:
        raise ParameterError("engine", name, f"must be one of {', '.join(ENGINES)}")
    return name


def trial_function(name: str) -> TrialFunction:
    check_engine(name)
    module_name = f"common.simulation.{name}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        other = next(e for e in ENGINES if e != name)
        raise EngineUnavailable(
            f"engine {name!r} is unavailable ({exc}); try --engine {other}"
        ) from exc
    run_trial: TrialFunction = module.run_trial
    return run_trial
