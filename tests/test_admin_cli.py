"""`dexp tickets issue` against a stand-in coordinator over real HTTP: what it sends, stdout holding
the tickets and nothing else, flags over environment, one-line errors (exit 1 for the coordinator's
refusal or absence, 2 for bad arguments). tests/e2e/test_tickets.py runs it against the real one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from typer.testing import CliRunner

from dexp.cli import app

ADMIN = "admin-token-for-the-cli-tests"


@dataclass
class StandIn:
    """Answers POST /v1/experiments/{id}/tickets like the coordinator; records each request."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    status: int = 201
    body: Any = None


@pytest.fixture
def coordinator() -> Iterator[StandIn]:
    stand_in = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length) or b"null")
            stand_in.requests.append(
                {"path": self.path, "auth": self.headers.get("Authorization"), "json": payload}
            )
            if stand_in.body is not None:
                status, body = stand_in.status, stand_in.body
            elif self.headers.get("Authorization") != f"Bearer {ADMIN}":
                status, body = 401, {"detail": "invalid admin token"}
            else:
                experiment = self.path.split("/")[3]
                tickets = [f"ticket.{experiment}{i}.s3cr3t{i}" for i in range(payload["count"])]
                status = 201
                body = {
                    "experiment": experiment,
                    "tickets": tickets,
                    "expires_at": 1_900_000_000_000,
                }
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stand_in.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        server.shutdown()
        server.server_close()


def issue(*args: str, env: dict[str, str] | None = None) -> Any:
    base = {"DEXP_COORDINATOR_URL": None, "DEXP_ADMIN_TOKEN": None}
    return CliRunner().invoke(app, ["tickets", "issue", *args], env={**base, **(env or {})})


def test_prints_the_tickets_one_per_line_and_nothing_else(coordinator: StandIn) -> None:
    env = {"DEXP_COORDINATOR_URL": coordinator.url, "DEXP_ADMIN_TOKEN": ADMIN}
    result = issue("demo", "--count", "3", "--ttl", "600", env=env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [f"ticket.demo{i}.s3cr3t{i}" for i in range(3)]
    assert coordinator.requests == [
        {
            "path": "/v1/experiments/demo/tickets",
            "auth": f"Bearer {ADMIN}",
            "json": {"count": 3, "ttl_seconds": 600},
        }
    ]
    assert "issued 3 ticket(s) for demo" in result.stderr
    assert "s3cr3t" not in result.stderr


def test_json_and_the_default_ttl(coordinator: StandIn) -> None:
    env = {"DEXP_COORDINATOR_URL": coordinator.url, "DEXP_ADMIN_TOKEN": ADMIN}
    result = issue("exp_1", "--count", "2", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    reply = json.loads(result.stdout)
    assert reply["experiment"] == "exp_1" and len(reply["tickets"]) == 2
    assert coordinator.requests[0]["json"] == {"count": 2, "ttl_seconds": 86_400}


def test_flags_override_the_environment(coordinator: StandIn) -> None:
    env = {"DEXP_COORDINATOR_URL": "http://127.0.0.1:9", "DEXP_ADMIN_TOKEN": "wrong-token"}
    args = ["--coordinator-url", coordinator.url, "--admin-token", ADMIN]
    result = issue("demo", "--count", "1", *args, env=env)
    assert result.exit_code == 0, result.stderr
    assert coordinator.requests[0]["auth"] == f"Bearer {ADMIN}"


def test_a_refusal_is_one_plain_line_and_status_1(coordinator: StandIn) -> None:
    env = {"DEXP_COORDINATOR_URL": coordinator.url, "DEXP_ADMIN_TOKEN": "not-the-admin-token"}
    result = issue("demo", "--count", "1", env=env)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == "dexp tickets: 401 invalid admin token\n"


def test_validation_errors_and_odd_replies_are_one_line(coordinator: StandIn) -> None:
    env = {"DEXP_COORDINATOR_URL": coordinator.url, "DEXP_ADMIN_TOKEN": ADMIN}
    coordinator.status = 422
    coordinator.body = {"detail": [{"loc": ["body", "count"], "msg": "too many"}]}
    result = issue("demo", "--count", "5", env=env)
    assert (result.exit_code, result.stderr) == (1, "dexp tickets: 422 count: too many\n")
    coordinator.status, coordinator.body = 404, {"detail": "no experiment 'nope'"}
    result = issue("nope", "--count", "5", env=env)
    assert (result.exit_code, result.stderr) == (1, "dexp tickets: 404 no experiment 'nope'\n")
    coordinator.status, coordinator.body = 201, {"surprise": True}
    result = issue("demo", "--count", "5", env=env)
    assert result.exit_code == 1 and result.stdout == ""
    assert (
        result.stderr.startswith("dexp tickets: unexpected reply")
        and result.stderr.count("\n") == 1
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_coordinator_is_one_line_and_status_1() -> None:
    """A real process, as an operator runs it: the entry point, its exit status, its streams."""
    url = f"http://127.0.0.1:{_free_port()}"
    result = subprocess.run(
        [sys.executable, "-m", "dexp", "tickets", "issue", "demo", "--count", "2"],
        env={"DEXP_COORDINATOR_URL": url, "DEXP_ADMIN_TOKEN": ADMIN, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"dexp tickets: cannot reach the coordinator at {url}: ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["demo"], {"DEXP_ADMIN_TOKEN": ADMIN}, "Missing option '--count'"),
        (["demo", "--count", "0"], {"DEXP_ADMIN_TOKEN": ADMIN}, "'--count'"),
        (["demo", "--count", "10001"], {"DEXP_ADMIN_TOKEN": ADMIN}, "'--count'"),
        (["demo", "--count", "1", "--ttl", "0"], {"DEXP_ADMIN_TOKEN": ADMIN}, "'--ttl'"),
        (["demo", "--count", "1", "--ttl", "2592001"], {"DEXP_ADMIN_TOKEN": ADMIN}, "'--ttl'"),
        (["demo", "--count", "x"], {"DEXP_ADMIN_TOKEN": ADMIN}, "'--count'"),
        (["de/mo", "--count", "1"], {"DEXP_ADMIN_TOKEN": ADMIN}, "'EXPERIMENT'"),
        (["demo", "--count", "1"], {}, "DEXP_ADMIN_TOKEN"),
        (
            ["demo", "--count", "1", "--coordinator-url", "localhost:8000"],
            {"DEXP_ADMIN_TOKEN": ADMIN},
            "'--coordinator-url'",
        ),
        ([], {}, "Missing argument"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(
    args: list[str], env: dict[str, str], message: str
) -> None:
    result = issue(*args, env=env)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
