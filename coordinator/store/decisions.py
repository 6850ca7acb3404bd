"""LDP's decisions: `common.ldp.decide` on a publication's counts, applied by lua/ldp_decide.lua.

The rule is arithmetic the scripts cannot do (the mixture boundary), so a coordinator runs it, on
the published counts only (the counts a reader sees, never the live ones): after each publication
this process took (a report's batch, lua/ldp_report.lua; or a read's, lua/published.lua), and on a
read that finds the last publication not decided yet (a coordinator that took it and stopped
before deciding). The decision is a function of the publication alone, and the script applies it
only to an experiment still exploring, never to an arm already out and never on a publication
older than one decided: two coordinators on one Redis cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.ldp import decide
from coordinator.store.core import StoreCore, now_ms, text

# The meta hash's fields a decision reads: one HMGET.
DECISION_FIELDS = (
    "created_at",
    "config",
    "published",
    "decided",
    "p_votes",
    "p_ones",
    "p_remaining",
)


def pending(meta: Mapping[str, str | None]) -> bool:
    """Whether the last publication of an LDP experiment, still exploring, waits for its
    decision (the meta hash as read; `decided`, the publication last decided, is LDP's only:
    create.lua sets it to 0)."""
    decided = meta.get("decided")
    if decided is None or decided == meta.get("published"):
        return False
    return len(json.loads(meta.get("p_remaining") or "[]")) > 1


@dataclass(frozen=True)
class Applied:
    """What lua/ldp_decide.lua did: its outcome (applied, unchanged, or a refusal: decided,
    known, not_crowd, no_experiment), the arms that left and the global set's version."""

    outcome: str
    removed: int = 0
    version: int = 0


class Decisions:
    """Decide an LDP experiment's last publication and apply the decision."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core
        self.redis = core.redis

    async def apply(self, exp: str) -> Applied:
        """Decide on the last publication; the change is announced (changes channel) and, when an
        arm left, the new version put on the events channel as an elimination's is."""
        values = await self.redis.hmget(keys.meta(exp), *DECISION_FIELDS)
        meta = {k: text(v) for k, v in zip(DECISION_FIELDS, values, strict=True) if v is not None}
        if "created_at" not in meta:
            return Applied("no_experiment")
        if meta.get("decided") == meta.get("published"):
            return Applied("known")
        config = AlgorithmConfig(**json.loads(meta["config"])["params"])
        if not config.crowd or "p_ones" not in meta:
            return Applied("not_crowd")
        remaining = json.loads(meta["p_remaining"])
        if len(remaining) < 2:
            return Applied("decided")
        decision = decide(
            json.loads(meta["p_votes"]),
            json.loads(meta["p_ones"]),
            remaining,
            epsilon=config.epsilon,
            delta=config.delta,
            dp_epsilon=config.dp_epsilon,
            corrupt=config.tolerance * config.reports_per_agent,
        )
        reply = await self.core.scripts.ldp_decide(
            meta_key=keys.meta(exp),
            remaining_key=keys.remaining(exp),
            eliminations_key=keys.eliminations(exp),
            created_at=meta["created_at"],
            publication=meta["published"],
            eliminate=json.dumps(list(decision.eliminate)),
            leader=decision.leader if decision.identified else -1,
            now_ms=now_ms(),
            changes_channel=keys.changes(exp),
        )
        applied = Applied(text(reply[0]), *(int(v) for v in reply[1:]))
        if applied.removed:
            self.core.on_change(exp)
            await self.redis.publish(keys.events(exp), applied.version)
        return applied
