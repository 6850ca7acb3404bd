"""Thresholds and local confidence levels of the papers, with their validity ranges.

M = ceil(log(delta) / log(eta)) (ALGORITHMS.md: the paper's 28 is a truncation; 29 is right for
delta=0.05, eta=0.9). CE runs its local subroutine at eta_xi so that the apparent privacy stays eta.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from common.errors import ParameterError

# log(delta)/log(eta) can land a hair above an integer through rounding; never round a true
# integer up to the next one.
_CEIL_SLACK = 1e-9


def check_open_unit(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and 0.0 < value < 1.0):
        raise ParameterError(name, value, "must be in (0, 1)")
    return float(value)


def check_epsilon(value: float) -> float:
    if not (isinstance(value, int | float) and value > 0.0):
        raise ParameterError("epsilon", value, "must be > 0")
    return float(value)


def check_epsilon_for_rewards(value: float, sigma: float | None) -> float:
    """Rewards in [0, 1] (sigma None): eps must be in (0, 1]. Above 1 every arm is eps-optimal and
    the question has no answer to find; an experiment set up so is a mistake, refused."""
    if sigma is None and value > 1.0:
        raise ParameterError(
            "epsilon", value, "must be in (0, 1] for rewards in [0, 1] (every arm is within 1)"
        )
    return value


# What an experiment declares of its rewards beside `sigma` (which, when set, means
# sigma-sub-Gaussian): "bounded", every reward in [0, 1]; "bernoulli", every reward 0 or 1, which
# CDE's exact budget needs (common.subroutines.bernoulli_budget). The agents refuse any other
# reward in a Bernoulli experiment (`check_bernoulli_rewards`): the guarantee would not hold.
BOUNDED_REWARDS = "bounded"
BERNOULLI_REWARDS = "bernoulli"
REWARD_FAMILIES = (BOUNDED_REWARDS, BERNOULLI_REWARDS)


def check_reward_family(rewards: str, sigma: float | None) -> bool:
    """True for Bernoulli rewards; refuses an unknown family, or sigma with Bernoulli rewards."""
    if rewards not in REWARD_FAMILIES:
        raise ParameterError("rewards", rewards, f"must be one of {', '.join(REWARD_FAMILIES)}")
    if rewards == BERNOULLI_REWARDS and sigma is not None:
        raise ParameterError(
            "sigma", sigma, "Bernoulli rewards (every reward 0 or 1) take no sub-Gaussian scale"
        )
    return rewards == BERNOULLI_REWARDS


def check_bernoulli_rewards(rewards: Sequence[float] | np.ndarray) -> None:
    """Refuse (ParameterError) rewards other than 0 and 1, before anything is recorded: in an
    experiment declared Bernoulli the budget T is certified for 0/1 rewards only."""
    values = np.asarray(rewards, dtype=float)
    wrong = values[(values != 0.0) & (values != 1.0)]
    if wrong.size:
        raise ParameterError(
            "reward",
            float(wrong[0]),
            "this experiment's rewards are declared Bernoulli: every reward must be 0 or 1 (its "
            "budget is certified for those only); nothing was recorded",
        )


def check_agents_for_dropped_votes(n_agents: int, threshold: int, xi: float) -> int:
    """CE drops each vote with probability xi, so at most N (1 - xi) votes against an arm arrive
    in expectation: below the threshold, arms cannot leave in expectation and the run stalls."""
    if n_agents * (1.0 - xi) < threshold:
        needed = math.ceil(threshold / (1.0 - xi) - 1e-9)
        raise ParameterError(
            "agents",
            n_agents,
            f"CE needs agents x (1 - xi) >= the vote threshold {threshold} (xi={xi}): at least "
            f"{needed} agents, or fewer dropped votes",
        )
    return n_agents


def tie_warning(n_agents: int, threshold: int) -> str | None:
    """N < 2 (M + f) - 1: two arms within eps of each other can split the agents so that neither
    gets the threshold's votes, and the experiment ends tied (both kept)."""
    if n_agents < 2 * threshold - 1:
        return (
            f"{n_agents} agents < 2 x threshold - 1 = {2 * threshold - 1}: arms within epsilon "
            "of each other can split the agents and end the experiment tied (several arms kept). "
            f"To rule it out, enroll at least {2 * threshold - 1} agents, or create the "
            f"experiment with a threshold of at most {(n_agents + 1) // 2} (a lower eta or a "
            "higher delta: M = ceil(log delta / log eta))"
        )
    return None


def check_arms(n_arms: int) -> int:
    if n_arms < 2:
        raise ParameterError("arms", n_arms, "need at least 2 arms")
    return n_arms


def ceil_log_ratio(delta: float, eta: float) -> int:
    return math.ceil(math.log(delta) / math.log(eta) - _CEIL_SLACK)


def vote_threshold(delta: float, eta: float) -> int:
    """M = ceil(log delta / log eta): the number of distinct voters that removes an arm."""
    check_open_unit("delta", delta)
    check_open_unit("eta", eta)
    if delta >= eta:
        raise ParameterError(
            "delta", delta, f"must be < eta={eta} (else M < 2 votes would suffice)"
        )
    return ceil_log_ratio(delta, eta)


def corrupted_local_confidence(eta: float, xi: float, n_arms: int) -> float:
    """eta_xi = max(0, 1 - (1 - eta) / (1 - xi)^(K - 1)) (Rio et al., Proposition 5.1)."""
    check_open_unit("eta", eta)
    check_arms(n_arms)
    if not (isinstance(xi, int | float) and 0.0 <= xi < 1.0):
        raise ParameterError("xi", xi, "must be in [0, 1)")
    if xi == 0.0:
        return eta
    limit = max_vote_drop(eta, n_arms)
    eta_xi = 1.0 - (1.0 - eta) / (1.0 - xi) ** (n_arms - 1)
    if eta_xi <= 0.0:
        raise ParameterError(
            "xi", xi, f"must be < 1 - (1 - eta)^(1/(K-1)) = {limit:.4f} (else eta_xi = 0)"
        )
    return eta_xi


def max_vote_drop(eta: float, n_arms: int) -> float:
    """Largest xi with eta_xi > 0: 1 - (1 - eta)^(1/(K-1))."""
    return 1.0 - (1.0 - eta) ** (1.0 / (n_arms - 1))


def corrupted_threshold(delta: float, eta: float, xi: float, n_arms: int) -> int:
    """CE threshold ceil(log delta / log eta_xi); K=10, eta=0.9: xi=0.05 -> 18, xi=0.1 -> 11."""
    eta_xi = corrupted_local_confidence(eta, xi, n_arms)
    check_open_unit("delta", delta)
    if delta >= eta_xi:
        raise ParameterError("delta", delta, f"must be < eta_xi={eta_xi:.4f}")
    return ceil_log_ratio(delta, eta_xi)


def check_tolerance(value: int) -> int:
    """f, the number of Byzantine (lying) agents the vote threshold M + f tolerates: an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParameterError("tolerance", value, "must be an integer >= 0")
    return value


def check_agents_for_threshold(n_agents: int, threshold: int, tolerance: int = 0) -> int:
    """Algorithm 2 needs M <= N: with fewer agents than votes needed no arm can ever leave.

    `threshold` is the threshold in force, M + f with a tolerance f > 0 (named in the message)."""
    if n_agents < threshold:
        if tolerance > 0:
            base = threshold - tolerance
            needed = f"the vote threshold M + f = {base} + {tolerance} = {threshold} (tolerance f={tolerance})"
        else:
            needed = f"the vote threshold M={threshold}"
        raise ParameterError(
            "agents",
            n_agents,
            f"must be >= {needed}: with fewer agents no arm can be eliminated",
        )
    return n_agents
