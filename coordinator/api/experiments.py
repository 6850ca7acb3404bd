"""Experiments: create, read, reset, delete, and the best arm."""

from __future__ import annotations

import asyncio
import math
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Path, Query, Response, status
from prometheus_client import Counter
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)

from common import cde
from common.algorithms import AlgorithmConfig
from common.certificate import Certificate, certify, upper
from common.errors import ParameterError
from common.subroutines import USER_SUBROUTINES
from common.votes import tie_certificate
from coordinator.api.arm_names import MAX_ARM_NAME, arm_name, distinct_arms
from coordinator.api.deps import (
    AdminDep,
    Credentials,
    SettingsDep,
    StoreDep,
    bearer_token,
    problems,
    same_secret,
)
from coordinator.caching import (
    CACHE_HEADERS,
    NOT_MODIFIED,
    cache_headers,
    etag,
    matching,
    not_modified,
)
from coordinator.errors import Forbidden, Invalid, RateLimited
from coordinator.settings import Settings
from coordinator.store import ExperimentState, Status

router = APIRouter(prefix="/v1/experiments", tags=["experiments"])
# The subroutines an experiment may name (`dexp subroutines`), as an enum of the OpenAPI schema.
SubroutineName = Literal[USER_SUBROUTINES]  # type: ignore[valid-type]
# No per-agent label: which agent resets is the admin's to read (GET .../agents), not the scraper's.
RESETS = Counter("dexp_resets_total", "Reset requests, by who and outcome", ["by", "outcome"])

ExperimentId = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="experiment id", examples=["demo"]),
]
IfNoneMatch = Annotated[
    str | None,
    Header(
        description="the ETag of the document the client has (or a list, or *): 304 if it is "
        "current"
    ),
]
# Strict JSON numbers: an integer or a float, never a string or a boolean; finite and bounded, so
# that float() of any accepted value is exact enough and never overflows.
MAX_NUMBER = 1e9


def unit(default: float, description: str) -> Any:
    return Field(default, ge=0, le=1, allow_inf_nan=False, description=description)


def positive(default: float | None, description: str) -> Any:
    return Field(default, gt=0, le=MAX_NUMBER, allow_inf_nan=False, description=description)


# At most 100 characters as sent (blanks around a name are trimmed, then MAX_ARM_NAME holds).
ArmName = Annotated[StrictStr, Field(min_length=1, max_length=100), AfterValidator(arm_name)]


class ExperimentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", examples=["demo"])
    arms: Annotated[
        list[ArmName],
        Field(
            min_length=2,
            max_length=1000,
            examples=[["A", "B", "C"]],
            description="arm names: printable, trimmed and NFKC-normalized, at most "
            f"{MAX_ARM_NAME} characters, with no invisible character, stacked marks or mixed "
            "look-alike scripts, and no two that read the same (ignoring case, or with one "
            "Unicode confusable skeleton, UTS #39)",
        ),
        AfterValidator(distinct_arms),
    ]
    algorithm: Literal["de", "ce", "dp-mase", "cde"] = Field(
        "de",
        description="de, ce, dp-mase (agents vote against arms), or cde (each agent sends one "
        "randomized report, POST .../report; docs/CDE.md)",
    )
    subroutine: SubroutineName = "ser3"
    epsilon: StrictFloat = positive(0.25, "accuracy: an arm within epsilon of the best is good")
    delta: StrictFloat = unit(0.05, "global failure probability")
    eta: StrictFloat = unit(
        0.9,
        "each agent's local failure probability (DE, CE); M = ceil(log delta / log eta). "
        "Certifies 1 - eta; a higher eta does not lower what one agent's votes reveal "
        "(docs/PRIVACY.md)",
    )
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
    rewards: Literal["bounded", "bernoulli"] = Field(
        "bounded",
        description="with sigma null, what the rewards are: bounded (each in [0, 1]) or bernoulli "
        "(each 0 or 1: the agents refuse any other reward, and CDE's budget is the exact "
        "binomial one, about half the bounded one; docs/CDE.md)",
    )
    privacy: StrictFloat = Field(
        cde.DEFAULT_PRIVACY,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="CDE: P, the hit-rate bound under a uniform prior over which arm is best, "
        "equivalently e0 = log(P (K-1)/(1-P)) (the certified_epsilon of each report), in "
        "(1/K, 1): the report is the agent's answer with probability P, another arm otherwise "
        "(K-ary randomized response)",
    )
    agents: StrictInt | None = Field(
        None,
        ge=1,
        le=1_000_000_000,
        description="CDE only: N, the agents expected; the threshold is the smallest number of "
        "reports that certifies delta with N of them (null: DEXP_MAX_AGENTS). What is certified "
        "is computed with the agents enrolled, and never grows as more enroll",
    )

    def algorithm_config(self) -> AlgorithmConfig:
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
                privacy=float(self.privacy),
            )
        except ParameterError as exc:
            raise Invalid(str(exc)) from None

    @property
    def bernoulli(self) -> bool:
        return self.rewards == "bernoulli"

    def expected_agents(self, settings: Settings) -> int | None:
        """CDE's N, from which its threshold is chosen: `agents`, else the cap DEXP_MAX_AGENTS;
        None for the others (refused if given: their threshold does not depend on N)."""
        if self.algorithm != "cde":
            if self.agents is not None:
                raise Invalid(
                    f"agents={self.agents}: only CDE chooses its threshold from the agents "
                    f"expected; {self.algorithm}'s does not depend on them"
                )
            return None
        cap = settings.max_agents
        if self.agents is None and not cap:
            raise Invalid("agents: required for CDE when DEXP_MAX_AGENTS is 0 (no cap)")
        if self.agents is not None and cap and self.agents > cap:
            raise Invalid(
                f"agents={self.agents} is above DEXP_MAX_AGENTS = {cap}: at most {cap} agents "
                "can enroll"
            )
        return self.agents or cap

    def checked_config(self, settings: Settings) -> AlgorithmConfig:
        """The configuration, refused (422) if it cannot finish in expectation or is not valid for
        its rewards: a subroutine whose bounds do not hold for them (kl-* on sub-Gaussian
        rewards), epsilon above 1 for rewards in [0, 1] (every arm is eps-optimal), a threshold M + f
        that the agent cap (DEXP_MAX_AGENTS) could never reach, or, under CE, a cap whose
        expected votes per arm, DEXP_MAX_AGENTS x (1 - xi), stay below the threshold. CDE's
        threshold is chosen from its `expected_agents`."""
        config = self.algorithm_config()
        expected = self.expected_agents(settings)
        try:
            config.check_rewards(self.sigma, self.bernoulli)
            if expected is not None:
                config.validate_for(len(self.arms), expected)
            threshold = config.threshold(len(self.arms), expected)
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        cap = settings.max_agents
        if threshold is not None and cap and threshold > cap:
            raise Invalid(
                f"threshold M + f = {threshold} is above the agent cap DEXP_MAX_AGENTS = "
                f"{cap}: no arm could ever be eliminated"
            )
        if threshold is not None and cap and config.vote_drop and cap * (1 - config.xi) < threshold:
            raise Invalid(
                f"xi={config.xi!r} is invalid: CE drops each vote with probability xi, so at most "
                f"DEXP_MAX_AGENTS x (1 - xi) = {cap} x {1 - config.xi:g} = "
                f"{cap * (1 - config.xi):g} votes against an arm arrive in expectation, below the "
                f"threshold {threshold}: no arm could leave in expectation"
            )
        return config


# What the experiment certifies (common/certificate.py), in both documents that answer a reader.
CERTIFIED_FAILURE = Field(
    description="the probability bound, with the agents enrolled, that the best arm is voted out "
    "by error: P(Bin(N - f, p) >= M), p each agent's proven error bound (docs/SUBROUTINES.md, "
    "section 3); a wrong answer needs it unless another arm is within epsilon of the best. CDE: "
    "the bound on a wrong answer, an arm that is not epsilon-optimal accepted or the best arm "
    "short of the threshold (docs/CDE.md)"
)
CERTIFIED_EPSILON = Field(
    None,
    description="CDE: e0, each report's local differential privacy, what holds for every prior: "
    "whatever it believed before, any adversary's odds about one agent's answer, hence its "
    "rewards, are multiplied by at most e^e0 = P (K - 1) / (1 - P) by its report, P = "
    "params.privacy (docs/CDE.md, section 2); null for the voting algorithms (DP-MASE's "
    "dp_epsilon is per reward, not about the agent's answer, which its votes reveal: "
    "docs/PRIVACY.md)",
)
HIT_RATE_UNIFORM_PRIOR = Field(
    None,
    description="CDE: the corollary of certified_epsilon for an adversary with a uniform prior "
    "over which arm is best: it names an agent's eps-optimal arm from its report at most this "
    "often, e^e0 / (e^e0 + K - 1) = params.privacy when one arm alone is eps-optimal. Another "
    "prior gives another hit rate (0.5 for a prior of 0.5 on one arm, report or not); null for "
    "the voting algorithms",
)
PRIVACY_CERTIFICATE = Field(
    None,
    description="CDE: certified_epsilon and hit_rate_uniform_prior in plain sentences (and the "
    "hit rate when two arms are eps-optimal); null for the voting algorithms",
)
CERTIFIED_AGENTS = Field(description="N, the agents enrolled, for which certified_failure holds")
CERTIFIED_AT_CAP = Field(
    description="certified_failure if DEXP_MAX_AGENTS agents enroll (the most the coordinator "
    "lets in); null: no cap"
)
CERTIFICATE = Field(description="certified_failure in one plain sentence: what it bounds and why")


class Elimination(BaseModel):
    arm: int
    name: str
    votes: int
    time: int = Field(description="unix time in milliseconds")
    order: int


class LoadGeneratorLive(BaseModel):
    """What the load generator feeding the experiment publishes in its lease, renewed about every
    0.2 s while it runs. It comes from a process without admin rights: each field is null when
    missing or malformed."""

    run: str | None = Field(description="the run's id")
    host: str | None = Field(description="the host it runs on")
    started_at: int | None = Field(description="unix ms when the run started")
    updated_at: int | None = Field(description="unix ms of these figures")
    epoch: int | None = Field(description="the experiment's epoch the run last saw")
    activations: int | None = Field(description="activations the agents processed, this run")
    delivered: int | None = Field(description="activations delivered to the agents, this run")
    backlog: int | None = Field(description="activations in the agents' streams, not yet processed")
    activations_per_second: float | None = Field(
        description="processed per second over the last few seconds"
    )


class ArmRef(BaseModel):
    index: int
    name: str


class LoadGeneratorAtDecision(BaseModel):
    """The figures of the load generator run that fed the decision, from its lease: read at the
    first read of the decision, refreshed while that run still renews its lease (it stops within
    one poll, about 0.2 s, of the decision), and kept with the result after the run ends and its
    lease expires. A run started after the decision is not counted."""

    run: str | None = Field(description="the run's id")
    activations: int | None = Field(description="activations the agents processed, that run")
    activations_per_second: float | None = Field(
        description="processed per second over the run's last few seconds"
    )
    updated_at: int | None = Field(description="unix ms of these figures")


class ExperimentResult(BaseModel):
    """What a decided experiment decided, kept in Redis by the first coordinator that read the
    decision (coordinator/results.py): it stays when the load generator stops. A reset, or an
    enrollment that reopens a tie, ends it (null while exploring again)."""

    status: Literal["identified", "tied"]
    best_arm: ArmRef | None = Field(description="identified: the one arm left; null otherwise")
    candidates: list[ArmRef] = Field(description="tied: the arms left; empty otherwise")
    decided_at: int = Field(
        description="unix ms of the decision: the last elimination (identified), or the "
        "publication that showed the tie"
    )
    duration_ms: int = Field(description="decided_at - created_at")
    epoch: int
    version: int
    agents: int = Field(description="agents enrolled at the decision")
    messages: int = Field(description="votes (CDE: reports) received, every epoch, at the decision")
    votes: list[int] = Field(description="distinct voters against each arm at the decision")
    reports: list[int] | None = Field(description="CDE: reports per arm; null for the others")
    load_generator: LoadGeneratorAtDecision | None = Field(
        description="when a load generator fed this epoch: its figures at the decision; null: none"
    )


RESULT = Field(
    None, description="the decision, kept once made (see ExperimentResult); null while exploring"
)


class ExperimentPublic(BaseModel):
    id: str
    arms: list[str]
    params: dict[str, bool | int | float | str]
    sigma: float | None = Field(description="sub-Gaussian reward scale; null: rewards in [0, 1]")
    rewards: Literal["bounded", "bernoulli"] = Field(
        "bounded",
        description="with sigma null: bounded (each reward in [0, 1]) or bernoulli (each 0 or 1; "
        "the agents refuse any other)",
    )
    pulls_per_arm: int | None = Field(
        None,
        description="CDE: T, the pulls per arm of each agent's fixed-budget run, fixed when the "
        "experiment was created from epsilon, eta, the arms and the rewards (docs/CDE.md, "
        "section 1); the agents play it as published. null for the others",
    )
    threshold: int = Field(
        description="distinct votes that remove an arm: M + f (f: params.tolerance); CDE: the "
        "reports that accept an arm (every other arm leaves then), chosen from expected_agents"
    )
    remaining_arms: list[int]
    votes: list[int] = Field(description="distinct voters against each arm, this epoch")
    reports: list[int] | None = Field(
        None, description="CDE: the agents that reported each arm; null for the others"
    )
    expected_agents: int | None = Field(
        None, description="CDE: N, the agents expected, from which the threshold was chosen"
    )
    eliminations: list[Elimination]
    messages: int = Field(description="votes received, counted or not, in every epoch")
    ignored_messages: int = Field(description="late, duplicate or stale-epoch votes, every epoch")
    epoch_messages: int = Field(
        0, description="votes received since this epoch began (creation or last reset)"
    )
    version: int = Field(description="changes whenever the global set changes")
    epoch: int = Field(description="DSER4 reset epoch")
    epoch_started_at: int | None = Field(
        None,
        description="unix ms when this epoch began: the creation or the last reset (null: not "
        "known, for an experiment reset before the field existed)",
    )
    agents: int
    settled_agents: int = Field(
        description="agents that said they settled this epoch (CE: their local set holds one arm)"
    )
    created_at: int
    status: Status = Field(
        description="exploring | identified (one arm left) | tied (several arms left and none "
        "can reach the threshold with the agents enrolled: see GET .../best-arm)"
    )
    warnings: list[str] = []
    load_generator: LoadGeneratorLive | None = Field(
        None, description="the load generator feeding the experiment now; null: none"
    )
    result: ExperimentResult | None = RESULT
    votes_history: list[tuple[int, int]] = Field(
        [],
        description="this epoch's total votes (CDE: reports) over time, as published: [unix ms, "
        "total] at each publication that changed it, at most 120 points (the older ones thinned)",
    )
    certified_failure: float = CERTIFIED_FAILURE
    certified_agents: int = CERTIFIED_AGENTS
    certified_failure_at_max_agents: float | None = CERTIFIED_AT_CAP
    certificate: str = CERTIFICATE
    certified_epsilon: float | None = CERTIFIED_EPSILON
    hit_rate_uniform_prior: float | None = HIT_RATE_UNIFORM_PRIOR
    privacy_certificate: str | None = PRIVACY_CERTIFICATE


class ExperimentSummary(BaseModel):
    id: str
    status: Status
    n_arms: int
    remaining: int = Field(description="arms still in the global set")
    threshold: int
    agents: int
    version: int
    epoch: int
    created_at: int
    result: ExperimentResult | None = RESULT


class ExperimentPage(BaseModel):
    experiments: list[ExperimentSummary]
    next: str | None = Field(description="pass as `after` for the next page; null: the last page")


class Voters(BaseModel):
    experiment: str
    epoch: int
    version: int
    voters: list[list[str]] = Field(description="the agent ids against each arm, this epoch")
    by_agent: dict[str, list[int]] = Field(
        description="each voting agent's vote vector: the arms it voted against, this epoch"
    )


class AgentView(BaseModel):
    agent_id: str
    index: int = Field(description="enrollment order, from 1")
    voted_against: list[int] = Field(description="arms it voted against, this epoch")
    resets: int = Field(description="DSER4 resets of the experiment it made")
    last_reset_at: int | None = Field(description="unix ms of its last reset")


class AgentPage(BaseModel):
    experiment: str
    agents: list[AgentView]
    next: int | None = Field(description="pass as `after` for the next page; null: the last page")


class TicketRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: StrictInt = Field(ge=1, le=100_000, description="tickets to issue (one agent each)")
    ttl_seconds: StrictInt = Field(
        86_400, ge=1, le=365 * 86_400, description="how long they stay valid"
    )


class Tickets(BaseModel):
    experiment: str
    tickets: list[str] = Field(
        description="one-time enrollment tickets, shown once: each enrolls one agent "
        "(POST /v1/agents with 'Authorization: Bearer <ticket>')"
    )
    expires_at: int = Field(description="unix ms after which unused tickets are refused")


class BestArm(BaseModel):
    experiment: str
    status: Status = Field(
        description="exploring; identified: one arm left (`best_arm`); tied: several arms left "
        "and none can reach the threshold any more with the agents enrolled (each agent kept "
        "one of them), so the experiment has ended with `candidates`"
    )
    best_arm: ArmRef | None
    remaining_arms: list[ArmRef]
    candidates: list[ArmRef] = Field(
        description="tied: the remaining arms, among which the best arm is (see `certified`); "
        "empty otherwise"
    )
    certified: str | None = Field(
        description="tied: what the guarantee gives about the candidates, and nothing more; "
        "null otherwise"
    )
    votes: dict[str, int]
    reports: dict[str, int] | None = Field(
        None, description="CDE: the agents that reported each arm; null for the others"
    )
    version: int
    epoch: int
    certified_failure: float = CERTIFIED_FAILURE
    certified_agents: int = CERTIFIED_AGENTS
    certified_failure_at_max_agents: float | None = CERTIFIED_AT_CAP
    certificate: str = CERTIFICATE
    certified_epsilon: float | None = CERTIFIED_EPSILON
    hit_rate_uniform_prior: float | None = HIT_RATE_UNIFORM_PRIOR
    privacy_certificate: str | None = PRIVACY_CERTIFICATE


class Suspect(BaseModel):
    agent_id: str
    votes: int = Field(description="arms this agent voted against, this epoch")
    voted_against: list[int] = Field(description="those arms' indices")


class Suspects(BaseModel):
    experiment: str
    status: Status
    reference_arm: ArmRef = Field(
        description="identified: the best arm; exploring or tied: the leading arm, the remaining "
        "arm with the fewest votes (the lowest index among equals)"
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
    reset: bool = Field(description="a new epoch began")
    version: int
    epoch: int
    pending: bool = Field(
        False,
        description="with a tolerance f > 0: the request is counted, and the reset waits for f + 1 "
        "distinct agents' requests within DEXP_RESET_QUORUM_SECONDS",
    )
    requests: int = Field(0, description="distinct agents' requests counted in the window")
    needed: int = Field(1, description="requests that make a reset: f + 1")


def certificate_of(state: ExperimentState, agents: int | None = None) -> Certificate:
    """What the experiment certifies with `agents` agents (default: those enrolled), when at most
    f (its tolerance) of them lie. CDE's threshold is the one it was created with (chosen from
    the agents expected), whatever the agents enrolled."""
    config = state.design.config
    enrolled = state.agents if agents is None else agents
    fixed = state.threshold if config.reports else None
    return certify(config, len(state.arms), enrolled, threshold=fixed)


def certified_fields(state: ExperimentState, settings: Settings) -> dict[str, Any]:
    """The certificate's fields of both documents: the bound with the agents enrolled, and with
    as many as the cap lets in; CDE's privacy."""
    certificate = certificate_of(state)
    cap = settings.max_agents
    return {
        "certified_failure": certificate.failure,
        "certified_agents": certificate.agents,
        "certified_failure_at_max_agents": certificate_of(state, cap).failure if cap else None,
        "certificate": certificate.statement(),
        **privacy_fields(state.design.config, len(state.arms)),
    }


def privacy_fields(config: AlgorithmConfig, n_arms: int) -> dict[str, Any]:
    """CDE's e0 (every prior), its hit rate under a uniform prior with one eps-optimal arm (the
    services do not know the means) and their sentence; null for the voting algorithms."""
    if not config.reports:
        return dict.fromkeys(("certified_epsilon", "hit_rate_uniform_prior", "privacy_certificate"))
    return {
        "certified_epsilon": cde.report_epsilon(config.privacy, n_arms),
        "hit_rate_uniform_prior": cde.hit_rate_uniform_prior(config.privacy, n_arms),
        "privacy_certificate": cde.privacy_sentence(config.privacy, n_arms),
    }


def warnings_of(state: ExperimentState) -> list[str]:
    """What the experiment risks with the agents enrolled now, without being invalid."""
    agents, threshold = state.agents, state.threshold
    config = state.design.config
    warnings = []
    if config.reports:
        if agents < threshold:
            warnings.append(
                f"{agents} agent(s) enrolled but an arm is accepted at {threshold} reports, one "
                "per agent: no answer until enough agents enroll"
            )
    elif agents < threshold:
        warnings.append(
            f"{agents} agent(s) enrolled but an arm needs {threshold} distinct "
            "voters: no arm can be eliminated until enough agents enroll"
        )
    else:
        if state.status != "identified":  # identified: it did not end tied
            warnings += config.warnings(len(state.arms), agents)  # ties possible
        expected = agents * (1 - config.vote_drop)
        if config.vote_drop and expected < threshold:
            warnings.append(
                f"{agents} agents x (1 - xi) = {expected:g} < threshold {threshold}: CE drops each "
                f"vote with probability xi={config.xi:g}, so fewer than {threshold} votes against "
                "an arm arrive in expectation and the experiment cannot finish in expectation: "
                f"enroll at least {math.ceil(threshold / (1 - config.xi) - 1e-9)} agents"
            )
    if config.global_reset:
        warnings.append(
            f"DSER4 (phi={config.phi:g}): each activation resets the whole experiment with "
            f"probability phi, so about 1/phi = {1 / config.phi:,.0f} activations pass between "
            "resets on average, and each reset clears every vote: a run that needs more "
            "activations than that rarely finishes"
        )
    uncertified = certificate_of(state).warning()  # certified_failure above delta
    return [*warnings, uncertified] if uncertified else warnings


def _public(state: ExperimentState, settings: Settings) -> ExperimentPublic:
    return ExperimentPublic(
        **state.document(), warnings=warnings_of(state), **certified_fields(state, settings)
    )


def certified(state: ExperimentState) -> str:
    """What a tie certifies (common.votes.tie_certificate), with this experiment's f, M, number
    of agents and certified failure. CDE: its reports are spent without an answer."""
    certificate = certificate_of(state)
    if state.reports is not None:
        return reports_spent(state, certificate)
    return tie_certificate(
        certificate.honest_votes, certificate.agents, certificate.failure, certificate.liars
    )


def reports_spent(state: ExperimentState, certificate: Certificate) -> str:
    """CDE's tie: no arm can reach the threshold with the reports the agents enrolled can still
    send. Nothing is certified about the candidates: the wrong answer the certificate counts."""
    reports, agents, m = state.reports or [], state.agents, state.threshold
    sent = sum(reports)
    return (
        f"No answer with these agents: an arm is accepted at {m} reports, {sent} of the "
        f"{agents:,} agents enrolled reported (at most {max(reports)} for one arm) and the "
        f"{agents - sent:,} others cannot bring any arm to {m}. Nothing is certified about which "
        "candidate is best: the certificate counts this outcome as a wrong answer, whose "
        f"probability is at most {upper(certificate.failure)}. More agents enrolled can end it."
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    dependencies=[AdminDep],
    response_model=ExperimentPublic,
    responses=problems(401, 409, 422),
)
async def create_experiment(
    body: ExperimentCreate, store: StoreDep, settings: SettingsDep
) -> ExperimentPublic:
    """Admin token. The threshold is M + f: M from delta and eta (beta for DP-MASE), f the
    `tolerance`. With at most f lying agents, any arm that leaves had at least M honest votes
    against it, so the liars add nothing to what honest errors could do (what that certifies:
    docs/SUBROUTINES.md, section 3); eliminating the other arms then needs M + f honest voters.
    CDE: the threshold is the smallest number of reports that certifies delta with the `agents`
    expected (DEXP_MAX_AGENTS if not given), f liars included (docs/CDE.md)."""
    # CDE's threshold is a search (up to seconds for hundreds of arms): off the event loop
    config = await asyncio.to_thread(body.checked_config, settings)
    sigma = None if body.sigma is None else float(body.sigma)
    agents = body.expected_agents(settings)
    created = await store.create(body.id, body.arms, config, sigma, agents, body.rewards)
    return _public(created, settings)


@router.get("", response_model=ExperimentPage, responses=problems(422))
async def list_experiments(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=100, description="experiments per page")] = 50,
    after: Annotated[
        str, Query(pattern=r"^[A-Za-z0-9_-]{0,64}$", description="the last id of the previous page")
    ] = "",
) -> ExperimentPage:
    """Experiments in id order, one page at a time, as summaries (aggregates only)."""
    ids = await store.ids(after, limit + 1)
    page = [ExperimentSummary(**s) for s in await store.summaries(ids[:limit])]
    return ExperimentPage(experiments=page, next=ids[limit - 1] if len(ids) > limit else None)


def cacheable(description: str) -> dict[int | str, dict[str, Any]]:
    """The responses of a cacheable read: 200 with its ETag and Cache-Control, 304, 404, 422."""
    return {
        200: {"description": description, "headers": CACHE_HEADERS},
        **NOT_MODIFIED,
        **problems(404, 422),
    }


def conditional(
    kind: str,
    state: ExperimentState,
    if_none_match: str | None,
    settings: Settings,
    response: Response,
) -> Response | None:
    """The document's cache headers on `response`; a 304 if If-None-Match names its tag (a
    conditional request coordinator.caching.ConditionalReads did not answer: the document
    changed, or its tag came from a read newer than the revision that middleware read)."""
    lease = state.tags.lease if kind == "state" else b""
    headers = cache_headers(etag(kind, state.tags.revision, lease), settings.cache_max_age_seconds)
    matched = matching(if_none_match, headers["ETag"])
    if matched is not None:
        return not_modified(matched, headers)
    response.headers.update(headers)
    return None


@router.get("/{experiment}", response_model=ExperimentPublic, responses=cacheable("the experiment"))
async def get_experiment(
    experiment: ExperimentId,
    store: StoreDep,
    settings: SettingsDep,
    response: Response,
    if_none_match: IfNoneMatch = None,
) -> Any:
    """Aggregates only, for anyone: votes per arm, remaining arms, eliminations, counters. Who
    voted is the admin's (GET .../voters). Cacheable: a strong ETag, Cache-Control with a short
    max-age, and 304 Not Modified for If-None-Match with the current tag."""
    state = await store.get_with_status(experiment)
    return conditional("state", state, if_none_match, settings, response) or _public(
        state, settings
    )


@router.get(
    "/{experiment}/voters",
    response_model=Voters,
    dependencies=[AdminDep],
    responses=problems(401, 404, 422),
)
async def voters(experiment: ExperimentId, store: StoreDep) -> Voters:
    """Admin token. The voter set of each arm and each agent's vote vector, this epoch."""
    state = await store.get(experiment, voters=True)
    live = state.live
    assert live is not None  # read with its voters
    by_agent: dict[str, list[int]] = {}
    for arm, ids in enumerate(live.voters):
        for agent in ids:
            by_agent.setdefault(agent, []).append(arm)
    return Voters(
        experiment=experiment,
        epoch=state.epoch,
        version=state.version,
        voters=live.voters,
        by_agent=dict(sorted(by_agent.items())),
    )


@router.get(
    "/{experiment}/agents",
    response_model=AgentPage,
    dependencies=[AdminDep],
    responses=problems(401, 404, 422),
)
async def agents(
    experiment: ExperimentId,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="agents per page")] = 100,
    after: Annotated[int, Query(ge=0, description="the last index of the previous page")] = 0,
) -> AgentPage:
    """Admin token. The enrolled agents in enrollment order: their votes this epoch and the
    resets each one made (to see who resets a DSER4 experiment)."""
    page = await store.agents_page(experiment, after, limit + 1)
    return AgentPage(
        experiment=experiment,
        agents=[AgentView(**a) for a in page[:limit]],
        next=page[limit - 1]["index"] if len(page) > limit else None,
    )


@router.post(
    "/{experiment}/tickets",
    status_code=status.HTTP_201_CREATED,
    response_model=Tickets,
    dependencies=[AdminDep],
    responses=problems(
        401, 404, 422, s422="invalid body, or more tickets or a longer ttl than allowed"
    ),
)
async def issue_tickets(
    experiment: ExperimentId, body: TicketRequest, store: StoreDep, settings: SettingsDep
) -> Tickets:
    """Admin token. One-time enrollment tickets for this experiment: each enrolls exactly one
    agent, until it expires. Only their digests are stored: the tickets are shown this once."""
    if body.count > settings.max_tickets:
        raise Invalid(f"count: at most {settings.max_tickets} tickets per request")
    if body.ttl_seconds > settings.max_ticket_ttl_seconds:
        raise Invalid(f"ttl_seconds: at most {settings.max_ticket_ttl_seconds}")
    tickets, expires_at = await store.issue_tickets(experiment, body.count, body.ttl_seconds)
    return Tickets(experiment=experiment, tickets=tickets, expires_at=expires_at)


@router.get("/{experiment}/best-arm", response_model=BestArm, responses=cacheable("the outcome"))
async def best_arm(
    experiment: ExperimentId,
    store: StoreDep,
    settings: SettingsDep,
    response: Response,
    if_none_match: IfNoneMatch = None,
) -> Any:
    """The outcome so far. identified: one arm left, the best arm. tied: several arms left and
    none can reach the threshold any more with the agents enrolled (with two arms within epsilon
    and fewer than 2 x threshold - 1 agents, each agent keeps one and votes against the other):
    the experiment has ended, with the remaining arms as `candidates` and what is `certified`
    about them. A tie is a verdict on the agents enrolled: more agents can end it. Cacheable, as
    GET /v1/experiments/{id}."""
    state = await store.get_with_status(experiment)
    unchanged = conditional("best-arm", state, if_none_match, settings, response)
    if unchanged is not None:
        return unchanged
    arms = state.arms
    remaining = [ArmRef(index=a, name=arms[a]) for a in state.remaining_arms]
    status = state.status
    return BestArm(
        experiment=experiment,
        status=status,
        best_arm=remaining[0] if status == "identified" else None,
        remaining_arms=remaining,
        candidates=remaining if status == "tied" else [],
        certified=certified(state) if status == "tied" else None,
        votes={arms[a]: v for a, v in enumerate(state.votes)},
        reports=None
        if state.reports is None
        else {arms[a]: n for a, n in enumerate(state.reports)},
        version=state.version,
        epoch=state.epoch,
        **certified_fields(state, settings),
    )


@router.get(
    "/{experiment}/suspects",
    response_model=Suspects,
    dependencies=[AdminDep],
    responses=problems(401, 404, 422),
)
async def suspects(experiment: ExperimentId, store: StoreDep) -> Suspects:
    """Admin token. Agents whose votes contradict the outcome: once the best arm is identified, the agents that
    voted against it; while exploring, those that voted against the leading arm (the remaining arm
    with the fewest votes). Votes of the current epoch only. A suspect is not proven to lie: an
    honest agent errs with probability up to eta, and a lying agent may vote like an honest one."""
    state = await store.get_with_status(experiment, voters=True)
    live = state.live
    assert live is not None  # read with its voters
    remaining, votes = state.remaining_arms, state.votes
    reference = min(remaining, key=lambda arm: (votes[arm], arm))
    voted: dict[str, list[int]] = {}
    for arm, voters in enumerate(live.voters):
        for agent in voters:
            voted.setdefault(agent, []).append(arm)
    return Suspects(
        experiment=experiment,
        status=state.status,
        reference_arm=ArmRef(index=reference, name=state.arms[reference]),
        suspects=[
            Suspect(agent_id=agent, votes=len(voted[agent]), voted_against=voted[agent])
            for agent in sorted(live.voters[reference])
        ],
        tolerance=state.design.tolerance,
    )


@router.post(
    "/{experiment}/reset",
    response_model=ResetResult,
    responses=problems(
        401,
        403,
        404,
        422,
        429,
        s403="an agent of another experiment, or a reset of a non-DSER4 one",
        s429="this agent or this experiment resets too fast (DEXP_RESET_RATE, "
        "DEXP_EXPERIMENT_RESET_RATE): retry after Retry-After seconds",
    ),
)
async def reset_experiment(
    experiment: ExperimentId,
    store: StoreDep,
    settings: SettingsDep,
    credentials: Credentials,
    body: ResetRequest | None = None,
) -> ResetResult:
    """Admin token: unconditional reset. Agent token (DSER4 only): reset if still in `epoch`,
    at most DEXP_RESET_RATE per second per agent and DEXP_EXPERIMENT_RESET_RATE per experiment;
    with a tolerance f > 0, only once f + 1 distinct agents asked within
    DEXP_RESET_QUORUM_SECONDS (`pending` until then: f liars cannot reset alone); each agent's
    resets are recorded for the admin (GET .../agents)."""
    token = bearer_token(credentials)
    epoch = body.epoch if body else None
    agent = ""
    if not same_secret(token, settings.admin_token):
        agent = await store.authenticate(token, experiment)
        _, config = await store.config(experiment)
        if not config.global_reset:
            raise Forbidden("agents may reset only a DSER4 experiment (subroutine ser4)")
        if epoch is None:
            raise Invalid("epoch: an agent's reset must name the epoch it is in")
    by = "agent" if agent else "admin"
    quorum = config.tolerance + 1 if agent else 1
    try:
        outcome = await store.reset(experiment, epoch, agent, quorum=quorum)
    except RateLimited:
        RESETS.labels(by=by, outcome="rate_limited").inc()
        raise
    label = "applied" if outcome.reset else "pending" if outcome.pending else "stale"
    RESETS.labels(by=by, outcome=label).inc()
    return ResetResult(
        reset=outcome.reset,
        version=outcome.version,
        epoch=outcome.epoch,
        pending=outcome.pending,
        requests=outcome.requests,
        needed=quorum,
    )


@router.delete(
    "/{experiment}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[AdminDep],
    responses=problems(401, 404, 422),
)
async def delete_experiment(experiment: ExperimentId, store: StoreDep) -> None:
    """Admin token. Removes every key of the experiment: its agents' tokens stop working."""
    await store.delete(experiment)
