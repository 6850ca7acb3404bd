"""Experiments: create, read, reset, delete, and the best arm."""

from __future__ import annotations

from typing import Annotated, Any, Literal

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
    problems,
    same_secret,
)
from coordinator.errors import Forbidden, Invalid

router = APIRouter(prefix="/v1/experiments", tags=["experiments"])

ExperimentId = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="experiment id", examples=["demo"]),
]
# Strict JSON numbers: an integer or a float, never a string or a boolean; finite and bounded, so
# that float() of any accepted value is exact enough and never overflows.
MAX_NUMBER = 1e9


def unit(default: float, description: str) -> Any:
    return Field(default, ge=0, le=1, allow_inf_nan=False, description=description)


def positive(default: float | None, description: str) -> Any:
    return Field(default, gt=0, le=MAX_NUMBER, allow_inf_nan=False, description=description)


class ExperimentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", examples=["demo"])
    arms: list[Annotated[StrictStr, Field(min_length=1, max_length=64)]] = Field(
        min_length=2, max_length=1000, examples=[["A", "B", "C"]]
    )
    algorithm: Literal["de", "ce", "dp-mase"] = "de"
    subroutine: Literal["se", "ser3", "ser4", "me", "lucb"] = "ser3"
    epsilon: StrictFloat = positive(0.25, "accuracy: an arm within epsilon of the best is good")
    delta: StrictFloat = unit(0.05, "global failure probability")
    eta: StrictFloat = unit(0.9, "privacy level: each agent's local failure probability (DE, CE)")
    xi: StrictFloat = unit(0.0, "CE: probability that a vote is dropped")
    dp_epsilon: StrictFloat = Field(
        0.1, ge=0, le=MAX_NUMBER, allow_inf_nan=False, description="DP-MASE: privacy budget"
    )
    beta: StrictFloat = unit(0.5, "DP-MASE: local confidence")
    phi: StrictFloat = unit(0.0, "SER4: reset probability")
    every_arm: StrictBool = False
    tolerance: StrictInt = Field(
        0,
        ge=0,
        le=1_000_000,
        description="f, the Byzantine (lying) agents tolerated: an arm leaves at M + f distinct "
        "votes, so f agents voting against the best arm cannot remove it",
    )
    sigma: StrictFloat | None = positive(
        None, "sub-Gaussian scale of the rewards; null: rewards in [0, 1]"
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
                tolerance=self.tolerance,
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
    params: dict[str, bool | int | float | str]
    sigma: float | None = Field(description="sub-Gaussian reward scale; null: rewards in [0, 1]")
    threshold: int = Field(
        description="distinct votes that remove an arm: M + f (f: params.tolerance)"
    )
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


class Suspect(BaseModel):
    agent_id: str
    votes: int = Field(description="arms this agent voted against, this epoch")
    voted_against: list[int] = Field(description="those arms' indices")


class Suspects(BaseModel):
    experiment: str
    status: Literal["exploring", "identified"]
    reference_arm: ArmRef = Field(
        description="identified: the best arm; exploring: the leading arm, the remaining arm "
        "with the fewest votes (the lowest index among equals)"
    )
    suspects: list[Suspect] = Field(
        description="the agents that voted against the reference arm this epoch, by id"
    )
    tolerance: int = Field(description="f, the Byzantine agents the threshold tolerates")


class ResetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epoch: StrictInt | None = Field(
        None,
        ge=0,
        description="reset only if still in this epoch (agents must give it)",
        examples=[0],
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
    responses=problems(401, 409, 422),
)
async def create_experiment(body: ExperimentCreate, store: StoreDep) -> ExperimentPublic:
    """Admin token. The threshold is M + f: M from delta and eta (beta for DP-MASE), f the
    `tolerance`. With at most f lying agents, any arm that leaves had at least M honest votes
    against it, so the guarantee of the algorithm (the best arm kept with probability >= 1 - delta)
    holds as without liars; eliminating the other arms then needs M + f honest voters."""
    config = body.algorithm_config()
    sigma = None if body.sigma is None else float(body.sigma)
    return _public(await store.create(body.id, body.arms, config, sigma))


@router.get("", response_model=list[ExperimentPublic])
async def list_experiments(store: StoreDep) -> list[ExperimentPublic]:
    return [_public(await store.get(exp)) for exp in await store.ids() if await store.exists(exp)]


@router.get("/{experiment}", response_model=ExperimentPublic, responses=problems(404, 422))
async def get_experiment(experiment: ExperimentId, store: StoreDep) -> ExperimentPublic:
    return _public(await store.get(experiment))


def _status(remaining: list[int]) -> Literal["exploring", "identified"]:
    return "identified" if len(remaining) == 1 else "exploring"


@router.get("/{experiment}/best-arm", response_model=BestArm, responses=problems(404, 422))
async def best_arm(experiment: ExperimentId, store: StoreDep) -> BestArm:
    state = await store.get(experiment)
    arms = state["arms"]
    remaining = [ArmRef(index=a, name=arms[a]) for a in state["remaining_arms"]]
    identified = len(remaining) == 1
    return BestArm(
        experiment=experiment,
        status=_status(state["remaining_arms"]),
        best_arm=remaining[0] if identified else None,
        remaining_arms=remaining,
        votes={arms[a]: v for a, v in enumerate(state["votes"])},
        version=state["version"],
        epoch=state["epoch"],
    )


@router.get("/{experiment}/suspects", response_model=Suspects, responses=problems(404, 422))
async def suspects(experiment: ExperimentId, store: StoreDep) -> Suspects:
    """Agents whose votes contradict the outcome: once the best arm is identified, the agents that
    voted against it; while exploring, those that voted against the leading arm (the remaining arm
    with the fewest votes). Votes of the current epoch only. A suspect is not proven to lie: an
    honest agent errs with probability up to eta, and a lying agent may vote like an honest one."""
    state = await store.get(experiment)
    remaining, votes = state["remaining_arms"], state["votes"]
    reference = min(remaining, key=lambda arm: (votes[arm], arm))
    voted: dict[str, list[int]] = {}
    for arm, voters in enumerate(state["voters"]):
        for agent in voters:
            voted.setdefault(agent, []).append(arm)
    return Suspects(
        experiment=experiment,
        status=_status(remaining),
        reference_arm=ArmRef(index=reference, name=state["arms"][reference]),
        suspects=[
            Suspect(agent_id=agent, votes=len(voted[agent]), voted_against=voted[agent])
            for agent in sorted(state["voters"][reference])
        ],
        tolerance=int(state["params"].get("tolerance", 0)),
    )


@router.post(
    "/{experiment}/reset",
    response_model=ResetResult,
    responses=problems(
        401, 403, 404, 422, s403="an agent of another experiment, or a reset of a non-DSER4 one"
    ),
)
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


@router.delete(
    "/{experiment}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[AdminDep],
    responses=problems(401, 404, 422),
)
async def delete_experiment(experiment: ExperimentId, store: StoreDep) -> None:
    """Admin token. Removes every key of the experiment: its agents' tokens stop working."""
    await store.delete(experiment)
