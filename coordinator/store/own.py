"""What an agent's own token may read of its own messages as counted (GET /v1/agents/me): its votes
of the current epoch, CDE's one report, LDP's reports sent and left; and the experiment's counted
messages waiting for the next publication (GET /v1/experiments/{id}/waiting).

An agent sees its own votes counted at once: it knows them, so that tells it nothing of the others
(docs/PRIVACY.md, "Timing"). Whether an arm is out is the published global set, as anyone reads
it: an elimination by the others' votes is not shown to it before the public sees it. The number
waiting is a count of counted messages, never an arm: what the publication batch bounds."""

from __future__ import annotations

import json
from typing import Any

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from coordinator.errors import NotFound
from coordinator.store.core import StoreCore, text
from coordinator.store.state import waiting


class OwnMessages:
    """The reads of an agent's own messages, after its token was checked (Enrollments.own_votes)."""

    def __init__(self, core: StoreCore) -> None:
        self.core = core

    async def own_messages(self, exp: str, agent: str, voted_against: list[int]) -> dict[str, Any]:
        """The agent's messages as counted: `votes` (each arm of `voted_against` with whether it
        has left the published global set), `reported` (CDE: its report counted), `reports_sent`
        and `reports_left` (LDP), and the experiment's `waiting` messages and `publish_batch`."""
        async with self.core.redis.pipeline(transaction=True) as pipe:
            pipe.hmget(keys.meta(exp), "config", "p_remaining", "pending_votes")
            pipe.sismember(keys.reporters(exp), agent)
            pipe.hget(keys.report_seq(exp), agent)
            (config, remaining, pending), reported, seq = await pipe.execute()
        params = AlgorithmConfig(**json.loads(text(config))["params"])
        published = set(json.loads(text(remaining))) if remaining is not None else None
        algorithm = params.algorithm
        own: dict[str, Any] = {
            "algorithm": algorithm,
            "votes": [
                {
                    "arm": arm,
                    "outcome": "counted" if published is None or arm in published else "arm_out",
                }
                for arm in voted_against
            ],
            "reported": bool(reported) if algorithm == "cde" else None,
            "reports_sent": None,
            "reports_left": None,
            "waiting": waiting(None if pending is None else text(pending)),
            "publish_batch": self.core.limits.publish_batch,
        }
        if algorithm == "ldp":
            sent = int(seq or 0)
            own["reports_sent"] = sent
            own["reports_left"] = max(params.reports_per_agent - sent, 0)
        return own

    async def waiting(self, exp: str) -> int:
        """The counted messages (votes, reports) of `exp` waiting for the next publication."""
        created, pending = await self.core.redis.hmget(
            keys.meta(exp), "created_at", "pending_votes"
        )
        if created is None:
            raise NotFound(f"experiment {exp!r} does not exist")
        return waiting(None if pending is None else text(pending))
