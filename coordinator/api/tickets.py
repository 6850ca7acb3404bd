"""Which of some tickets are still unused: what an agent replica scaled up asks before it walks a
tickets file shared with replicas that used most of it (agent/enrollment.py).

The caller sends SHA-256 digests, never tickets: a check needs no secret, and the answer says
nothing to anyone who does not hold the ticket itself (a digest is computed from the ticket, and
the coordinator keeps only digests). No credential, then, and nothing is changed: the answer is
only advice, enrollment still decides (a ticket listed unused may be taken the next moment). One
request asks about at most MAX_DIGESTS digests, one pipelined ZSCORE each on one key.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from coordinator.api.agents import ExperimentId
from coordinator.api.deps import StoreDep, problems

router = APIRouter(prefix="/v1/experiments", tags=["agents"])
MAX_DIGESTS = 500  # per request: 500 x 67 bytes of JSON stays under the 64 KiB body limit

Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class TicketDigests(BaseModel):
    model_config = ConfigDict(extra="forbid")

    digests: list[Digest] = Field(
        min_length=1,
        max_length=MAX_DIGESTS,
        description="SHA-256 digests (hex) of tickets of this experiment",
    )


class UnusedTickets(BaseModel):
    experiment: str
    unused: list[str] = Field(
        description="the digests asked about whose ticket is unused and unexpired, in the order "
        "asked; the others are used, expired or unknown"
    )


@router.post(
    "/{experiment}/tickets/unused",
    response_model=UnusedTickets,
    responses=problems(404, 422, s422="not 1 to 500 SHA-256 digests in hex"),
)
async def unused_tickets(
    experiment: ExperimentId, body: TicketDigests, store: StoreDep
) -> UnusedTickets:
    """Anyone. Which of these ticket digests are unused tickets of this experiment, still valid:
    an agent skips the others instead of spending a refused enrollment on each."""
    unused = await store.unused_tickets(experiment, body.digests)
    return UnusedTickets(experiment=experiment, unused=unused)
