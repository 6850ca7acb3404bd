"""In-process simulators of the whole protocol: `reference` (plain, one activation at a time through
common's objects) and `fast` (compiled, same semantics), behind `run_trials`."""

from common.simulation.config import SimulationConfig, TrialResult
from common.simulation.runner import ENGINES, run_trials, summarize, trial_seeds

__all__ = ["ENGINES", "SimulationConfig", "TrialResult", "run_trials", "summarize", "trial_seeds"]
