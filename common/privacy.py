"""Privacy audit: the bound each method certifies beside the hit rate of a concrete adversary.

(eps, eta)-privacy bounds what an adversary holding every vote of ONE agent can certify about that
agent's eps-optimal arm: at most 1 - eta. It does not bound how often a guessing adversary is right
(ALGORITHMS.md, "What (eps, eta)-privacy does and does not promise"). This module reports both.

The adversary: it sees the votes one agent SENT (TrialResult.agent_votes) and guesses uniformly
among the arms that agent never voted against (all arms if it voted against every arm). Its hit
probability for that agent is exactly

    |eps-optimal arms not voted against| / |arms not voted against|,

averaged here over every honest agent of every trial: an exact expectation, no extra randomness.
(The Byzantine agents of a simulation with `attackers`, agents 0 .. A-1, are left out: their
votes are lies, not a private arm to protect.)

Certified bounds: DE 1 - eta; CE (1 - eta_xi) (1 - xi)^(K-1), which is 1 - eta by the choice of
eta_xi; DP-MASE 1 - beta, with its eps_dp-differential privacy of the rewards stated beside it;
the independent baseline (1-privacy, no message) 0. Baseline for the measured rate: a uniform guess
over all K arms hits with probability |eps-optimal arms| / K. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from common.algorithms import AlgorithmConfig
from common.errors import ParameterError
from common.params import corrupted_local_confidence
from common.simulation.config import SimulationConfig, TrialResult


@dataclass(frozen=True)
class AuditRow:
    method: str  # e.g. "DE (ser3)", "CE xi=0.1 (ser3)", "DP-MASE eps_dp=0.25"
    certified_bound: float  # the most an adversary can be sure of one agent's eps-optimal arm
    measured_hit_rate: float  # the concrete adversary's hit probability, over agents and trials
    n_agents_observed: int  # (agent, trial) pairs averaged over
    uniform_guess: float  # |eps-optimal arms| / K, averaged over trials
    dp_epsilon: float | None = None  # DP-MASE: the rewards are eps_dp-differentially private
    hit_rate_voters: float | None = None  # the same rate over agents that sent >= 1 vote
    voters: int = 0  # how many of the observed agents sent at least one vote
    trials: int = 0


def method_label(algo: AlgorithmConfig) -> str:
    if algo.algorithm == "de":
        return f"DE ({algo.subroutine})"
    if algo.algorithm == "ce":
        return f"CE xi={algo.xi:g} ({algo.subroutine})"
    if algo.algorithm == "dp-mase":
        return f"DP-MASE eps_dp={algo.dp_epsilon:g} beta={algo.beta:g}"
    return f"{algo.algorithm} ({algo.subroutine})"


def certified_bound(algo: AlgorithmConfig, n_arms: int) -> float:
    """The probability above which no adversary can name one agent's eps-optimal arm from its
    votes, as each method certifies it."""
    if algo.algorithm == "de":
        return 1.0 - algo.eta
    if algo.algorithm == "ce":
        eta_xi = corrupted_local_confidence(algo.eta, algo.xi, n_arms)
        return (1.0 - eta_xi) * (1.0 - algo.xi) ** (n_arms - 1)
    if algo.algorithm == "dp-mase":
        return 1.0 - algo.beta
    if algo.algorithm == "independent":
        return 0.0  # 1-privacy: no message at all
    raise ParameterError(
        "algorithm",
        algo.algorithm,
        "the audit covers de, ce, dp-mase and independent (the central baseline sends every "
        "reward, there is no per-agent vote to audit)",
    )


def hit_probabilities(votes: np.ndarray, optimal: np.ndarray) -> np.ndarray:
    """Per agent (row of `votes`, (N, K) bool): the probability that a uniform guess among the
    arms it never voted against is eps-optimal (`optimal`, (K,) bool)."""
    votes = np.asarray(votes, dtype=bool)
    optimal = np.asarray(optimal, dtype=bool)
    if votes.ndim != 2 or optimal.shape != (votes.shape[1],):
        raise ParameterError(
            "agent_votes", votes.shape, f"must be (agents, K) with K = {optimal.shape[0]}"
        )
    candidates = ~votes
    candidates[~candidates.any(axis=1)] = True  # voted against every arm: guess among all
    return (candidates & optimal).sum(axis=1) / candidates.sum(axis=1)


def audit(config: SimulationConfig, results: Sequence[TrialResult]) -> AuditRow:
    """The audit row of one configuration's trials."""
    if not results:
        raise ParameterError("results", len(results), "need at least one trial")
    algo = config.algorithm
    env = config.environment
    bound = certified_bound(algo, env.n_arms)
    hits: list[np.ndarray] = []
    voted: list[np.ndarray] = []
    uniform: list[float] = []
    for result in results:
        if result.agent_votes is None:
            raise ParameterError("agent_votes", None, "each trial must report the votes it sent")
        if result.agent_votes.shape != (config.n_agents, env.n_arms):
            raise ParameterError(
                "agent_votes",
                result.agent_votes.shape,
                f"must be (agents, K) = ({config.n_agents}, {env.n_arms})",
            )
        mu = env.means_at(result.sample_complexity)
        optimal = mu >= mu.max() - algo.epsilon
        honest = result.agent_votes[config.attackers :]
        hits.append(hit_probabilities(honest, optimal))
        voted.append(np.asarray(honest, dtype=bool).sum(axis=1) > 0)
        uniform.append(float(optimal.mean()))
    all_hits = np.concatenate(hits)
    any_vote = np.concatenate(voted)
    return AuditRow(
        method=method_label(algo),
        certified_bound=bound,
        measured_hit_rate=float(all_hits.mean()),
        n_agents_observed=int(all_hits.size),
        uniform_guess=float(np.mean(uniform)),
        dp_epsilon=algo.dp_epsilon if algo.algorithm == "dp-mase" else None,
        hit_rate_voters=float(all_hits[any_vote].mean()) if any_vote.any() else None,
        voters=int(any_vote.sum()),
        trials=len(results),
    )


def format_audit(rows: Sequence[AuditRow]) -> str:
    """A plain-text table, one row per method."""
    header = (
        "method",
        "certified",
        "measured hit",
        "hit (voters)",
        "uniform guess",
        "agents",
        "voters",
        "trials",
        "eps_dp",
    )
    body = [
        (
            row.method,
            f"{row.certified_bound:.3f}",
            f"{row.measured_hit_rate:.3f}",
            "-" if row.hit_rate_voters is None else f"{row.hit_rate_voters:.3f}",
            f"{row.uniform_guess:.3f}",
            str(row.n_agents_observed),
            str(row.voters),
            str(row.trials),
            "-" if row.dp_epsilon is None else f"{row.dp_epsilon:g}",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def fmt(line: Sequence[str]) -> str:
        cells = [line[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)
        ]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(header), rule, *(fmt(line) for line in body)])
