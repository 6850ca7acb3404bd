"""The coordinator's API fuzzed from its own OpenAPI schema (schemathesis) over real HTTP.

Every operation of /openapi.json gets generated requests, valid and invalid, against the live
coordinator (uvicorn, real Redis) of conftest.py, each with one of several credentials: none, the
admin token, the enrollment secret, a fresh enrollment ticket, an enrolled agent's token, an agent
of another experiment, a wrong token, or whatever schemathesis generated. For every response:

- every check of schemathesis: no 5xx, and the status code, content type, headers and body conform
  to the documented schema (every 4xx a route may answer is in its `responses=`); invalid data is
  refused (negative_data_rejection) and valid data is accepted (positive_data_acceptance): the
  schema says what the server takes, 2.0 for an integer included, and the bounds the settings put
  (DEXP_MAX_TICKETS, ...) are the schema's maxima;
- a request answered 4xx, and any GET, changes nothing: the whole Redis database is compared
  before and after.

Valid data may still get a 422 where the refusal depends on what JSON Schema cannot compute (an
arm index beyond the experiment's arms, delta against eta, ...): only on the operations of
SEMANTIC, whose 422 documents it, and only as the coordinator's own refusal, never a validation
error of a kind the schema can state (a type, a bound, a pattern, a missing or unknown field).

The number of generated cases is printed (`pytest -rA` shows it) and bounded by MAX_EXAMPLES per
operation, Hypothesis derandomized (the same cases at every run), so that the module runs in well
under a minute. The event stream (GET .../events, which never ends while its experiment exists) is
read up to its first event.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema_rs
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    CheckFunction,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    positive_data_acceptance,
)

from common import redis_keys as keys
from coordinator.settings import Settings

from .helpers import (
    ADMIN_TOKEN,
    ENROLLMENT_SECRET,
    ThreadedCoordinator,
    admin_headers,
    create_experiment,
    enroll_agents,
)

pytestmark = pytest.mark.fuzz

MAX_EXAMPLES = 45  # per operation and generation phase
MAX_BODY_BYTES = 65_536  # the coordinator's DEXP_MAX_BODY_BYTES (its default)
EXPERIMENT = "demo"  # the path parameter's documented example: fuzzing reaches a live experiment
CREDENTIALS = ["none", "generated", "admin", "enrollment", "ticket", "agent", "outsider", "wrong"]
CASES: Counter[str] = Counter()  # generated cases per operation
STATUSES: dict[str, Counter[int]] = {}
CREDENTIAL_USE: Counter[str] = Counter()
# Valid data these operations may refuse with 422 (their documented reason): the refusal depends on
# the experiment or on several fields together, which JSON Schema cannot compute.
SEMANTIC = {
    "POST /v1/experiments": "a configuration that cannot run (delta, eta, the threshold, the "
    "agent cap, CDE's privacy against its arms) or arm names that look alike",
    "POST /v1/experiments/{experiment}/votes": "an arm index beyond the experiment's arms",
    "POST /v1/experiments/{experiment}/report": "an arm index beyond the experiment's arms",
    "POST /v1/experiments/{experiment}/reports": "an arm index beyond the experiment's arms",
    "POST /v1/experiments/{experiment}/reset": "an agent's reset that names no epoch",
    "POST /v1/experiments/{experiment}/webhooks": "a URL whose host does not resolve or is not "
    "allowed (DEXP_WEBHOOK_HOSTS, private addresses), or with credentials or a fragment",
}
# Pydantic's errors for what a schema states: a 422 of one of them for valid data is a schema that
# does not describe the server.
SCHEMA_ERRORS = (
    "type",
    "less_than",
    "greater_than",
    "missing",
    "extra_forbidden",
    "too_",
    "pattern",
)


def build_world(url: str, world: dict[str, Any]) -> None:
    """A live experiment with agents, and an agent of another experiment; `world["tokens"]` gets
    the credentials the cases are sent with."""
    with httpx.Client(base_url=url, timeout=10.0, trust_env=False) as client:
        for exp in (EXPERIMENT, "other"):
            client.delete(f"/v1/experiments/{exp}", headers=admin_headers())
        create_experiment(client, id=EXPERIMENT, arms=["A", "B", "C"], delta=0.2, eta=0.5)
        create_experiment(client, id="other", arms=["A", "B"])
        agents = enroll_agents(client, EXPERIMENT, 2)
        (outsider,) = enroll_agents(client, "other", 1)
    world["tokens"] = {
        "admin": ADMIN_TOKEN,
        "enrollment": ENROLLMENT_SECRET,
        "agent": agents[0].token,
        "outsider": outsider.token,
        "wrong": agents[1].agent_id + ".not-its-secret",
    }


@pytest.fixture
def world(coordinator_url: str, clean_redis: str) -> Iterator[dict[str, Any]]:
    client = redis.Redis.from_url(clean_redis)
    # One HTTP client for the tickets the cases use: a client per ticket built a TLS context each
    # time (~40 ms of loading CA certificates, for a plain-HTTP request), ~5 s in all.
    http = httpx.Client(base_url=coordinator_url, timeout=10.0, trust_env=False)
    world: dict[str, Any] = {"url": coordinator_url, "redis": client, "http": http}
    build_world(coordinator_url, world)
    yield world
    http.close()
    client.close()


READ_ALL = {
    b"string": lambda pipe, name: pipe.get(name),
    b"hash": lambda pipe, name: pipe.hgetall(name),
    b"set": lambda pipe, name: pipe.smembers(name),
    b"zset": lambda pipe, name: pipe.zrange(name, 0, -1, withscores=True),
    b"list": lambda pipe, name: pipe.lrange(name, 0, -1),
    b"stream": lambda pipe, name: pipe.xrange(name),
}


def dump(client: redis.Redis) -> dict[bytes, Any]:
    """Every key with its type and content: equal iff nothing was written. Compared by value, not
    by DUMP: a read can move a large hash one step through an incremental rehash, and DUMP then
    lists the same fields in another order."""
    # not the audit log: it records the calls, refused ones too (tests/services/helpers.snapshot)
    names = sorted(n for n in client.scan_iter(count=10_000) if n != keys.AUDIT.encode())
    with client.pipeline(transaction=True) as pipe:
        for name in names:
            pipe.type(name)
        kinds = pipe.execute()
    with client.pipeline(transaction=True) as pipe:
        for name, kind in zip(names, kinds, strict=True):
            READ_ALL.get(kind, lambda pipe, name: pipe.exists(name))(pipe, name)
        return {
            name: (kind, value)
            for name, kind, value in zip(names, kinds, pipe.execute(), strict=True)
        }


@pytest.fixture
def api_schema(world: dict[str, Any]) -> Any:
    schema = schemathesis.openapi.from_url(world["url"] + "/openapi.json")
    schema.config.generation.update(
        modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
        max_examples=MAX_EXAMPLES,
        database="none",
    )
    schema.config.max_stream_events = 1  # the event stream: its first event, then closed
    schema.config.update(request_timeout=10)
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


# The credential each operation takes, drawn more often so that more cases get past authentication.
NATURAL = {
    "POST /v1/experiments": "admin",
    "DELETE /v1/experiments/{experiment}": "admin",
    "POST /v1/experiments/{experiment}/reset": "admin",
    "POST /v1/experiments/{experiment}/tickets": "admin",
    "GET /v1/experiments/{experiment}/voters": "admin",
    "GET /v1/experiments/{experiment}/agents": "admin",
    "GET /v1/experiments/{experiment}/suspects": "admin",
    "DELETE /v1/experiments/{experiment}/agents/{agent}": "admin",
    "POST /v1/keys": "admin",
    "GET /v1/keys": "admin",
    "DELETE /v1/keys/{name}": "admin",
    "GET /v1/audit": "admin",
    "POST /v1/agents": "ticket",
    "GET /v1/agents/me": "agent",
    "POST /v1/experiments/{experiment}/votes": "agent",
    "POST /v1/experiments/{experiment}/report": "agent",
}


def credential_of(case: Case) -> str:
    """The credential a case is sent with: drawn from the case's own data, so that a case Hypothesis
    replays or shrinks is sent with the same one (schema examples rule out @schema.given)."""
    natural = NATURAL.get(case.operation.label)
    choices = CREDENTIALS + [natural] * 4 if natural else CREDENTIALS
    data = repr((case.method, case.path_parameters, case.query, case.headers, case.body))
    return choices[zlib.crc32(data.encode()) % len(choices)]


def with_credentials(case: Case, credential: str, world: dict[str, Any]) -> None:
    if credential == "generated":
        return
    tokens = world["tokens"]
    if credential == "ticket":  # one unused ticket per case: an enrollment uses it up
        issued = world["http"].post(
            f"/v1/experiments/{EXPERIMENT}/tickets", json={"count": 1}, headers=admin_headers()
        )
        assert issued.status_code == 201, issued.text
        tokens = {**tokens, "ticket": issued.json()["tickets"][0]}
    headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
    if credential != "none":
        headers["Authorization"] = f"Bearer {tokens[credential]}"
    case.headers = headers


@pytest.fixture(scope="module")
def census(coordinator_server: ThreadedCoordinator) -> Iterator[None]:
    """After the module, the generated cases per operation (printed: `pytest -rA` or `-s` shows
    them), checked: every operation of the schema was fuzzed, each with at least 10 cases. It is
    a teardown of test_fuzz's own fixture, so it runs exactly when test_fuzz did."""
    yield
    paths = httpx.get(coordinator_server.url + "/openapi.json", timeout=10).json()["paths"]
    operations = {f"{method.upper()} {path}" for path, item in paths.items() for method in item}
    for operation, count in sorted(CASES.items()):
        statuses = ", ".join(f"{s}: {n}" for s, n in sorted(STATUSES[operation].items()))
        print(f"fuzz {operation}: {count} cases ({statuses})")
    print(f"fuzz: {sum(CASES.values())} generated cases over {len(CASES)} operations")
    print("fuzz credentials: " + ", ".join(f"{c}: {n}" for c, n in sorted(CREDENTIAL_USE.items())))
    assert set(CASES) == operations, sorted(operations ^ set(CASES))
    thin = {operation: n for operation, n in CASES.items() if n < 10}
    assert not thin, f"operations fuzzed with fewer than 10 cases: {thin}"


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_fuzz(case: Case, world: dict[str, Any], census: None) -> None:
    if world["redis"].exists(keys.meta(EXPERIMENT), keys.meta("other")) < 2:
        build_world(world["url"], world)  # a fuzzed DELETE with the admin token removed one
    credential = credential_of(case)
    CREDENTIAL_USE[credential] += 1
    with_credentials(case, credential, world)
    before = dump(world["redis"])
    response = case.call(base_url=world["url"])
    after = dump(world["redis"])
    operation = case.operation.label
    CASES[operation] += 1
    STATUSES.setdefault(operation, Counter())[response.status_code] += 1
    assert response.status_code < 500, response.text
    if 400 <= response.status_code < 500 or case.method == "GET":
        assert after == before, (
            f"{case.method} {case.formatted_path} answered {response.status_code} but changed Redis"
        )
    secured = bool(case.operation.definition.raw.get("security"))
    if secured and credential in ("none", "wrong"):
        assert response.status_code >= 400, f"{operation} accepted {credential} credentials"
    # The checks of missing or ignored authentication judge the generated headers: only for the
    # cases sent with them.
    excluded: list[CheckFunction] = []
    if credential != "generated":
        excluded += [missing_required_header, ignored_auth]
    if response.status_code == 413:  # refused unread, for its size: a rejection JSON Schema lacks
        assert len(response.request.body or b"") > MAX_BODY_BYTES
        excluded.append(negative_data_rejection)
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if response.status_code == 422 and operation in SEMANTIC and positive:
        assert not schema_stated(response.json()), f"valid data refused: {response.text}"
        excluded.append(positive_data_acceptance)  # a refusal its 422 documents (SEMANTIC)
    case.validate_response(response, excluded_checks=excluded)


def schema_stated(problem: dict[str, Any]) -> list[dict[str, Any]]:
    """The validation errors of a 422 that the schema could have stated (SCHEMA_ERRORS): a valid
    case refused for one of them is a schema that admits what the server refuses."""
    return [e for e in problem.get("errors") or [] if e["type"].startswith(SCHEMA_ERRORS)]


# -- the refusals the red team's schemathesis run found (issue 36, point 9), replayed one by one ---
def body_schema(client: httpx.Client, name: str) -> Any:
    """A validator of the served schema's request body `name` (its $refs resolved in the whole
    document), as schemathesis reads it."""
    document = client.get("/openapi.json").json()
    wrapper = {**document["components"]["schemas"][name], "components": document["components"]}
    return jsonschema_rs.Draft202012Validator(wrapper)


def test_a_whole_float_is_an_integer(client: httpx.Client, redis_state: Any) -> None:
    """{"arm": 1.0} is an integer for JSON Schema; it was refused (StrictInt). 1.5 and "1" stay
    refused, with nothing changed."""
    create_experiment(client, id="floats", arms=["A", "B", "C"])
    (agent,) = enroll_agents(client, "floats", 1)
    assert body_schema(client, "VoteCreate").is_valid({"arm": 1.0, "epoch": 0.0})
    before = redis_state()
    for refused in ({"arm": 1.5}, {"arm": "1"}, {"arm": True}):
        response = client.post("/v1/experiments/floats/votes", json=refused, headers=agent.headers)
        assert response.status_code == 422, response.text
    assert redis_state() == before
    vote = client.post("/v1/experiments/floats/votes", json={"arm": 1.0}, headers=agent.headers)
    assert vote.status_code == 200, vote.text
    assert vote.json()["outcome"] == "counted"
    tickets = client.post(
        "/v1/experiments/floats/tickets", json={"count": 2.0}, headers=admin_headers()
    )
    assert tickets.status_code == 201, tickets.text
    assert len(tickets.json()["tickets"]) == 2


def test_the_schema_bounds_tickets_as_the_settings_do(client: httpx.Client) -> None:
    """ttl_seconds up to a year was in the schema, DEXP_MAX_TICKET_TTL_SECONDS (30 days) refused
    it: the schema's maxima are the settings'."""
    create_experiment(client, id="ttl", arms=["A", "B"])
    fields = client.get("/openapi.json").json()["components"]["schemas"]["TicketRequest"]
    ttl, count = fields["properties"]["ttl_seconds"], fields["properties"]["count"]
    settings = Settings()  # the defaults, as conftest.py's coordinator runs
    assert ttl["maximum"] == settings.max_ticket_ttl_seconds
    assert count["maximum"] == settings.max_tickets
    longest = {"count": 1, "ttl_seconds": ttl["maximum"]}
    assert client.post(
        "/v1/experiments/ttl/tickets", json=longest, headers=admin_headers()
    ).is_success
    longer = {"count": 1, "ttl_seconds": ttl["maximum"] + 1}
    refused = client.post("/v1/experiments/ttl/tickets", json=longer, headers=admin_headers())
    assert refused.status_code == 422 and not body_schema(client, "TicketRequest").is_valid(longer)


@pytest.mark.parametrize(
    "body",
    [
        {"algorithm": "de", "agents": 100},  # `agents`: CDE's alone
        {"agents": 100},  # de by default
        {"algorithm": "cde", "reports_per_agent": 3},  # LDP's alone
        {"algorithm": "ldp", "sigma": 1.0},  # LDP privatizes rewards in [0, 1]
        {"algorithm": "dp-mase", "sigma": 1.0},
    ],
)
def test_the_schema_refuses_what_depends_on_the_algorithm(
    client: httpx.Client, redis_state: Any, body: dict[str, Any]
) -> None:
    """`agents` with a DE experiment was schema-valid and refused (422): the schema says now which
    fields an algorithm takes, and the server still refuses them, with nothing created."""
    full = {"id": "algo", "arms": ["A", "B"], **body}
    assert not body_schema(client, "ExperimentCreate").is_valid(full)
    before = redis_state()
    response = client.post("/v1/experiments", json=full, headers=admin_headers())
    assert response.status_code == 422, response.text
    assert redis_state() == before
    unset = {field: None for field in body if field != "algorithm"}
    assert body_schema(client, "ExperimentCreate").is_valid({**full, **unset})


def test_an_arm_beyond_the_experiment_is_a_documented_422(client: httpx.Client) -> None:
    """The schema bounds an arm index by the most arms an experiment has; beyond this experiment's
    arms the 422 is in each route's documented responses."""
    paths = client.get("/openapi.json").json()["paths"]
    for route in ("votes", "report", "reports"):
        post = paths[f"/v1/experiments/{{experiment}}/{route}"]["post"]
        assert "an arm index out of range" in post["responses"]["422"]["description"]
    create_experiment(client, id="three", arms=["A", "B", "C"])
    (agent,) = enroll_agents(client, "three", 1)
    response = client.post("/v1/experiments/three/votes", json={"arm": 3}, headers=agent.headers)
    assert response.status_code == 422
    assert "must be in [0, 2]" in response.json()["detail"]
