"""The renewal of agents' leases: what keeps the agent service's agents enrolled while their host
runs (coordinator/store/leases.py; the sweep that makes the others leave: coordinator/leases.py).

One request per host and renewal, not one per agent: the body carries the tokens of the agents
it renews (each token is its own agent's credential, and renews that agent only). So no
Authorization header: the credentials are in the body, bounded by MAX_TOKENS (under the 64 KiB
body limit), and a token renews or, with DELETE /v1/agents/me, ends its own agent's stay, never
another's; the answer says of each token only what its holder may know (renewed, no lease, gone).
A renewal never creates a lease: an agent takes one at enrollment or never."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from redis.exceptions import RedisError

from coordinator.api.deps import SettingsDep, StoreDep, problems

router = APIRouter(prefix="/v1/agents", tags=["agents"])
# per request: 500 tokens of the longest form (an experiment id of 64 characters) are 56 KB of JSON
MAX_TOKENS = 500

# '<agent id>.<secret>': an agent id is '<experiment>-<10 hex>', the secret 32 URL-safe characters
# (no comma: the renewal script takes the ids comma-separated)
Token = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,80}\.[A-Za-z0-9_-]{16,64}$")]


class LeaseRenewal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tokens: list[Token] = Field(
        min_length=1,
        max_length=MAX_TOKENS,
        description="the tokens of the agents whose leases to renew (a host's agents, any "
        "experiments)",
    )


class LeasesRenewed(BaseModel):
    lease_seconds: float = Field(
        description="DEXP_AGENT_LEASE_SECONDS: a renewed lease lapses this long from now; renew "
        "every third of it"
    )
    outcomes: list[Literal["renewed", "no_lease", "gone"]] = Field(
        description="one per token, in order. renewed: its agent's lease lapses lease_seconds "
        "from now; no_lease: the token is good but its agent enrolled without a lease (nothing "
        "changes); gone: not an enrolled agent's token (unknown, left, its lease lapsed, "
        "revoked, or its experiment deleted): the agent is no longer in its experiment"
    )


@router.post(
    "/leases",
    response_model=LeasesRenewed,
    responses=problems(422, s422="not 1 to 500 agent tokens"),
)
async def renew(
    body: LeaseRenewal, request: Request, store: StoreDep, settings: SettingsDep
) -> LeasesRenewed:
    """The agents' own tokens, in the body. Renew the leases of these agents (enrolled with
    `lease: true`): each stays enrolled for DEXP_AGENT_LEASE_SECONDS more. An agent whose lease
    lapses leaves its experiment as DELETE /v1/agents/me would make it (docs/SCALING.md, "Agents
    that come and go"). Nothing else changes: a token that is not an agent's is `gone`."""
    sweep = request.app.state.lease_sweep
    try:
        outcomes = await store.leases.renew(body.tokens)
    except RedisError:  # answered 503; renewals may be lost, so no lease lapses for a while
        sweep.interrupted()
        raise
    if "renewed" in outcomes:
        sweep.wake()
    return LeasesRenewed(lease_seconds=settings.agent_lease_seconds, outcomes=outcomes)
