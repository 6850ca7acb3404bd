"""The coordinator's API fuzzed from its own OpenAPI schema (schemathesis) over real HTTP.

Every operation of /openapi.json gets generated requests, valid and invalid, against the live
coordinator (uvicorn, real Redis) of conftest.py, each with one of several credentials: none, the
admin token, the enrollment secret, a fresh enrollment ticket, an enrolled agent's token, an agent
of another experiment, a wrong token, or whatever schemathesis generated. For every response:

- no 5xx, and the status code, content type, headers and body conform to the documented schema
  (schemathesis's checks: every 4xx a route may answer is in its `responses=`);
- a request answered 4xx, and any GET, changes nothing: the whole Redis database is compared
  before and after.

The number of generated cases is printed (`pytest -rA` shows it) and bounded by MAX_EXAMPLES per
operation so that the module runs in well under a minute.

One operation is left out: GET /v1/experiments/{experiment}/events, an event stream that never
ends while the experiment exists (a fuzzed case would wait for ever). tests/services/test_events.py
tests it, its refusals (404, 429, 503) included.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    positive_data_acceptance,
)

from common import redis_keys as keys

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
STREAMING = "/v1/experiments/{experiment}/events"  # never ends: tested in test_events.py


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
    names = sorted(client.scan_iter(count=10_000))
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
    return schema


schema = schemathesis.pytest.from_fixture("api_schema").exclude(path=STREAMING)


# The credential each operation takes, drawn more often so that more cases get past authentication.
NATURAL = {
    "POST /v1/experiments": "admin",
    "DELETE /v1/experiments/{experiment}": "admin",
    "POST /v1/experiments/{experiment}/reset": "admin",
    "POST /v1/experiments/{experiment}/tickets": "admin",
    "GET /v1/experiments/{experiment}/voters": "admin",
    "GET /v1/experiments/{experiment}/agents": "admin",
    "GET /v1/experiments/{experiment}/suspects": "admin",
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
    operations = {
        f"{method.upper()} {path}"
        for path, item in paths.items()
        for method in item
        if path != STREAMING
    }
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
    # positive_data_acceptance is left out: the API validates beyond what a schema can say
    # (delta < eta, an arm index below the experiment's number of arms, ...) and it is stricter
    # than JSON Schema's "integer", which takes 1.0 (StrictInt does not). Invalid data must still
    # be refused (negative_data_rejection), with a documented status. The checks of missing or
    # ignored authentication judge the generated headers: only for cases sent with them.
    excluded = [positive_data_acceptance]
    if credential != "generated":
        excluded += [missing_required_header, ignored_auth]
    if response.status_code == 413:  # refused unread, for its size: a rejection JSON Schema lacks
        assert len(response.request.body or b"") > MAX_BODY_BYTES
        excluded.append(negative_data_rejection)
    case.validate_response(response, excluded_checks=excluded)
