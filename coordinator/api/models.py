"""The request bodies and documents of the experiments' routes (coordinator/api/experiments.py).

Their JSON and OpenAPI schema are the contract with the devices (the Python agent, the JS SDK, the
dashboard): a field moves, is renamed or reordered only with them. The configuration's defaults are
common.algorithms.DEFAULTS, as the coordinator's settings read them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
)

from common.algorithms import DEFAULTS, AlgorithmConfig
from common.errors import ParameterError
from common.ldp import DEFAULT_DP_EPSILON, DEFAULT_REPORTS_PER_AGENT
from common.subroutines import USER_SUBROUTINES
from coordinator.api.arm_names import MAX_ARM_NAME, arm_name, distinct_arms
from coordinator.errors import Invalid
from coordinator.settings import Settings
from coordinator.store import Status

# The subroutines an experiment may name (`dexp subroutines`), as an enum of the OpenAPI schema.
SubroutineName = Literal[USER_SUBROUTINES]  # type: ignore[valid-type]

# Strict JSON numbers: an integer or a float, never a string or a boolean; finite and bounded, so
# that float() of any accepted value is exact enough and never overflows.
MAX_NUMBER = 1e9


def unit(default: float, description: str) -> Any:
    return Field(default, ge=0, le=1, allow_inf_nan=False, description=description)


def positive(default: float | None, description: str) -> Any:
    return Field(default, gt=0, le=MAX_NUMBER, allow_inf_nan=False, description=description)


def whole(value: Any) -> Any:
    """2.0 is the integer 2: JSON has one number type, and the schema's "integer" (JSON Schema
    2020-12, OpenAPI 3.1) takes it, so a client or a fuzzer that sends it is within the contract. A
    whole float (exactly spelled: up to 2^53) becomes that int; anything else goes on to StrictInt,
    which refuses 2.5, "2" and true."""
    if type(value) is float and value.is_integer() and abs(value) <= 2**53:
        return int(value)
    return value


# A JSON integer: 2 or 2.0, never "2", true or 2.5. Bounds of an optional one go between StrictInt
# and WHOLE (`Annotated[StrictInt, Field(ge=1), WHOLE] | None`): outside, the schema loses them.
WHOLE = BeforeValidator(whole)
Integer = Annotated[StrictInt, WHOLE]
MAX_ARMS = 1000  # an experiment's arms: the highest arm index any experiment has is MAX_ARMS - 1


# At most 100 characters as sent (blanks around a name are trimmed, then MAX_ARM_NAME holds).
ArmName = Annotated[StrictStr, Field(min_length=1, max_length=100), AfterValidator(arm_name)]


def only_with(field: str, **values: list[str]) -> dict[str, Any]:
    """JSON Schema: `field` may be given (not null) only if each named field is one of its values
    (given: a field left out takes its default, which is none of them)."""
    return {
        "anyOf": [
            {
                "properties": {name: {"enum": allowed} for name, allowed in values.items()},
                "required": list(values),
            },
            {"properties": {field: {"type": "null"}}},
        ]
    }


def never_with(field: str, **values: list[str]) -> dict[str, Any]:
    """JSON Schema: `field` is null or left out if any named field is one of its values."""
    return {
        "allOf": [
            {
                "anyOf": [
                    {"properties": {name: {"not": {"enum": refused}}}},
                    {"properties": {field: {"type": "null"}}},
                ]
            }
            for name, refused in values.items()
        ]
    }


class ExperimentCreate(BaseModel):
    # What depends on the algorithm, in the schema too (the server refuses it, 422); what depends
    # on the numbers together (delta, eta, the threshold against the agent cap, ...) is only in
    # the 422's description: JSON Schema cannot compute it.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "allOf": [
                only_with("agents", algorithm=["cde"]),
                only_with("reports_per_agent", algorithm=["ldp"]),
                never_with("sigma", algorithm=["dp-mase", "ldp"], rewards=["bernoulli"]),
            ]
        },
    )

    id: StrictStr = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", examples=["demo"])
    arms: Annotated[
        list[ArmName],
        Field(
            min_length=2,
            max_length=MAX_ARMS,
            examples=[["A", "B", "C"]],
            description="arm names: printable, NFKC-normalized, trimmed, each run of spaces made "
            "one (as a page shows it), at most "
            f"{MAX_ARM_NAME} characters, with no invisible character, stacked marks or mixed "
            "look-alike scripts, and no two that read the same (ignoring case, or with one "
            "Unicode confusable skeleton, UTS #39)",
        ),
        AfterValidator(distinct_arms),
    ]
    algorithm: Literal["de", "ce", "dp-mase", "cde", "ldp"] = Field(
        DEFAULTS.algorithm,  # type: ignore[arg-type]  # a str there, one of these
        description="de, ce, dp-mase (agents vote against arms), cde (each agent sends one "
        "randomized report, POST .../report; docs/CDE.md), or ldp (no device learns: each sends "
        "up to reports_per_agent private one-bit reports, POST .../reports, and the coordinator "
        "decides; common/ldp.py)",
    )
    subroutine: SubroutineName = DEFAULTS.subroutine
    epsilon: StrictFloat = positive(
        DEFAULTS.epsilon, "accuracy: an arm within epsilon of the best is good"
    )
    delta: StrictFloat = unit(DEFAULTS.delta, "global failure probability")
    eta: StrictFloat = unit(
        DEFAULTS.eta,
        "each agent's local failure probability (DE, CE); M = ceil(log delta / log eta). "
        "Certifies 1 - eta; a higher eta does not lower what one agent's votes reveal "
        "(docs/PRIVACY.md)",
    )
    xi: StrictFloat = unit(DEFAULTS.xi, "CE: probability that a vote is dropped")
    dp_epsilon: StrictFloat = Field(
        DEFAULTS.dp_epsilon,
        ge=0,
        le=MAX_NUMBER,
        allow_inf_nan=False,
        description="DP-MASE: privacy budget; LDP: each report's local privacy, in (0, 10] "
        f"(default {DEFAULT_DP_EPSILON:g} for ldp)",
    )
    reports_per_agent: Annotated[StrictInt, Field(ge=1, le=1_000_000), WHOLE] | None = Field(
        None,
        description="LDP only: B, the reports one device may send (its privacy over its whole "
        f"reward history is B x dp_epsilon); null: {DEFAULT_REPORTS_PER_AGENT}",
    )
    beta: StrictFloat = unit(DEFAULTS.beta, "DP-MASE: local confidence")
    phi: StrictFloat = unit(DEFAULTS.phi, "SER4: reset probability")
    every_arm: StrictBool = DEFAULTS.every_arm
    tolerance: Integer = Field(
        DEFAULTS.tolerance,
        ge=0,
        le=1_000_000,
        description="f, the Byzantine (lying) agents tolerated: an arm leaves at M + f distinct "
        "votes, so f agents voting against the best arm cannot remove it. LDP: the intervals hold "
        "whatever f x reports_per_agent of the reports are",
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
        DEFAULTS.privacy,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description="CDE: P, the hit-rate bound under a uniform prior over which arm is best, "
        "equivalently e0 = log(P (K-1)/(1-P)) (the certified_epsilon of each report), in "
        "(1/K, 1): the report is the agent's answer with probability P, another arm otherwise "
        "(K-ary randomized response)",
    )
    agents: Annotated[StrictInt, Field(ge=1, le=1_000_000_000), WHOLE] | None = Field(
        None,
        description="CDE only: N, the agents expected; the threshold is the smallest number of "
        "reports that certifies delta with N of them (null: DEXP_MAX_AGENTS). What is certified "
        "is computed with the agents enrolled, and never grows as more enroll",
    )

    def algorithm_config(self) -> AlgorithmConfig:
        ldp = self.algorithm == "ldp"
        if self.reports_per_agent is not None and not ldp:
            raise Invalid(
                f"reports_per_agent={self.reports_per_agent}: only LDP's devices send several "
                f"reports; {self.algorithm}'s agents do not"
            )
        if ldp and self.sigma is not None:
            raise Invalid("sigma: LDP needs rewards in [0, 1] (each report privatizes one)")
        # LDP's own default: the voting algorithms' DP-MASE budget (0.1) is not a report's
        given = "dp_epsilon" in self.model_fields_set
        dp_epsilon = DEFAULT_DP_EPSILON if ldp and not given else float(self.dp_epsilon)
        try:
            return AlgorithmConfig(
                algorithm=self.algorithm,
                subroutine=self.subroutine,
                epsilon=float(self.epsilon),
                delta=float(self.delta),
                eta=float(self.eta),
                xi=float(self.xi),
                dp_epsilon=dp_epsilon,
                reports_per_agent=self.reports_per_agent or DEFAULT_REPORTS_PER_AGENT,
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


class Certified(BaseModel):
    """What the experiment certifies (common/certificate.py): the last fields of both documents
    that answer a reader. Listed FIRST among a document's bases, `class ExperimentPublic(Certified,
    ExperimentFields)`: pydantic orders the bases' fields from the last base to the first, so these
    stay the document's last fields, flat, and the JSON and the OpenAPI schema are as before."""

    certified_failure: float = Field(
        description="the probability bound, with the agents counted (once decided: those of the "
        "decision, as its result keeps them), that the best arm is voted "
        "out by error: P(Bin(N - f, p) >= M), p each agent's proven error bound "
        "(docs/SUBROUTINES.md, section 3); a wrong answer needs it unless another arm is within "
        "epsilon of the best. CDE: the bound on a wrong answer, an arm that is not "
        "epsilon-optimal accepted or the best arm short of the threshold (docs/CDE.md)"
    )
    certified_agents: int = Field(
        description="N, the agents counted (once decided: the decision's, `result.agents`), for "
        "which certified_failure holds"
    )
    certified_failure_at_max_agents: float | None = Field(
        description="certified_failure if DEXP_MAX_AGENTS agents enroll (the most the coordinator "
        "lets in); null: no cap"
    )
    certificate: str = Field(
        description="certified_failure in one plain sentence: what it bounds and why"
    )
    certified_epsilon: float | None = Field(
        None,
        description="CDE: e0, each report's local differential privacy, what holds for every "
        "prior: whatever it believed before, any adversary's odds about one agent's answer, hence "
        "its rewards, are multiplied by at most e^e0 = P (K - 1) / (1 - P) by its report, P = "
        "params.privacy (docs/CDE.md, section 2); null for the voting algorithms (DP-MASE's "
        "dp_epsilon is per reward, not about the agent's answer, which its votes reveal: "
        "docs/PRIVACY.md). LDP: user_privacy, B x dp_epsilon, a device's local privacy over "
        "every report it may send",
    )
    hit_rate_uniform_prior: float | None = Field(
        None,
        description="CDE: the corollary of certified_epsilon for an adversary with a uniform prior "
        "over which arm is best: it names an agent's eps-optimal arm from its report at most this "
        "often, e^e0 / (e^e0 + K - 1) = params.privacy when one arm alone is eps-optimal. Another "
        "prior gives another hit rate (0.5 for a prior of 0.5 on one arm, report or not); null "
        "for the voting algorithms and LDP",
    )
    privacy_certificate: str | None = Field(
        None,
        description="CDE: certified_epsilon and hit_rate_uniform_prior in plain sentences (and the "
        "hit rate when two arms are eps-optimal); LDP: certified_epsilon's; null for the voting "
        "algorithms",
    )


class ArmEstimate(BaseModel):
    index: int
    name: str
    reports: int = Field(description="the reports on this arm, as last published")
    mean: float | None = Field(
        description="the estimated mean reward, in [0, 1]; null before the arm's first report"
    )
    ci: tuple[float, float] = Field(
        description="[low, high]: every arm's interval holds at all times together with "
        "probability >= 1 - delta, whatever f x reports_per_agent of the reports are"
    )


class ArmLift(BaseModel):
    vs: int = Field(description="the other arm's index")
    name: str = Field(description="the other arm's name")
    mean: float | None = Field(
        description="the leader's estimated mean less this arm's; null if either has no report"
    )
    ci: tuple[float, float] = Field(description="[low, high], from the two arms' intervals")


class Crowd(BaseModel):
    """LDP's fields (coordinator/api/crowd.py), from the last publication; null for the other
    algorithms. Listed between Certified and a document's own fields among its bases."""

    allocation: list[float] | None = Field(
        None,
        description="LDP: the weight of each arm (0 for an arm out of the global set, summing to "
        "1): a device draws the arm it plays from it at each activation",
    )
    estimates: list[ArmEstimate] | None = Field(
        None, description="LDP: each arm's estimated mean reward and its interval"
    )
    lift: list[ArmLift] | None = Field(
        None,
        description="LDP: the leader (the remaining arm with the highest estimate) against "
        "each other arm",
    )
    dp_epsilon: float | None = Field(None, description="LDP: each report's local privacy")
    reports_per_agent: int | None = Field(
        None, description="LDP: B, the reports one device may send"
    )
    user_privacy: float | None = Field(
        None, description="LDP: B x dp_epsilon, a device's local privacy over all it sends"
    )
    reports_total: int | None = Field(None, description="LDP: the reports published, every arm")
    ones: list[int] | None = Field(
        None, description="LDP: the published reports of each arm whose bit is 1"
    )


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
    certified_failure: float | None = Field(
        None,
        description="the certified failure of the decision, with its `agents` (N): the document's "
        "certified_failure once decided, whatever agents come or go later; null for LDP (delta, "
        "whatever N) and for results kept before it was recorded",
    )
    certificate: str | None = Field(
        None, description="the sentence of that certificate (null as certified_failure)"
    )


RESULT = Field(
    None, description="the decision, kept once made (see ExperimentResult); null while exploring"
)


class ExperimentFields(BaseModel):
    """GET /v1/experiments/{id} but its certificate (ExperimentPublic)."""

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
    agents: int = Field(
        description="N, the agents counted: those enrolled, and those that left this epoch after "
        "a vote, a settled message or a report (what they said stands, so they count until a "
        "reset): the certificate's and the tie verdict's N"
    )
    agents_departed: int = Field(
        0, description="of `agents`, those that left (DELETE /v1/agents/me) and still count"
    )
    agents_simulated: int = Field(
        0,
        description="of the agents enrolled, those that said they are simulated (the agent "
        "service's, fed by a load generator; real devices do not)",
    )
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


class ExperimentPublic(Certified, Crowd, ExperimentFields):  # no docstring: the schema has none
    pass


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
    revoked_at: int | None = Field(
        None, description="unix ms when the admin revoked its token; null: its token works"
    )


class AgentRevoked(BaseModel):
    experiment: str
    agent_id: str
    revoked: bool = Field(description="revoked by this request (false: it was revoked before)")
    revoked_at: int = Field(description="unix ms of its revocation")


class AgentPage(BaseModel):
    experiment: str
    agents: list[AgentView]
    next: int | None = Field(description="pass as `after` for the next page; null: the last page")


class TicketRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: Integer = Field(ge=1, le=100_000, description="tickets to issue (one agent each)")
    ttl_seconds: Integer = Field(
        86_400, ge=1, le=365 * 86_400, description="how long they stay valid"
    )


class Tickets(BaseModel):
    experiment: str
    tickets: list[str] = Field(
        description="one-time enrollment tickets, shown once: each enrolls one agent "
        "(POST /v1/agents with 'Authorization: Bearer <ticket>')"
    )
    expires_at: int = Field(description="unix ms after which unused tickets are refused")


class BestArmFields(BaseModel):
    """GET .../best-arm but its certificate (BestArm)."""

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


class BestArm(Certified, Crowd, BestArmFields):  # no docstring: the schema has none
    pass


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

    epoch: Annotated[StrictInt, Field(ge=0), WHOLE] | None = Field(
        None,
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
