"""Experiments: create, read, reset, delete, and the best arm."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, status
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from common.algorithms import AlgorithmConfig
from common.errors import ParameterError
from coordinator.api.deps import (
    AdminDep,
    Credentials,
    SettingsDep,
    StoreDep,
    bearer_token,
    same_secret,
)
from coordinator.errors import Forbidden, Invalid

router = APIRouter(prefix="/v1/experiments", tags=["experiments"])

ExperimentId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="experiment id")]
Number = StrictFloat | StrictInt


class ExperimentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", examples=["demo"])
    arms: list[Annotated[StrictStr, Field(min_length=1, max_length=64)]] = Field(
        min_length=2, max_length=1000, examples=[["A", "B", "C"]]
    )
    algorithm: Literal["de", "ce", "dp-mase"] = "de"
    subroutine: Literal["se", "ser3", "ser4", "me", "lucb"] = "ser3"
    epsilon: Number = 0.25
    delta: Number = 0.05
    eta: Number = 0.9
    xi: Number = 0.0
    dp_epsilon: Number = 0.1
    beta: Number = 0.5
    phi: Number = 0.0
    every_arm: StrictBool = False
    sigma: Number | None = Field(
        None, gt=0, description="sub-Gaussian scale of the rewards; null: rewards in [0, 1]"
    )

    def algorithm_config(self) -> AlgorithmConfig:
        if len(set(self.arms)) != len(self.arms):
            raise Invalid("arms: names must be distinct")
        try:
            return AlgorithmConfig(
                algorithm=self.algorithm,
                subroutine=self.subroutine,
                epsilon=float(self.epsilon),
                delta=float(self.delta),
                eta=float(self.eta),
                xi=float(self.xi),
                dp_epsilon=float(self.dp_epsilon),
                beta=float(self.beta),
                phi=float(self.phi),
                every_arm=self.every_arm,
            )
        except ParameterError as exc:
            raise Invalid(str(exc)) from None


class Elimination(BaseModel):
    arm: int
    name: str
    votes: int
    time: int = Field(description="unix time in milliseconds")
    order: int


class ExperimentPublic(BaseModel):
    id: str
    arms: list[str]
    params: dict[str, float | str | bool]
    sigma: float | None = Field(description="sub-Gaussian reward scale; null: rewards in [0, 1]")
    threshold: int = Field(description="M: distinct votes that remove an arm")
    remaining_arms: list[int]
    votes: list[int] = Field(description="distinct voters against each arm, this epoch")
    voters: list[list[str]]
    eliminations: list[Elimination]
    messages: int = Field(description="votes received, counted or not")
    ignored_messages: int = Field(description="late, duplicate or stale-epoch votes")
    version: int = Field(description="changes whenever the global set changes")
    epoch: int = Field(description="DSER4 reset epoch")
    agents: int
    created_at: int
    warnings: list[str] = []


class ArmRef(BaseModel):
    index: int
    name: str


class BestArm(BaseModel):
    experiment: str
    status: Literal["exploring", "identified"]
    best_arm: ArmRef | None
    remaining_arms: list[ArmRef]
    votes: dict[str, int]
    version: int
    epoch: int


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epoch: StrictInt | None = Field(
        None, ge=0, description="reset only if still in this epoch (agents must give it)"
    )


class ResetResult(BaseModel):
    reset: bool
    version: int
    epoch: int


def _public(state: dict) -> ExperimentPublic:
    warnings = []
    if state["agents"] < state["threshold"]:
        warnings.append(
            f"{state['agents']} agent(s) enrolled but an arm needs {state['threshold']} distinct "
            "voters: no arm can be eliminated until enough agents enroll"
        )
    return ExperimentPublic(**state, warnings=warnings)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    dependencies=[AdminDep],
    response_model=ExperimentPublic,
)
async def create_experiment(body: ExperimentCreate, store: StoreDep) -> ExperimentPublic:
    config = body.algorithm_config()
    sigma = None if body.sigma is None else float(body.sigma)
    return _public(await store.create(body.id, body.arms, config, sigma))


@router.get("", response_model=list[ExperimentPublic])
async def list_experiments(store: StoreDep) -> list[ExperimentPublic]:
    return [_public(await store.get(exp)) for exp in await store.ids() if await store.exists(exp)]


@router.get("/{experiment}", response_model=ExperimentPublic)
async def get_experiment(experiment: ExperimentId, store: StoreDep) -> ExperimentPublic:
    return _public(await store.get(experiment))


@router.get("/{experiment}/best-arm", response_model=BestArm)
async def best_arm(experiment: ExperimentId, store: StoreDep) -> BestArm:
    state = await store.get(experiment)
    arms = state["arms"]
    remaining = [ArmRef(index=a, name=arms[a]) for a in state["remaining_arms"]]
    identified = len(remaining) == 1
    return BestArm(
        experiment=experiment,
        status="identified" if identified else "exploring",
        best_arm=remaining[0] if identified else None,
        remaining_arms=remaining,
        votes={arms[a]: v for a, v in enumerate(state["votes"])},
        version=state["version"],
        epoch=state["epoch"],
    )


@router.post("/{experiment}/reset", response_model=ResetResult)
async def reset_experiment(
    experiment: ExperimentId,
    store: StoreDep,
    settings: SettingsDep,
    credentials: Credentials,
    body: ResetRequest | None = None,
) -> ResetResult:
    """Admin token: unconditional reset. Agent token (DSER4 only): reset if still in `epoch`."""
    token = bearer_token(credentials)
    epoch = body.epoch if body else None
    if not same_secret(token, settings.admin_token):
        await store.authenticate(token, experiment)
        _, config = await store.config(experiment)
        if not config.global_reset:
            raise Forbidden("agents may reset only a DSER4 experiment (subroutine ser4)")
        if epoch is None:
            raise Invalid("epoch: an agent's reset must name the epoch it is in")
    done, version, new_epoch = await store.reset(experiment, epoch)
    return ResetResult(reset=done, version=version, epoch=new_epoch)


@router.delete("/{experiment}", status_code=status.HTTP_204_NO_CONTENT, dependencies=[AdminDep])
async def delete_experiment(experiment: ExperimentId, store: StoreDep) -> None:
    await store.delete(experiment)
