"""Agents: enrollment (with the enrollment secret) and votes (with the agent's own token)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status
from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from coordinator.api.deps import Credentials, EnrollmentDep, StoreDep, bearer_token

router = APIRouter(prefix="/v1", tags=["agents"])
VOTES = Counter("dexp_votes_total", "Votes received, by outcome", ["outcome"])

ExperimentId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


class AgentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    experiment: StrictStr = Field("demo", pattern=r"^[A-Za-z0-9_-]{1,64}$")


class AgentPublic(BaseModel):
    agent_id: str
    token: str = Field(description="send as 'Authorization: Bearer <token>' with every vote")
    index: int = Field(description="enrollment order in the experiment, from 1")
    experiment: str


class VoteCreate(BaseModel):
    """A vote says only "this arm is not good enough": an arm index, and the agent's epoch."""

    model_config = ConfigDict(extra="forbid")

    arm: StrictInt = Field(ge=0, description="index of the arm voted against")
    epoch: StrictInt = Field(0, ge=0, description="the reset epoch the agent is in")


class VotePublic(BaseModel):
    counted: bool = Field(description="a new distinct voter against this arm")
    outcome: str = Field(
        description="counted | eliminated | last_arm | duplicate | arm_out | stale_epoch"
    )
    eliminated: bool = Field(description="this vote brought the arm to the threshold")
    arm_out: bool = Field(description="the arm is no longer in the global set")
    votes: int
    version: int
    epoch: int


@router.post(
    "/agents",
    status_code=status.HTTP_201_CREATED,
    dependencies=[EnrollmentDep],
    response_model=AgentPublic,
    tags=["agents"],
)
async def enroll(body: AgentCreate, store: StoreDep) -> AgentPublic:
    enrollment = await store.enroll(body.experiment)
    return AgentPublic(
        agent_id=enrollment.agent_id,
        token=enrollment.token,
        index=enrollment.index,
        experiment=body.experiment,
    )


@router.post("/experiments/{experiment}/votes", response_model=VotePublic)
async def vote(
    experiment: ExperimentId, body: VoteCreate, store: StoreDep, credentials: Credentials
) -> VotePublic:
    agent = await store.authenticate(bearer_token(credentials), experiment)
    result = await store.vote(experiment, agent, body.arm, body.epoch)
    VOTES.labels(outcome=str(result.outcome)).inc()
    return VotePublic(
        counted=result.counted,
        outcome=str(result.outcome),
        eliminated=result.eliminated,
        arm_out=result.outcome in ("eliminated", "arm_out"),
        votes=result.votes,
        version=result.version,
        epoch=result.epoch,
    )
