"""Experiments: create, read, reset, delete, and the best arm (their models: coordinator/api/models.py)."""

from __future__ import annotations

import asyncio
import math
from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query, Response, status
from prometheus_client import Counter
from pydantic import BaseModel, Field

from common import cde
from common.algorithms import AlgorithmConfig
from common.certificate import Certificate, upper
from common.votes import tie_certificate
from coordinator.api.crowd import crowd_certificate, crowd_fields
from coordinator.api.deps import (
    Credentials,
    OperatorDep,
    SettingsDep,
    StoreDep,
    ViewerDep,
    authorize,
    bearer_token,
    problems,
    same_secret,
)
from coordinator.api.models import (
    AgentPage,
    AgentRevoked,
    AgentView,
    ArmRef,
    BestArm,
    ExperimentCreate,
    ExperimentPage,
    ExperimentPublic,
    ExperimentSummary,
    ResetRequest,
    ResetResult,
    Suspect,
    Suspects,
    TicketRequest,
    Tickets,
    Voters,
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
from coordinator.results import certificate_of
from coordinator.settings import Settings
from coordinator.store import KEY_PREFIX, ExperimentState, Role

router = APIRouter(prefix="/v1/experiments", tags=["experiments"])
# No per-agent label: which agent resets is the admin's to read (GET .../agents), not the scraper's.
RESETS = Counter("dexp_resets_total", "Reset requests, by who and outcome", ["by", "outcome"])

ExperimentId = Annotated[
    str,
    Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="experiment id", examples=["demo"]),
]
AgentId = Annotated[
    str,
    Path(
        pattern=r"^[A-Za-z0-9_-]{1,80}$",
        description="an agent id (GET .../agents): the experiment id, '-', 10 hex digits",
    ),
]
IfNoneMatch = Annotated[
    str | None,
    Header(
        description="the ETag of the document the client has (or a list, or *): 304 if it is "
        "current"
    ),
]


def settings_in_schema(schema: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The bounds this coordinator's settings put on request bodies, written into its OpenAPI
    schema (in place), so that a body the schema admits is never refused for them: the tickets
    of one request (DEXP_MAX_TICKETS), their lifetime (DEXP_MAX_TICKET_TTL_SECONDS) and CDE's
    agents expected (DEXP_MAX_AGENTS)."""
    bodies = schema["components"]["schemas"]
    tickets = bodies["TicketRequest"]["properties"]
    lower(tickets["count"], settings.max_tickets)
    lower(tickets["ttl_seconds"], settings.max_ticket_ttl_seconds)
    if settings.max_agents:
        agents = bodies["ExperimentCreate"]["properties"]["agents"]["anyOf"]
        lower(next(s for s in agents if s.get("type") == "integer"), settings.max_agents)
    return schema


def lower(field: dict[str, Any], maximum: int) -> None:
    """A field's schema with `maximum` unless its own is lower (the model's still holds)."""
    field["maximum"] = min(field.get("maximum", maximum), maximum)


def certified_fields(state: ExperimentState, settings: Settings) -> dict[str, Any]:
    """The certificate's fields of both documents: the bound with the agents counted (once
    decided, those of the decision: its kept result's), and with as many as the cap lets in;
    CDE's privacy. LDP's: delta, whatever the agents."""
    cap = settings.max_agents
    if state.design.crowd:
        return crowd_certificate(state, cap)
    certificate = certificate_of(state)
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
    """What the experiment risks with the agents enrolled now, without being invalid (LDP: nothing
    it certifies depends on them)."""
    agents, threshold = state.agents, state.threshold
    config = state.design.config
    if config.crowd:
        return []
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
    simulated = state.counters.agents_simulated
    if 0 < simulated < agents - state.counters.agents_departed:
        warnings.append(
            f"{simulated} of the agents enrolled are simulated (the agent service's, playing the "
            "load generator's problem) beside real devices: their votes are not about the "
            "devices' rewards; run them in an experiment of their own (compose: "
            "DEXP_AGENT_EXPERIMENTS)"
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
        **state.document(),
        warnings=warnings_of(state),
        **crowd_fields(state),
        **certified_fields(state, settings),
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
    dependencies=[OperatorDep],
    response_model=ExperimentPublic,
    responses=problems(401, 403, 409, 422),
)
async def create_experiment(
    body: ExperimentCreate, store: StoreDep, settings: SettingsDep
) -> ExperimentPublic:
    """Operator key (or the admin token). The threshold is M + f: M from delta and eta (beta for
    DP-MASE), f the `tolerance`. With at most f lying agents, any arm that leaves had at least M honest votes
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


class Waiting(BaseModel):
    """The publication batch's progress: how many counted messages the public counts lack."""

    experiment: str
    waiting: int = Field(
        description="counted messages (votes, CDE's and LDP's reports; anyone's) not yet in the "
        "published counts: they are published together once there are `publish_batch` of them, "
        "or with an elimination at the next tick of DEXP_PUBLISH_CADENCE_SECONDS"
    )
    publish_batch: int = Field(description="DEXP_PUBLISH_BATCH")


@router.get(
    "/{experiment}/waiting",
    response_model=Waiting,
    responses=problems(404, 422),
)
async def waiting(experiment: ExperimentId, store: StoreDep, response: Response) -> Waiting:
    """For anyone: the number of counted messages waiting for the next publication (never their
    arms: what the batch rule already bounds, docs/PRIVACY.md "Timing"), so that a reader of the
    public counts knows why they do not move yet. Not part of the experiment's document, whose
    ETag moves only with a publication (a polling device's 304s); never cached."""
    response.headers["Cache-Control"] = "no-store"
    return Waiting(
        experiment=experiment,
        waiting=await store.waiting(experiment),
        publish_batch=store.limits.publish_batch,
    )


@router.get(
    "/{experiment}/voters",
    response_model=Voters,
    dependencies=[ViewerDep],
    responses=problems(401, 403, 404, 422),
)
async def voters(experiment: ExperimentId, store: StoreDep) -> Voters:
    """Viewer key (or the admin token). The voter set of each arm and each agent's vote vector, this epoch."""
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
    dependencies=[ViewerDep],
    responses=problems(401, 403, 404, 422),
)
async def agents(
    experiment: ExperimentId,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="agents per page")] = 100,
    after: Annotated[int, Query(ge=0, description="the last index of the previous page")] = 0,
) -> AgentPage:
    """Viewer key (or the admin token). The enrolled agents in enrollment order: their votes this epoch and the
    resets each one made (to see who resets a DSER4 experiment)."""
    page = await store.agents_page(experiment, after, limit + 1)
    return AgentPage(
        experiment=experiment,
        agents=[AgentView(**a) for a in page[:limit]],
        next=page[limit - 1]["index"] if len(page) > limit else None,
    )


@router.delete(
    "/{experiment}/agents/{agent}",
    response_model=AgentRevoked,
    dependencies=[OperatorDep],
    responses=problems(401, 403, 404, 422, s404="no such experiment, or no such agent in it"),
)
async def revoke_agent(experiment: ExperimentId, agent: AgentId, store: StoreDep) -> AgentRevoked:
    """Operator key (or the admin token). Revokes one agent's token (a lost device, a stolen state file): from now on
    every request with it is answered 401, atomically with this answer. What the agent sent
    stays counted: its votes, report and resets were its own when they were counted (an admin
    reset, POST .../reset, clears every vote of the epoch if they are in doubt), and it stays
    among the agents enrolled (the certificate's N, DEXP_MAX_AGENTS). Revoking it again changes
    nothing. GET .../agents shows each agent's revoked_at."""
    revoked, at = await store.revoke(experiment, agent)
    return AgentRevoked(experiment=experiment, agent_id=agent, revoked=revoked, revoked_at=at)


@router.post(
    "/{experiment}/tickets",
    status_code=status.HTTP_201_CREATED,
    response_model=Tickets,
    dependencies=[OperatorDep],
    responses=problems(
        401, 403, 404, 422, s422="invalid body, or more tickets or a longer ttl than allowed"
    ),
)
async def issue_tickets(
    experiment: ExperimentId, body: TicketRequest, store: StoreDep, settings: SettingsDep
) -> Tickets:
    """Operator key (or the admin token). One-time enrollment tickets for this experiment: each enrolls exactly one
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
        **crowd_fields(state),
        **certified_fields(state, settings),
    )


@router.get(
    "/{experiment}/suspects",
    response_model=Suspects,
    dependencies=[ViewerDep],
    responses=problems(401, 403, 404, 422),
)
async def suspects(experiment: ExperimentId, store: StoreDep) -> Suspects:
    """Viewer key (or the admin token). Agents whose votes contradict the outcome: once the best
    arm is identified, the agents that voted against it; while exploring, those that voted against the leading arm (the remaining arm
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
        s403="a viewer key, an agent of another experiment, or an agent's reset of a non-DSER4 one",
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
    """Operator key (or the admin token): unconditional reset. Agent token (DSER4 only): reset if
    still in `epoch`, at most DEXP_RESET_RATE per second per agent and DEXP_EXPERIMENT_RESET_RATE
    per experiment;
    with a tolerance f > 0, only once f + 1 distinct agents asked within
    DEXP_RESET_QUORUM_SECONDS (`pending` until then: f liars cannot reset alone); each agent's
    resets are recorded for the admin (GET .../agents)."""
    token = bearer_token(credentials)
    epoch = body.epoch if body else None
    agent = ""
    if same_secret(token, settings.admin_token) or token.startswith(KEY_PREFIX):
        await authorize(token, Role.OPERATOR, settings, store)
    else:
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
    dependencies=[OperatorDep],
    responses=problems(401, 403, 404, 422),
)
async def delete_experiment(experiment: ExperimentId, store: StoreDep) -> None:
    """Operator key (or the admin token). Removes every key of the experiment: its agents' tokens stop working."""
    await store.delete(experiment)
