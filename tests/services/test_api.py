"""The coordinator's REST contract over real HTTP (httpx -> uvicorn -> FastAPI -> real Redis).

Every bad request must get a 4xx with a JSON body {"detail": ...} that names the problem, and must
leave the whole Redis database exactly as it was.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from common import redis_keys as keys

from .helpers import (
    ADMIN_TOKEN,
    DEFAULT_EXPERIMENT,
    ENROLLMENT_SECRET,
    Agent,
    RedisState,
    admin_headers,
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    redis_server,
)

ARMS = ["A", "B", "C"]


def detail(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json"), response.text
    body = response.json()
    assert isinstance(body, dict) and "detail" in body, body
    return str(body["detail"])


# -- experiments -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "threshold"),
    [
        ({}, 29),  # DE, delta=0.05, eta=0.9: ceil(28.43) = 29, not the paper's 28
        ({"delta": 0.05, "eta": 0.9}, 29),
        ({"algorithm": "ce", "xi": 0.1}, 11),
        ({"algorithm": "ce", "xi": 0.05}, 18),
        ({"algorithm": "dp-mase", "subroutine": "se", "beta": 0.5}, 5),
    ],
)
def test_create_returns_201_with_the_threshold(
    client: httpx.Client, params: dict[str, Any], threshold: int
) -> None:
    arms = [f"v{i}" for i in range(10)]
    response = client.post(
        "/v1/experiments", json={"id": "e1", "arms": arms, **params}, headers=admin_headers()
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["id"] == "e1"
    assert body["threshold"] == threshold
    assert body["arms"] == arms
    assert body["remaining_arms"] == list(range(10))
    assert body["votes"] == [0] * 10
    assert (body["version"], body["epoch"], body["messages"], body["agents"]) == (0, 0, 0, 0)
    assert body["warnings"], "no agent enrolled yet: the response must warn"


def test_second_create_of_the_same_id_is_409_and_changes_nothing(
    redis_state: RedisState, client: httpx.Client
) -> None:
    create_experiment(client, id="dup", arms=ARMS)
    before = redis_state()
    response = client.post(
        "/v1/experiments",
        json={"id": "dup", "arms": ["X", "Y"], "eta": 0.8},
        headers=admin_headers(),
    )
    assert response.status_code == 409
    assert "dup" in detail(response) and "exists" in detail(response)
    assert redis_state() == before
    assert client.get("/v1/experiments/dup").json()["arms"] == ARMS


def test_list_and_get(client: httpx.Client) -> None:
    assert client.get("/v1/experiments").json() == {"experiments": [], "next": None}
    create_experiment(client, id="one", arms=ARMS)
    create_experiment(client, id="two", arms=["X", "Y"], algorithm="ce", xi=0.05)
    listed = client.get("/v1/experiments")
    assert listed.status_code == 200
    assert [e["id"] for e in listed.json()["experiments"]] == ["one", "two"]
    one = client.get("/v1/experiments/one")
    assert one.status_code == 200
    summary = listed.json()["experiments"][0]
    assert summary == {
        "id": "one",
        "status": "exploring",
        "n_arms": 3,
        "remaining": 3,
        "threshold": one.json()["threshold"],
        "agents": 0,
        "version": 0,
        "epoch": 0,
        "created_at": one.json()["created_at"],
        "result": None,
    }
    assert one.json()["params"]["algorithm"] == "de"
    missing = client.get("/v1/experiments/three")
    assert missing.status_code == 404 and "three" in detail(missing)
    assert client.get("/v1/experiments/three/best-arm").status_code == 404


def test_delete_removes_the_experiment(redis_state: RedisState, client: httpx.Client) -> None:
    create_experiment(client, id="gone", arms=ARMS)
    create_experiment(client, id="kept", arms=ARMS)
    (agent,) = enroll_agents(client, "gone", 1)
    assert vote(client, "gone", agent, 0).status_code == 200
    response = client.delete("/v1/experiments/gone", headers=admin_headers())
    assert response.status_code == 204
    assert client.get("/v1/experiments/gone").status_code == 404
    assert [e["id"] for e in client.get("/v1/experiments").json()["experiments"]] == ["kept"]
    left = redis_state()
    assert not [k for k in left if "{gone}" in k or agent.agent_id in k], left.keys()
    assert vote(client, "gone", agent, 1).status_code == 404
    create_experiment(client, id="gone", arms=ARMS)  # the old token does not come back to life
    assert vote(client, "gone", agent, 1).status_code == 401
    assert client.delete("/v1/experiments/gone", headers=admin_headers()).status_code == 204
    again = client.delete("/v1/experiments/gone", headers=admin_headers())
    assert again.status_code == 404 and "gone" in detail(again)


@pytest.mark.parametrize("headers", [{}, bearer("not-the-admin-token"), bearer(ENROLLMENT_SECRET)])
def test_create_and_delete_need_the_admin_token(
    redis_state: RedisState, client: httpx.Client, headers: dict[str, str]
) -> None:
    create_experiment(client, id="exists", arms=ARMS)
    before = redis_state()
    create = client.post("/v1/experiments", json={"id": "new", "arms": ARMS}, headers=headers)
    assert create.status_code == 401
    assert "token" in detail(create)
    delete = client.delete("/v1/experiments/exists", headers=headers)
    assert delete.status_code == 401
    assert "token" in detail(delete)
    assert redis_state() == before


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"eta": 1.5}, "eta"),
        ({"eta": 0.0}, "eta"),
        ({"delta": 0.9, "eta": 0.9}, "delta"),
        ({"delta": 0.95}, "delta"),
        ({"algorithm": "ce", "xi": 0.3, "arms": [f"v{i}" for i in range(10)]}, "xi"),
        ({"algorithm": "ce", "xi": 0.0}, "xi"),
        ({"xi": 0.1}, "xi"),
        ({"arms": ["A"]}, "arms"),
        ({"arms": []}, "arms"),
        ({"arms": ["A", "B", "A"]}, "distinct"),
        ({"arms": ["A", ""]}, "arms"),
        ({"arms": "AB"}, "arms"),
        ({"algorithm": "independent"}, "algorithm"),
        ({"algorithm": "central"}, "algorithm"),
        ({"subroutine": "ser4"}, "phi"),  # SER4 needs phi in (0, 1)
        ({"phi": 0.1}, "phi"),  # phi only with ser4
        ({"subroutine": "kl-lucb", "sigma": 1.0}, "sub-gaussian"),  # KL bounds need [0, 1]
        ({"subroutine": "kl-se", "sigma": 1.0}, "sub-gaussian"),
        ({"epsilon": -0.1}, "epsilon"),
        ({"eta": "0.9"}, "eta"),  # strict: no strings for numbers
        ({"id": "bad id!"}, "id"),
        ({"id": None}, "id"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_invalid_experiment_parameters_are_422(
    redis_state: RedisState,
    client: httpx.Client,
    body: dict[str, Any],
    named: str,
) -> None:
    before = redis_state()
    response = client.post(
        "/v1/experiments", json={"id": "bad", "arms": ARMS, **body}, headers=admin_headers()
    )
    assert response.status_code == 422, response.text
    assert named in detail(response)
    assert redis_state() == before


def test_a_create_body_that_is_not_json_is_422(
    redis_state: RedisState, client: httpx.Client
) -> None:
    response = client.post(
        "/v1/experiments",
        content=b"{not json",
        headers={**admin_headers(), "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert detail(response)
    assert redis_state() == {}


# -- best arm ----------------------------------------------------------------------------------
def test_best_arm_exploring_then_identified(client: httpx.Client) -> None:
    # delta=0.2, eta=0.5: log(0.2)/log(0.5) = 2.32 -> M = 3
    created = create_experiment(client, id="ba", arms=["red", "green", "blue"], delta=0.2, eta=0.5)
    assert created["threshold"] == 3
    agents = enroll_agents(client, "ba", 3)

    best = client.get("/v1/experiments/ba/best-arm")
    assert best.status_code == 200
    body = best.json()
    assert {"experiment", "status", "best_arm", "remaining_arms", "votes"} <= body.keys()
    assert body["experiment"] == "ba"
    assert body["status"] == "exploring"
    assert body["best_arm"] is None
    assert body["remaining_arms"] == [
        {"index": 0, "name": "red"},
        {"index": 1, "name": "green"},
        {"index": 2, "name": "blue"},
    ]
    assert body["votes"] == {"red": 0, "green": 0, "blue": 0}

    for agent in agents:
        assert vote(client, "ba", agent, 0).status_code == 200
    body = client.get("/v1/experiments/ba/best-arm").json()
    assert body["status"] == "exploring"
    assert [a["name"] for a in body["remaining_arms"]] == ["green", "blue"]
    assert body["votes"] == {"red": 3, "green": 0, "blue": 0}
    assert body["version"] == 1

    for agent in agents:
        vote(client, "ba", agent, 2)
    body = client.get("/v1/experiments/ba/best-arm").json()
    assert body["status"] == "identified"
    assert body["best_arm"] == {"index": 1, "name": "green"}
    assert body["remaining_arms"] == [{"index": 1, "name": "green"}]
    assert body["version"] == 2


# -- agents and votes --------------------------------------------------------------------------
def test_enrollment_returns_an_id_and_a_token(
    redis_state: RedisState, client: httpx.Client
) -> None:
    create_experiment(client, id="en", arms=ARMS)
    response = client.post(
        "/v1/agents", json={"experiment": "en"}, headers=bearer(ENROLLMENT_SECRET)
    )
    assert response.status_code == 201
    body = response.json()
    assert {"agent_id", "token", "index", "experiment"} <= body.keys()
    assert body["experiment"] == "en" and body["index"] == 1
    assert body["token"].startswith(body["agent_id"] + ".")
    second = enroll_agents(client, "en", 1)[0]
    assert second.index == 2 and second.agent_id != body["agent_id"]
    state = client.get("/v1/experiments/en").json()
    assert state["agents"] == 2
    assert redis_state()  # tokens are stored as digests only
    assert not [v for v in redis_state().values() if body["token"] in str(v)]


def test_enrollment_defaults_to_the_coordinators_experiment(
    redis_state: RedisState, client: httpx.Client
) -> None:
    """No experiment in the body: the coordinator's configured one (here svc-default), not 'demo'."""
    before = redis_state()
    missing = client.post("/v1/agents", json={}, headers=bearer(ENROLLMENT_SECRET))
    assert missing.status_code == 404 and DEFAULT_EXPERIMENT in detail(missing)
    assert redis_state() == before
    create_experiment(client, id=DEFAULT_EXPERIMENT, arms=ARMS)
    enrolled = client.post("/v1/agents", json={}, headers=bearer(ENROLLMENT_SECRET))
    assert enrolled.status_code == 201, enrolled.text
    assert enrolled.json()["experiment"] == DEFAULT_EXPERIMENT
    assert client.get(f"/v1/experiments/{DEFAULT_EXPERIMENT}").json()["agents"] == 1


def test_an_experiments_keys_share_its_hash_slot_and_tokens_are_digests(
    redis_state: RedisState, client: httpx.Client
) -> None:
    """Every key of an experiment, credentials included, carries its hash tag {id}: the vote and
    enrollment scripts touch one slot (valid on Redis Cluster). The agents' activation streams,
    made at enrollment, are spread over the experiment's shard slots. Tokens are stored as
    SHA-256."""
    create_experiment(client, id="slot", arms=ARMS)
    a, b = enroll_agents(client, "slot", 2)
    assert vote(client, "slot", a, 0).status_code == 200
    state = redis_state()
    streams = {agent.stream("slot") for agent in (a, b)}
    assert {k for k in state if "{slot}" not in k} == {"dexp:experiment-index", *streams}
    assert state["dexp:{slot}:credentials"] == {
        agent.agent_id: hashlib.sha256(agent.token.encode()).hexdigest() for agent in (a, b)
    }
    assert state["dexp:{slot}:agents"] == [(a.agent_id, 1.0), (b.agent_id, 2.0)]
    assert state["dexp:{slot}:streams"] == {
        agent.agent_id: keys.stream_secret(agent.token) for agent in (a, b)
    }
    assert state["dexp:{slot}:agent-seq"] == "2"
    assert not [v for v in state.values() if a.token in str(v) or b.token in str(v)]


@pytest.mark.parametrize(
    ("headers", "body", "status", "named"),
    [
        ({}, {"experiment": "en"}, 401, "bearer"),
        (bearer("wrong-secret-123"), {"experiment": "en"}, 401, "open-enrollment secret"),
        (bearer(ADMIN_TOKEN), {"experiment": "en"}, 401, "open-enrollment secret"),
        (bearer(ENROLLMENT_SECRET), {"experiment": "nope"}, 404, "nope"),
        (bearer(ENROLLMENT_SECRET), {"experiment": "en", "x": 1}, 422, "x"),
        (bearer(ENROLLMENT_SECRET), {"experiment": "a b"}, 422, "experiment"),
    ],
)
def test_bad_enrollments_are_refused(
    redis_state: RedisState,
    client: httpx.Client,
    headers: dict[str, str],
    body: dict[str, Any],
    status: int,
    named: str,
) -> None:
    create_experiment(client, id="en", arms=ARMS)
    before = redis_state()
    response = client.post("/v1/agents", json=body, headers=headers)
    assert response.status_code == status, response.text
    assert named in detail(response)
    assert redis_state() == before


def vote(client: httpx.Client, exp: str, agent: Agent, arm: int, epoch: int = 0) -> httpx.Response:
    return client.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=agent.headers
    )


def test_votes_report_counted_eliminated_and_version(client: httpx.Client) -> None:
    create_experiment(client, id="v", arms=ARMS, delta=0.2, eta=0.5)  # M = 3
    a, b, c, d = enroll_agents(client, "v", 4)
    first = vote(client, "v", a, 1)
    assert first.status_code == 200
    assert first.json() == {
        "counted": True,
        "outcome": "counted",
        "eliminated": False,
        "arm_out": False,
        "votes": 1,
        "version": 0,
        "epoch": 0,
    }
    duplicate = vote(client, "v", a, 1).json()
    assert (duplicate["counted"], duplicate["outcome"], duplicate["votes"]) == (
        False,
        "duplicate",
        1,
    )
    assert vote(client, "v", b, 1).json()["votes"] == 2
    third = vote(client, "v", c, 1).json()
    assert (third["counted"], third["eliminated"], third["arm_out"], third["version"]) == (
        True,
        True,
        True,
        1,
    )
    late = vote(client, "v", d, 1).json()
    assert (late["counted"], late["outcome"], late["arm_out"], late["version"]) == (
        False,
        "arm_out",
        True,
        1,
    )
    stale = vote(client, "v", d, 0, epoch=3).json()
    assert (stale["counted"], stale["outcome"]) == (False, "stale_epoch")
    state = client.get("/v1/experiments/v").json()
    assert (state["messages"], state["ignored_messages"]) == (6, 3)
    assert state["votes"][1] == 3 and "voters" not in state  # aggregates only, for anyone
    voters = client.get("/v1/experiments/v/voters", headers=admin_headers()).json()
    assert voters["voters"][1] == sorted([a.agent_id, b.agent_id, c.agent_id])
    assert voters["by_agent"] == {a.agent_id: [1], b.agent_id: [1], c.agent_id: [1]}
    assert [(e["arm"], e["name"], e["votes"]) for e in state["eliminations"]] == [(1, "B", 3)]


@dataclass(frozen=True)
class Voting:
    client: httpx.Client
    state: RedisState
    agent: Agent  # enrolled in "exp"
    outsider: Agent  # enrolled in "other"


@pytest.fixture
def voting(client: httpx.Client, redis_state: RedisState) -> Voting:
    create_experiment(client, id="exp", arms=ARMS)
    create_experiment(client, id="other", arms=ARMS)
    (agent,) = enroll_agents(client, "exp", 1)
    (outsider,) = enroll_agents(client, "other", 1)
    assert vote(client, "exp", agent, 1).status_code == 200
    return Voting(client, redis_state, agent, outsider)


def post_vote(path: str = "exp", **kwargs: Any) -> Callable[[Voting], httpx.Response]:
    def send(v: Voting) -> httpx.Response:
        options = {"headers": v.agent.headers, "json": {"arm": 0}, **kwargs}
        if callable(options["headers"]):
            options["headers"] = options["headers"](v)
        return v.client.post(f"/v1/experiments/{path}/votes", **options)

    return send


BAD_VOTES = {
    "unknown experiment": (post_vote("nope"), 404, "nope"),
    "invalid experiment id": (post_vote("bad.id"), 422, "experiment"),
    "unknown arm": (post_vote(json={"arm": 3}), 422, "arm=3"),
    "huge arm": (post_vote(json={"arm": 10**6}), 422, "arm"),
    "missing arm": (post_vote(json={}), 422, "arm"),
    "missing body": (post_vote(json=None), 422, "body"),
    "arm as a string": (post_vote(json={"arm": "0"}), 422, "arm"),
    "arm as true": (post_vote(json={"arm": True}), 422, "arm"),
    "arm not whole": (post_vote(json={"arm": 0.5}), 422, "arm"),  # 0.0 is the integer 0
    "arm as null": (post_vote(json={"arm": None}), 422, "arm"),
    "negative arm": (post_vote(json={"arm": -1}), 422, "arm"),
    "negative epoch": (post_vote(json={"arm": 0, "epoch": -1}), 422, "epoch"),
    "extra field": (post_vote(json={"arm": 0, "weight": 2}), 422, "weight"),
    "a list body": (post_vote(json=[0]), 422, "body"),
    "not json": (
        post_vote(
            json=None,
            content=b"arm=0",
            headers=lambda v: {**v.agent.headers, "content-type": "application/json"},
        ),
        422,
        "body",
    ),
    "missing token": (post_vote(headers={}), 401, "bearer"),
    "not a bearer token": (
        post_vote(headers=lambda v: {"Authorization": f"Basic {v.agent.token}"}),
        401,
        "bearer",
    ),
    "garbage token": (post_vote(headers=bearer("garbage")), 401, "token"),
    "right id, wrong secret": (
        post_vote(headers=lambda v: bearer(v.agent.agent_id + ".wrong")),
        401,
        "token",
    ),
    "admin token": (post_vote(headers=bearer(ADMIN_TOKEN)), 401, "token"),
    "agent of another experiment": (
        post_vote(headers=lambda v: v.outsider.headers),
        403,
        "exp",
    ),
}


@pytest.mark.parametrize("case", list(BAD_VOTES))
def test_bad_votes_are_4xx_and_change_nothing(voting: Voting, case: str) -> None:
    send, status, named = BAD_VOTES[case]
    before = voting.state()
    response = send(voting)
    assert response.status_code == status, response.text
    assert named in detail(response)
    assert voting.state() == before


def test_unknown_arm_names_the_valid_range(voting: Voting) -> None:
    response = post_vote(json={"arm": 3})(voting)
    assert detail(response) == "arm=3 is invalid: must be in [0, 2]"


# -- DSER4 resets ------------------------------------------------------------------------------
def reset(client: httpx.Client, exp: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    return client.post(f"/v1/experiments/{exp}/reset", json=body or None, headers=headers)


def test_only_a_ser4_experiment_accepts_an_agent_reset(
    redis_state: RedisState, client: httpx.Client
) -> None:
    create_experiment(client, id="plain", arms=ARMS, delta=0.2, eta=0.5)
    create_experiment(client, id="dser4", arms=ARMS, delta=0.2, eta=0.5, subroutine="ser4", phi=0.1)
    (plain_agent,) = enroll_agents(client, "plain", 1)
    a, b = enroll_agents(client, "dser4", 2)
    vote(client, "plain", plain_agent, 0)
    vote(client, "dser4", a, 0)

    before = redis_state()
    refused = reset(client, "plain", plain_agent.headers, epoch=0)
    assert refused.status_code == 403 and "ser4" in detail(refused)
    outsider = reset(client, "dser4", plain_agent.headers, epoch=0)
    assert outsider.status_code == 403
    no_epoch = reset(client, "dser4", a.headers)
    assert no_epoch.status_code == 422 and "epoch" in detail(no_epoch)
    no_token = reset(client, "dser4", {}, epoch=0)
    assert no_token.status_code == 401
    assert redis_state() == before

    done = reset(client, "dser4", a.headers, epoch=0)
    assert done.status_code == 200
    assert done.json() == {
        "reset": True,
        "version": 1,
        "epoch": 1,
        "pending": False,
        "requests": 1,
        "needed": 1,
    }
    # the second agent answering the same reset makes no new epoch
    assert reset(client, "dser4", b.headers, epoch=0).json() == {
        "reset": False,
        "version": 1,
        "epoch": 1,
        "pending": False,
        "requests": 0,
        "needed": 1,
    }
    state = client.get("/v1/experiments/dser4").json()
    assert state["votes"] == [0, 0, 0] and state["epoch"] == 1
    assert vote(client, "dser4", a, 0).json()["outcome"] == "stale_epoch"
    assert vote(client, "dser4", a, 0, epoch=1).json()["outcome"] == "counted"

    # the administrator may reset any experiment, unconditionally
    admin = reset(client, "plain", admin_headers())
    assert admin.status_code == 200 and admin.json()["reset"] is True
    assert client.get("/v1/experiments/plain").json()["votes"] == [0, 0, 0]


# -- health, metrics, OpenAPI ------------------------------------------------------------------
def counted_votes_metric(client: httpx.Client, outcome: str) -> float:
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    assert "# TYPE dexp_votes_total counter" in metrics.text
    found = re.search(rf'^dexp_votes_total{{outcome="{outcome}"}} (\S+)$', metrics.text, re.M)
    return float(found.group(1)) if found else 0.0


def test_health_readiness_metrics(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    create_experiment(client, id="m", arms=ARMS)
    (agent,) = enroll_agents(client, "m", 1)
    counted, duplicate = (counted_votes_metric(client, o) for o in ("counted", "duplicate"))
    vote(client, "m", agent, 0)
    vote(client, "m", agent, 0)
    assert counted_votes_metric(client, "counted") == counted + 1
    assert counted_votes_metric(client, "duplicate") == duplicate + 1
    assert "process_cpu_seconds_total" in client.get("/metrics").text


def test_openapi_documents_the_routes(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    expected = {
        "/v1/experiments": {"get", "post"},
        "/v1/experiments/{experiment}": {"get", "delete"},
        "/v1/experiments/{experiment}/best-arm": {"get"},
        "/v1/experiments/{experiment}/suspects": {"get"},
        "/v1/experiments/{experiment}/reset": {"post"},
        "/v1/experiments/{experiment}/votes": {"post"},
        "/v1/experiments/{experiment}/settled": {"post"},
        "/v1/agents": {"post"},
        "/healthz": {"get"},
        "/readyz": {"get"},
    }
    for path, methods in expected.items():
        assert path in paths, path
        assert methods <= set(paths[path]), (path, paths[path].keys())
    schemas = spec["components"]["schemas"]
    assert {"VoteCreate", "VotePublic", "ExperimentCreate", "BestArm"} <= schemas.keys()
    assert schemas["VoteCreate"]["required"] == ["arm"]
    # the vote reply is encoded by hand (coordinator.api.agents.vote_reply), still documented
    responses = paths["/v1/experiments/{experiment}/votes"]["post"]["responses"]
    reply = responses["200"]["content"]["application/json"]["schema"]
    assert reply == {"$ref": "#/components/schemas/VotePublic"}
    assert {"401", "403", "404", "422", "429"} <= responses.keys()
    assert "Retry-After" in responses["429"]["headers"]
    settled = paths["/v1/experiments/{experiment}/settled"]["post"]["responses"]
    assert {"401", "403", "404", "422", "429"} <= settled.keys()
    best = schemas["BestArm"]["properties"]
    assert best["status"]["enum"] == ["exploring", "identified", "tied"]
    assert {"candidates", "certified"} <= best.keys()
    assert set(schemas["VotePublic"]["required"]) == {
        "counted", "outcome", "eliminated", "arm_out", "votes", "version", "epoch"
    }  # fmt: skip


# -- start-up and readiness against a Redis of its own -----------------------------------------
def test_default_experiment_at_start_up_and_readyz_503_without_redis() -> None:
    with redis_server() as own_redis:
        settings = coordinator_settings(own_redis.url)
        with (
            coordinator(settings) as server,
            httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client,
        ):
            default = client.get(f"/v1/experiments/{DEFAULT_EXPERIMENT}")
            assert default.status_code == 200
            assert default.json()["threshold"] == 29
            assert default.json()["arms"] == list("ABCDEFGHIJ")
            (agent,) = enroll_agents(client, DEFAULT_EXPERIMENT, 1)
            assert vote(client, DEFAULT_EXPERIMENT, agent, 4).status_code == 200
        # a restart keeps the experiment and its votes (create at start-up only if missing)
        with (
            coordinator(settings) as server,
            httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client,
        ):
            state = client.get(f"/v1/experiments/{DEFAULT_EXPERIMENT}").json()
            assert state["votes"][4] == 1 and state["agents"] == 1
            assert client.get("/readyz").status_code == 200

            own_redis.stop()
            down = client.get("/readyz")  # within the client's timeout: it does not hang
            assert down.status_code == 503
            assert down.json()["status"] == "unavailable" and detail(down)
            assert client.get("/healthz").status_code == 200  # liveness does not need Redis
