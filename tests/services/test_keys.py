"""Named keys with roles, and the audit log, against the real coordinator (uvicorn, real HTTP) on a
real redis-server: each role is allowed exactly its routes and refused the others (403 with a JSON
body, nothing changed); a revoked key is refused at once; a key is shown once and only its digest
is stored; the audit log names the key and the outcome of every state-changing call; the admin
token still works as the first admin key."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import httpx
from typer.testing import CliRunner

from dexp.cli import app

from .helpers import (
    ADMIN_TOKEN,
    RedisState,
    admin_headers,
    bearer,
    create_experiment,
    enroll_agents,
)

ROLES = ("viewer", "operator", "admin")
RANK = {role: rank for rank, role in enumerate(ROLES)}
ADMIN_ENV = {"DEXP_ADMIN_TOKEN": ADMIN_TOKEN}


def new_key(client: httpx.Client, name: str, role: str) -> str:
    response = client.post("/v1/keys", json={"name": name, "role": role}, headers=admin_headers())
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["name"], body["role"]) == (name, role)
    key: str = body["key"]
    return key


def calls(exp: str, agent: str, tag: str) -> list[tuple[str, str, str, Any, int]]:
    """(least role, method, path, body, status when allowed) of each route a key may call, each
    made once per role (`tag` keeps the ids of what one role creates apart)."""
    return [
        ("viewer", "GET", f"/v1/experiments/{exp}/voters", None, 200),
        ("viewer", "GET", f"/v1/experiments/{exp}/agents", None, 200),
        ("viewer", "GET", f"/v1/experiments/{exp}/suspects", None, 200),
        ("operator", "POST", "/v1/experiments", {"id": f"new-{tag}", "arms": ["a", "b"]}, 201),
        ("operator", "DELETE", f"/v1/experiments/new-{tag}", None, 204),
        ("operator", "POST", f"/v1/experiments/{exp}/tickets", {"count": 1}, 201),
        ("operator", "POST", f"/v1/experiments/{exp}/reset", None, 200),
        ("operator", "DELETE", f"/v1/experiments/{exp}/agents/{agent}", None, 200),
        ("admin", "GET", "/v1/keys", None, 200),
        ("admin", "POST", "/v1/keys", {"name": f"made-by-{tag}", "role": "viewer"}, 201),
        ("admin", "DELETE", f"/v1/keys/made-by-{tag}", None, 204),
        ("admin", "GET", "/v1/audit", None, 200),
    ]


def test_each_role_is_allowed_exactly_its_routes(
    client: httpx.Client, redis_state: RedisState
) -> None:
    create_experiment(client, id="roles", arms=["a", "b", "c"])
    agent = enroll_agents(client, "roles", 1)[0].agent_id
    keys = {role: new_key(client, f"{role}-key", role) for role in ROLES}
    for role, key in keys.items():
        for least, method, path, body, allowed in calls("roles", agent, role):
            if RANK[role] >= RANK[least]:
                response = client.request(method, path, json=body, headers=bearer(key))
                assert response.status_code == allowed, (role, method, path, response.text)
                continue
            before = redis_state()
            response = client.request(method, path, json=body, headers=bearer(key))
            assert response.status_code == 403, (role, method, path, response.text)
            detail = response.json()["detail"]
            assert f"role {role}" in detail and f"needs {least}" in detail, detail
            assert redis_state() == before, path  # the audit log aside
    # a viewer's body is refused from its headers, before it is read (coordinator/gate.py)
    response = client.post("/v1/experiments", content=b"{" * 10_000, headers=bearer(keys["viewer"]))
    assert response.status_code == 403 and response.headers.get("connection") == "close"


def test_a_revoked_key_is_refused_at_once(client: httpx.Client) -> None:
    create_experiment(client, id="revoked", arms=["a", "b"])
    key = new_key(client, "laptop", "operator")
    reset = "/v1/experiments/revoked/reset"
    assert client.post(reset, headers=bearer(key)).status_code == 200
    assert client.delete("/v1/keys/laptop", headers=admin_headers()).status_code == 204
    for method, path in (("POST", reset), ("GET", "/v1/experiments/revoked/voters")):
        response = client.request(method, path, headers=bearer(key))
        assert response.status_code == 401, response.text
        assert "unknown or revoked" in response.json()["detail"]
    again = client.delete("/v1/keys/laptop", headers=admin_headers())
    assert again.status_code == 404 and again.json()["detail"]
    # the admin token is the built-in key "admin": neither taken nor revoked here
    for response in (
        client.post("/v1/keys", json={"name": "admin", "role": "viewer"}, headers=admin_headers()),
        client.delete("/v1/keys/admin", headers=admin_headers()),
    ):
        assert response.status_code == 409 and "DEXP_ADMIN_TOKEN" in response.json()["detail"]


def test_the_key_is_shown_once_and_only_its_digest_is_kept(
    client: httpx.Client, redis_state: RedisState
) -> None:
    key = new_key(client, "ci", "viewer")
    stored = json.dumps(redis_state())
    assert key not in stored
    assert hashlib.sha256(key.encode()).hexdigest() in stored
    listed = client.get("/v1/keys", headers=admin_headers())
    assert listed.status_code == 200
    assert [(k["name"], k["role"]) for k in listed.json()["keys"]] == [("ci", "viewer")]
    assert key not in listed.text and hashlib.sha256(key.encode()).hexdigest() not in listed.text
    taken = client.post("/v1/keys", json={"name": "ci", "role": "admin"}, headers=admin_headers())
    assert taken.status_code == 409
    assert client.get("/v1/experiments/x/voters", headers=bearer(key)).status_code == 404
    for body in ({"name": "a b", "role": "viewer"}, {"name": "x", "role": "root"}, {"name": "x"}):
        refused = client.post("/v1/keys", json=body, headers=admin_headers())
        assert refused.status_code == 422 and refused.json()["detail"], body


def test_the_audit_log_names_the_key_and_the_outcome_of_each_change(client: httpx.Client) -> None:
    operator = new_key(client, "ops", "operator")
    viewer = new_key(client, "intern", "viewer")
    create_experiment(client, id="logged", arms=["a", "b"])  # the admin token
    agent = enroll_agents(client, "logged", 1)[0]
    assert client.post("/v1/experiments/logged/reset", headers=bearer(operator)).status_code == 200
    assert client.delete("/v1/experiments/gone", headers=bearer(operator)).status_code == 404
    assert client.delete("/v1/experiments/logged", headers=bearer(viewer)).status_code == 403
    # not logged: reads, an agent's vote, a credential that is no key
    assert client.get("/v1/experiments/logged/agents", headers=bearer(viewer)).status_code == 200
    vote = client.post(
        "/v1/experiments/logged/votes", json={"arm": 0, "epoch": 1}, headers=agent.headers
    )
    assert vote.status_code == 200, vote.text
    assert client.delete("/v1/experiments/logged", headers=bearer("dexp_nokey")).status_code == 401

    response = client.get("/v1/audit", params={"limit": 3}, headers=admin_headers())
    assert response.status_code == 200, response.text
    page = response.json()
    rest = client.get(
        "/v1/audit", params={"limit": 3, "before": page["next"]}, headers=admin_headers()
    ).json()
    assert rest["next"] is None
    seen = [
        (e["key"], e["role"], e["method"], e["route"], e["experiment"], e["status"])
        for e in page["entries"] + rest["entries"]
    ]
    assert seen == [
        ("intern", "viewer", "DELETE", "/v1/experiments/logged", "logged", 403),
        ("ops", "operator", "DELETE", "/v1/experiments/gone", "gone", 404),
        ("ops", "operator", "POST", "/v1/experiments/logged/reset", "logged", 200),
        ("admin", "admin", "POST", "/v1/experiments", "", 201),
        ("admin", "admin", "POST", "/v1/keys", "", 201),
        ("admin", "admin", "POST", "/v1/keys", "", 201),
    ]
    times = [e["at"] for e in page["entries"] + rest["entries"]]
    assert times == sorted(times, reverse=True)
    assert operator not in response.text and viewer not in response.text
    assert client.get("/v1/audit", headers=bearer(operator)).status_code == 403


def dexp(url: str, *args: str, **env: str | None) -> Any:
    """`dexp ARGS` in-process, the coordinator's URL and a credential in the environment."""
    base = {"DEXP_COORDINATOR_URL": url, "DEXP_ADMIN_TOKEN": None, "DEXP_API_KEY": None}
    return CliRunner().invoke(app, list(args), env={**base, **env})


def test_the_cli_takes_a_key_and_manages_keys_and_reads_the_log(
    coordinator_url: str, client: httpx.Client
) -> None:
    create_experiment(client, id="cli", arms=["a", "b"])
    made = dexp(coordinator_url, "keys", "create", "ops", "--role", "operator", **ADMIN_ENV)
    assert made.exit_code == 0, made.stderr
    key = made.stdout.strip()
    assert made.stdout == key + "\n" and "shown this once" in made.stderr
    viewer = dexp(coordinator_url, "keys", "create", "ro", "--role", "viewer", **ADMIN_ENV)
    reset = ("experiments", "reset", "cli")
    assert dexp(coordinator_url, *reset, DEXP_API_KEY=key).exit_code == 0
    refused = dexp(coordinator_url, *reset, "--key", viewer.stdout.strip())
    assert refused.exit_code == 1 and "403 key 'ro' has role viewer" in refused.stderr
    listed = dexp(coordinator_url, "keys", "list", "--json", DEXP_API_KEY=key)
    assert listed.exit_code == 1 and "403" in listed.stderr  # keys are the admin's
    listed = dexp(coordinator_url, "keys", "list", "--json", **ADMIN_ENV)
    assert [k["name"] for k in json.loads(listed.stdout)["keys"]] == ["ops", "ro"]
    assert dexp(coordinator_url, "keys", "revoke", "ops", **ADMIN_ENV).exit_code == 0
    gone = dexp(coordinator_url, *reset, DEXP_API_KEY=key)
    assert gone.exit_code == 1 and "401" in gone.stderr
    log = dexp(coordinator_url, "audit-log", "--json", "--limit", "3", **ADMIN_ENV)
    assert log.exit_code == 0, log.stderr
    assert [(e["key"], e["route"], e["status"]) for e in json.loads(log.stdout)["entries"]] == [
        ("admin", "/v1/keys/ops", 204),
        ("ro", "/v1/experiments/cli/reset", 403),
        ("ops", "/v1/experiments/cli/reset", 200),
    ]
    table = dexp(coordinator_url, "audit-log", **ADMIN_ENV)
    assert table.exit_code == 0 and "/v1/keys/ops" in table.stdout
