"""Agents: enrollment (with a ticket, or the open-enrollment secret), votes, CDE's reports and
LDP's private reports (with the agent's own token)."""

from __future__ import annotations

import json
from functools import cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, status
from fastapi.responses import JSONResponse, Response
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from coordinator.addresses import client_group
from coordinator.api.deps import (
    Credentials,
    SettingsDep,
    StoreDep,
    bearer_token,
    problems,
    same_secret,
)
from coordinator.api.models import MAX_ARMS, WHOLE, Integer
from coordinator.errors import Invalid, Unauthorized
from coordinator.store import ExperimentStore, ticket_experiment

router = APIRouter(prefix="/v1", tags=["agents"])
VOTES = Counter("dexp_votes_total", "Votes received, by outcome", ["outcome"])
SETTLED = Counter("dexp_settled_total", "Settled messages received (CE), by outcome", ["outcome"])
REPORTS = Counter("dexp_reports_total", "Reports received (CDE), by outcome", ["outcome"])
CROWD_REPORTS = Counter(
    "dexp_private_reports_total", "Private reports received (LDP), by outcome", ["outcome"]
)

ExperimentId = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="experiment id", examples=["demo"]),
]


# An experiment's own arm count bounds it below MAX_ARMS: a higher index is answered 422, documented.
ARM_INDEX = "index of the arm {}, below the experiment's number of arms (a higher one: 422)"


class AgentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment: StrictStr | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="the experiment to join; default: the coordinator's own (DEXP_EXPERIMENT)",
        examples=["demo"],
    )
    simulated: StrictBool = Field(
        False,
        description="true: a simulated agent (the agent service's, fed by a load generator), "
        "not a real device; the experiment counts them (agents_simulated)",
    )
    lease: StrictBool = Field(
        False,
        description="true: the agent stays enrolled only while its host renews its lease (POST "
        "/v1/agents/leases, every third of lease_seconds); once a lease passes without a "
        "renewal it leaves as DELETE /v1/agents/me makes it. The agent service's agents take "
        "one; a device need not (it may visit once, and its messages still count)",
    )


class AgentPublic(BaseModel):
    agent_id: str
    token: str = Field(description="send as 'Authorization: Bearer <token>' with every vote")
    index: int = Field(description="enrollment order in the experiment, from 1")
    experiment: str
    lease_seconds: float | None = Field(
        None,
        description="with `lease: true`, DEXP_AGENT_LEASE_SECONDS: the lease lapses this long "
        "after enrollment or the last renewal (else null: no lease)",
    )


class OwnVote(BaseModel):
    """One of the agent's own votes, as counted."""

    arm: int
    outcome: Literal["counted", "arm_out"] = Field(
        description="counted: in the arm's voter set; arm_out: counted, and the arm has left the "
        "global set as published (by this vote or others')"
    )


class AgentSelf(BaseModel):
    """What an agent may read of itself: enough to re-send a vote the store lost."""

    agent_id: str
    experiment: str
    index: int = Field(description="enrollment order in the experiment, from 1")
    epoch: int
    epoch_started_at: int | None = Field(
        description="when the current epoch began (unix ms): with `epoch`, its identity (a "
        "failover may lose an epoch, and a later one take its number)"
    )
    version: int
    voted_against: list[int] = Field(
        description="the arms whose voter set holds this agent, in the current epoch"
    )
    algorithm: str = Field(description="the experiment's algorithm (de, ce, dp-mase, cde, ldp)")
    votes: list[OwnVote] = Field(
        description="this agent's votes counted in the current epoch, one per arm of "
        "`voted_against`: counted at once, whatever the publication batch"
    )
    reported: bool | None = Field(
        description="CDE: this agent's one report is counted (null under another algorithm)"
    )
    reports_sent: int | None = Field(description="LDP: this agent's reports counted (else null)")
    reports_left: int | None = Field(
        description="LDP: the reports it may still send, reports_per_agent - reports_sent"
    )
    waiting: int = Field(
        description="the experiment's counted messages (anyone's) not yet in the public counts: "
        "they are published together once there are `publish_batch` of them (docs/PRIVACY.md, "
        "Timing), so the public counts may not show this agent's own messages yet"
    )
    publish_batch: int = Field(
        description="DEXP_PUBLISH_BATCH: the counted messages per publication"
    )


class VoteCreate(BaseModel):
    """A vote says only "this arm is not good enough": an arm index, and the agent's epoch."""

    model_config = ConfigDict(extra="forbid")

    arm: Integer = Field(
        ge=0, le=MAX_ARMS - 1, description=ARM_INDEX.format("voted against"), examples=[0]
    )
    epoch: Integer = Field(0, ge=0, description="the reset epoch the agent is in", examples=[0])
    epoch_started_at: Annotated[StrictInt, Field(ge=0, le=2**53), WHOLE] | None = Field(
        None,
        description="when that epoch began (unix ms, as the experiment's state and events say): "
        "an epoch's identity. An epoch a failover lost and a later one may share a number; a vote "
        "that names another start is stale_epoch, so a lost epoch's votes never count in a new "
        "one",
        examples=[1767225600123],
    )


class VotePublic(BaseModel):
    counted: bool = Field(description="a new distinct voter against this arm")
    outcome: str = Field(
        description="counted | eliminated | last_arm | duplicate | arm_out | stale_epoch; "
        "only counted and eliminated count: last_arm is a vote against the identified arm, "
        "ignored (the answer is final)"
    )
    eliminated: bool = Field(description="this vote brought the arm to the threshold")
    arm_out: bool = Field(description="the arm is no longer in the global set")
    votes: int = Field(
        description="votes against the arm as last published (DEXP_PUBLISH_BATCH): what anyone "
        "reads, which may not count this vote yet"
    )
    version: int = Field(description="the global set's version as last published")
    epoch: int


class ReportCreate(BaseModel):
    """CDE's one message: an arm index, drawn by the agent's randomized response from its local
    answer when its fixed budget of activations ends (docs/CDE.md). Nothing else."""

    model_config = ConfigDict(extra="forbid")

    arm: Integer = Field(
        ge=0, le=MAX_ARMS - 1, description=ARM_INDEX.format("reported"), examples=[0]
    )


class ReportPublic(BaseModel):
    outcome: str = Field(
        description="counted | accepted | duplicate | decided. accepted: counted, and the arm "
        "reached the threshold (every other arm leaves); duplicate: this agent reported already "
        "(whatever the arm: nothing changes); decided: an arm was accepted before this first "
        "report (ignored). The reply says nothing of the others' reports, and a repeated report "
        "gets the same one whatever they did"
    )
    counted: bool = Field(description="this is the agent's report, counted for its arm")
    accepted: bool = Field(description="this report brought its arm to the threshold")


class PrivateReportCreate(BaseModel):
    """LDP's message (common/ldp.py): the arm the device played, drawn from the published
    allocation, and the bit its mechanism made of the reward (Mechanism.privatize, on the
    device: the coordinator never sees a reward), numbered by the device from 1."""

    model_config = ConfigDict(extra="forbid")

    arm: Integer = Field(
        ge=0, le=MAX_ARMS - 1, description=ARM_INDEX.format("played"), examples=[0]
    )
    bit: Integer = Field(ge=0, le=1, description="the privatized bit, 0 or 1", examples=[1])
    seq: Integer = Field(
        ge=1,
        le=1_000_000,
        description="this report's number for the device: 1, 2, ... up to reports_per_agent. "
        "A number already counted is a duplicate (a retry changes nothing); only the next one "
        "counts",
        examples=[1],
    )


class PrivateReportPublic(BaseModel):
    outcome: Literal["counted", "duplicate"] = Field(
        description="counted: this report counts for its arm; duplicate: a report with this "
        "number was counted before (nothing changes, whatever it says)"
    )
    counted: bool = Field(description="this request counted a report")
    sent: int = Field(description="the device's reports counted so far")
    reports_left: int = Field(description="the reports it may still send: reports_per_agent - sent")


class SettledCreate(BaseModel):
    """An agent's "settled" message (CE): its local set holds one arm, it votes no more. It names
    no arm: only the epoch the agent is in."""

    model_config = ConfigDict(extra="forbid")

    epoch: Integer = Field(ge=0, description="the reset epoch the agent is in", examples=[0])


class SettledPublic(BaseModel):
    settled: bool = Field(description="the agent was not settled yet in this epoch")
    outcome: str = Field(description="settled | stale_epoch (another epoch: ignored)")
    remaining_arms: list[int] = Field(
        description="the global set as last published (DEXP_PUBLISH_BATCH, "
        "DEXP_PUBLISH_CADENCE_SECONDS) when the message was applied, as anyone reads it: an arm "
        "that leaves later and that this agent did not vote against clears its settled flag "
        "(send it again if still settled)"
    )
    version: int = Field(description="the global set's version as last published")
    epoch: int


@router.post(
    "/agents",
    status_code=status.HTTP_201_CREATED,
    response_model=AgentPublic,
    tags=["agents"],
    responses=problems(
        401,
        403,
        404,
        422,
        429,
        s401="missing, unknown, used, expired or another experiment's ticket; or the "
        "open-enrollment secret while open enrollment is off",
        s403="the experiment has its maximum of agents (DEXP_MAX_AGENTS), or, under open "
        "enrollment, this client its maximum in it (DEXP_MAX_AGENTS_PER_CLIENT)",
        s429="open enrollment: this client enrolls too fast (DEXP_ENROLL_RATE, "
        "DEXP_ENROLL_BURST): retry after Retry-After seconds",
    ),
)
async def enroll(
    body: AgentCreate,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    credentials: Credentials,
) -> AgentPublic:
    """A ticket (`Authorization: Bearer <ticket>`, from POST /v1/experiments/{id}/tickets) enrolls
    exactly one agent in the ticket's experiment and is used up. Open enrollment (the shared
    DEXP_ENROLLMENT_SECRET; on in development, off in production unless DEXP_OPEN_ENROLLMENT=true)
    enrolls any number, limited per client address in rate and number. Either way: a new agent
    id and its own token, shown once (only a digest of it is kept)."""
    credential = bearer_token(credentials)
    experiment = body.experiment or settings.experiment
    if not experiment:
        raise Invalid("experiment: required (this coordinator has no default experiment)")
    if settings.open_enrollment_enabled and same_secret(credential, settings.enrollment_secret):
        client = client_group(request.client.host) if request.client else ""
        enrollment = await store.enroll(
            experiment, client, simulated=body.simulated, lease=body.lease
        )
    elif ticket_experiment(credential):
        enrollment = await store.enroll(
            experiment, ticket=credential, simulated=body.simulated, lease=body.lease
        )
    else:
        raise Unauthorized(
            "invalid enrollment credential: neither a ticket from the experiment's admin nor the "
            "open-enrollment secret"
            + ("" if settings.open_enrollment_enabled else " (open enrollment is off)")
        )
    if body.lease:
        request.app.state.lease_sweep.wake()
    return AgentPublic(
        agent_id=enrollment.agent_id,
        token=enrollment.token,
        index=enrollment.index,
        experiment=experiment,
        lease_seconds=settings.agent_lease_seconds if body.lease else None,
    )


@router.get(
    "/agents/me",
    response_model=AgentSelf,
    tags=["agents"],
    responses=problems(401, s401="missing or invalid agent token"),
)
async def me(store: StoreDep, credentials: Credentials) -> AgentSelf:
    """Agent token. The agent's own enrollment and its own messages as counted: the arms it is
    counted against this epoch (so that it can send again an acknowledged vote a store failover
    lost), CDE's report, LDP's reports; nobody else's. The public counts are published in
    batches: `waiting` says how many counted messages wait for the next one."""
    own = await store.own_votes(bearer_token(credentials))
    return AgentSelf(
        **own, **await store.own_messages(own["experiment"], own["agent_id"], own["voted_against"])
    )


class AgentLeft(BaseModel):
    """An agent that left its experiment: what of it still counts."""

    agent_id: str
    experiment: str
    counted: bool = Field(
        description="true: it voted, settled or reported this epoch; what it said stands and it "
        "stays in the experiment's N (`agents`, `agents_departed`) until a reset"
    )


@router.delete(
    "/agents/me",
    response_model=AgentLeft,
    tags=["agents"],
    responses=problems(401, 404, s401="missing or invalid agent token, or the agent left already"),
)
async def leave(store: StoreDep, credentials: Credentials) -> AgentLeft:
    """Agent token. The agent leaves its experiment, at once and for good (its host stops: the
    agent service sends it for each of its agents on SIGTERM): it is no longer enrolled (the
    load generator no longer feeds it; its place under DEXP_MAX_AGENTS is free), its token stops
    working, its activation stream is deleted. Its votes, settled message or report of this epoch
    stand, and it stays counted in N for them until a reset (docs/SCALING.md, "Agents that come
    and go")."""
    departure = await store.leave(bearer_token(credentials))
    return AgentLeft(
        agent_id=departure.agent_id, experiment=departure.experiment, counted=departure.counted
    )


@router.post(
    "/experiments/{experiment}/votes",
    response_model=VotePublic,
    response_class=JSONResponse,
    responses=problems(
        401,
        403,
        404,
        422,
        429,
        s401="missing or invalid agent token (a token names its agent: another agent id with "
        "it is refused)",
        s403="the agent is enrolled in another experiment",
        s422="invalid body (strict integers), or an arm index out of range",
        s429="this agent votes too fast (DEXP_VOTE_RATE, DEXP_VOTE_BURST): retry after "
        "Retry-After seconds",
    ),
)
async def vote(
    experiment: ExperimentId, body: VoteCreate, request: Request, credentials: Credentials
) -> Response:
    """Vote against an arm, with the agent's own bearer token. A vote changes something only the
    first time an agent votes against an arm in an epoch: a replayed vote (the same token, arm and
    epoch, resent by the agent's retries or by anyone who captured it) answers `counted: false`,
    outcome `duplicate`, and changes no vote count, arm or version; it is counted only as a
    message (`messages`, `ignored_messages`). A refused vote (4xx) changes nothing at all."""
    # A plain, valid vote is answered by coordinator.fast_path before it reaches FastAPI; this route
    # documents the endpoint and answers every other request (its validation is the reference).
    store: ExperimentStore = request.app.state.store
    reply = await vote_reply(
        store, experiment, bearer_token(credentials), body.arm, body.epoch, body.epoch_started_at
    )
    return Response(reply, media_type="application/json")


async def vote_reply(
    store: ExperimentStore,
    exp: str,
    token: str,
    arm: int,
    epoch: int,
    epoch_started_at: int | None = None,
) -> bytes:
    """Apply a vote; the VotePublic document as JSON bytes, encoded once (no response model
    validation: every field comes from the store's typed VoteResult)."""
    result = await store.vote(exp, token, arm, epoch, epoch_started_at)
    outcome = str(result.outcome)
    _vote_counter(outcome).inc()
    return json.dumps(
        {
            "counted": result.counted,
            "outcome": outcome,
            "eliminated": result.eliminated,
            "arm_out": outcome in ("eliminated", "arm_out"),
            "votes": result.votes,
            "version": result.version,
            "epoch": result.epoch,
        },
        separators=(",", ":"),
    ).encode()


@cache
def _vote_counter(outcome: str) -> Any:
    return VOTES.labels(outcome=outcome)


@router.post(
    "/experiments/{experiment}/report",
    response_model=ReportPublic,
    responses=problems(
        401,
        403,
        404,
        422,
        429,
        s401="missing or invalid agent token",
        s403="the agent is enrolled in another experiment, or the experiment is not CDE (its "
        "agents vote)",
        s422="invalid body (a strict integer arm, nothing else), or an arm index out of range",
        s429="this agent sends too fast (DEXP_VOTE_RATE, DEXP_VOTE_BURST: votes and reports "
        "together): retry after Retry-After seconds",
    ),
)
async def report(
    experiment: ExperimentId, body: ReportCreate, store: StoreDep, credentials: Credentials
) -> ReportPublic:
    """CDE only, with the agent's own bearer token: the agent's one report. The first one counts
    for its arm; the first arm that `threshold` distinct agents reported is accepted and every
    other arm leaves at once (published as eliminations are, DEXP_PUBLISH_BATCH and
    DEXP_PUBLISH_CADENCE_SECONDS). Any later report of the same agent, whatever its arm, is a
    `duplicate`: it changes nothing (it counts only as a message) and its reply is the same
    whatever the others reported, so a retry is harmless and an agent's credentials buy one
    report. A refused report (4xx) changes nothing at all."""
    result = await store.report(experiment, bearer_token(credentials), body.arm)
    REPORTS.labels(outcome=str(result.outcome)).inc()
    return ReportPublic(
        outcome=str(result.outcome), counted=result.counted, accepted=result.accepted
    )


@router.post(
    "/experiments/{experiment}/reports",
    response_model=PrivateReportPublic,
    response_class=JSONResponse,
    responses=problems(
        401,
        403,
        404,
        409,
        422,
        429,
        s401="missing or invalid agent token",
        s403="the agent is enrolled in another experiment, or the experiment is not LDP",
        s409="reports spent (seq beyond reports_per_agent), out of order (seq is not the next "
        "number), or the experiment is decided",
        s422="invalid body (strict integers: arm, bit 0 or 1, seq >= 1; nothing else), or an "
        "arm index out of range",
        s429="this agent sends too fast (DEXP_VOTE_RATE, DEXP_VOTE_BURST: votes and reports "
        "together): retry after Retry-After seconds",
    ),
)
async def private_report(
    experiment: ExperimentId, body: PrivateReportCreate, store: StoreDep, credentials: Credentials
) -> Response:
    """LDP only, with the agent's own bearer token: one private report, the arm played and its
    privatized bit. A device sends at most reports_per_agent (B), numbered 1 to B: the next number
    counts, a number already counted is a `duplicate` that changes nothing (retries are safe),
    any other is refused (409). Counted reports are published with their batch
    (DEXP_PUBLISH_BATCH), and at each publication the coordinator decides (common/ldp.py): arms
    that cannot be the best leave, and once the leader is epsilon-optimal with probability
    1 - delta the experiment is identified. A refused report (4xx) changes nothing at all."""
    # A plain, valid report is answered by coordinator.fast_path, as a vote is.
    reply = await private_report_reply(
        store, experiment, bearer_token(credentials), body.arm, body.bit, body.seq
    )
    return Response(reply, media_type="application/json")


async def private_report_reply(
    store: ExperimentStore, exp: str, token: str, arm: int, bit: int, seq: int
) -> bytes:
    """Apply a private report; the PrivateReportPublic document as JSON bytes (as vote_reply)."""
    result = await store.crowd_report(exp, token, arm, bit, seq)
    _report_counter(result.outcome).inc()
    return json.dumps(
        {
            "outcome": "counted" if result.counted else "duplicate",
            "counted": result.counted,
            "sent": result.sent,
            "reports_left": result.budget - result.sent,
        },
        separators=(",", ":"),
    ).encode()


@cache
def _report_counter(outcome: str) -> Any:
    return CROWD_REPORTS.labels(outcome=outcome)


@router.post(
    "/experiments/{experiment}/settled",
    response_model=SettledPublic,
    responses=problems(
        401,
        403,
        404,
        422,
        429,
        s401="missing or invalid agent token",
        s403="the agent is enrolled in another experiment, or the experiment is not CE",
        s422="invalid body (a strict integer epoch >= 0, nothing else)",
        s429="this agent sends too fast (DEXP_VOTE_RATE, DEXP_VOTE_BURST: votes and settled "
        "messages together): retry after Retry-After seconds",
    ),
)
async def settled(
    experiment: ExperimentId, body: SettledCreate, store: StoreDep, credentials: Credentials
) -> SettledPublic:
    """CE only, with the agent's own bearer token: the agent's local set holds one arm, and it
    votes no more. CE drops some votes, so the coordinator cannot see this from the votes as it
    does under DE and DP-MASE (an agent that voted against every remaining arm but one); it needs
    the message to tell a tie (GET .../best-arm). An elimination of an arm this agent did not vote
    against clears the flag (the arm may have been its own, and it restarts), as does a reset;
    an agent still settled then sends the message again. A message of another epoch is counted
    and ignored; a second one in the same epoch changes nothing."""
    result = await store.settle(experiment, bearer_token(credentials), body.epoch)
    SETTLED.labels(outcome=result.outcome).inc()
    return SettledPublic(
        settled=result.added,
        outcome=result.outcome,
        remaining_arms=result.remaining,
        version=result.version,
        epoch=result.epoch,
    )
