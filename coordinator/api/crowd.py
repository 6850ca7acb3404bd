"""LDP's parts of the public documents (common/ldp.py): what the coordinator learned from the
published counts of reports and ones, and what it certifies.

Everything here is a function of the last publication (the counts and the global set a reader
sees), so the documents change only when a publication moves them, and their ETags with them. The
allocation, estimates and lift are `common.ldp.decide` on those counts, the rule the coordinator
applies at each publication (coordinator/store/decisions.py): a reader sees the allocation the
devices draw from. Other algorithms carry these fields as null (`NOT_CROWD`).
"""

from __future__ import annotations

from typing import Any

from common.ldp import Decision, decide
from common.rounding import upper
from coordinator.store import ExperimentState

# The LDP fields of both documents, null for the other algorithms.
FIELDS = (
    "allocation",
    "estimates",
    "lift",
    "dp_epsilon",
    "reports_per_agent",
    "user_privacy",
    "reports_total",
    "ones",
)
NOT_CROWD: dict[str, Any] = dict.fromkeys(FIELDS)


def decision_of(state: ExperimentState) -> Decision:
    """`decide` on the state's published counts and global set, with f B corrupt reports."""
    config = state.design.config
    return decide(
        state.reports or [0] * len(state.arms),
        state.ones or [0] * len(state.arms),
        state.remaining_arms,
        epsilon=config.epsilon,
        delta=config.delta,
        dp_epsilon=config.dp_epsilon,
        corrupt=config.tolerance * config.reports_per_agent,
    )


def crowd_fields(state: ExperimentState) -> dict[str, Any]:
    """The LDP fields of GET /v1/experiments/{id} and .../best-arm (NOT_CROWD for the others)."""
    if not state.design.crowd:
        return NOT_CROWD
    config = state.design.config
    arms = state.arms
    decision = decision_of(state)
    remaining = set(state.remaining_arms)
    return {
        # the devices draw from the allocation over the arms still in the global set
        "allocation": [w if a in remaining else 0.0 for a, w in enumerate(decision.allocation)],
        "estimates": [
            {
                "index": e.index,
                "name": arms[e.index],
                "reports": e.reports,
                "mean": e.mean,
                "ci": [e.low, e.high],
            }
            for e in decision.estimates
        ],
        "lift": [
            {"vs": lift.vs, "name": arms[lift.vs], "mean": lift.mean, "ci": [lift.low, lift.high]}
            for lift in decision.lift
        ],
        "dp_epsilon": config.dp_epsilon,
        "reports_per_agent": config.reports_per_agent,
        "user_privacy": config.user_privacy,
        "reports_total": sum(state.reports or []),
        "ones": state.ones,
    }


def crowd_certificate(state: ExperimentState, max_agents: int) -> dict[str, Any]:
    """What LDP certifies: delta, for every N and every order of activations (the intervals are
    anytime and simultaneous, common/ldp.py), with f Byzantine devices; and each device's local
    privacy over everything it sends, B x dp_epsilon."""
    config = state.design.config
    delta, f = config.delta, config.tolerance
    liars = (
        f" with at most {f} Byzantine devices ({f * config.reports_per_agent} reports)" if f else ""
    )
    return {
        "certified_failure": delta,
        "certified_agents": state.agents,
        "certified_failure_at_max_agents": delta if max_agents else None,
        "certificate": (
            (
                "Every enrolled device has sent its reports: the best arm is not among the "
                f"candidates with probability at most {upper(delta)}{liars}, and more devices can "
                "separate them; every arm's interval holds at all times together."
            )
            if state.status == "tied"
            else (
                "The identified arm is not epsilon-optimal, or an arm that left was the best, with "
                f"probability at most {upper(delta)}{liars}: every arm's interval holds at all "
                "times together, whatever the number of devices and the order of their reports."
            )
        ),
        "certified_epsilon": config.user_privacy,
        "hit_rate_uniform_prior": None,
        "privacy_certificate": (
            f"Each report is {config.dp_epsilon:g}-locally private (randomized response on one "
            f"bit), and a device sends at most {config.reports_per_agent}: whatever an adversary "
            "believed before, its odds about anything in one device's rewards are multiplied by "
            f"at most e^{config.user_privacy:g} by all its reports."
        ),
    }
