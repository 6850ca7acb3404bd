"""Enrollment with tickets on real processes: a production coordinator (redis-server, uvicorn),
`dexp tickets issue` as an operator runs it, agent processes sharing one tickets file, running out of
tickets, a restart that needs none, and open enrollment refused. Plus the agent's ticket parsing and
walking on their own."""

from __future__ import annotations

import json
import random
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.enrollment import Tickets, ticket_label
from agent.settings import AgentSettings, parse_tickets, read_tickets_file
from dexp.demo import LocalStack, free_port, redis_server_binary, wait_until


def test_tickets_from_the_environment_and_a_file(tmp_path: Path) -> None:
    assert parse_tickets(" t.a.1, t.a.2\nt.a.3\tt.a.4 ,,") == ["t.a.1", "t.a.2", "t.a.3", "t.a.4"]
    path = tmp_path / "tickets.txt"
    path.write_text("# issued for demo\n\nt.a.5\n  t.a.6  \n# t.a.7\nt.a.1\n")
    assert read_tickets_file(path) == ["t.a.5", "t.a.6", "t.a.1"]
    settings = AgentSettings(tickets="t.a.1 t.a.2", tickets_file=str(path))
    assert settings.uses_tickets
    assert settings.ticket_list() == ["t.a.1", "t.a.2", "t.a.5", "t.a.6"]  # each once
    assert not AgentSettings().uses_tickets
    assert AgentSettings(tickets_file=str(tmp_path / "empty")).uses_tickets  # no silent fallback


def test_tickets_are_walked_once_in_a_circle_from_a_random_offset() -> None:
    tickets = Tickets([f"t.a.{i}" for i in range(5)], random.Random(3))
    first = next(iter(tickets))
    rest = list(tickets)  # the next agents go on from there
    order = [(tickets.start + i) % 5 for i in range(5)]
    assert [first, *rest] == [(i + 1, f"t.a.{i}") for i in order]
    assert list(tickets) == []
    starts = {Tickets(list("abcdefgh"), random.Random(seed)).start for seed in range(20)}
    assert len(starts) > 1  # replicas sharing one file mostly start apart
    assert ticket_label("ticket.demo.s3cr3t") == "ticket.demo.…"
    assert ticket_label("s3cr3t") == "(malformed ticket)"


# ----------------------------------------------------------------------------- real processes


@pytest.fixture
def production(tmp_path: Path) -> Iterator[tuple[LocalStack, str]]:
    """redis-server and a production coordinator (strong admin token, open enrollment off)."""
    stack = LocalStack(tmp_path)
    admin = secrets.token_urlsafe(32)
    try:
        redis_port, http_port = free_port(), free_port()
        stack.redis_url = f"redis://127.0.0.1:{redis_port}/0"
        stack.coordinator_url = f"http://127.0.0.1:{http_port}"
        stack.spawn(
            "redis",
            [
                redis_server_binary(),
                *("--port", str(redis_port), "--bind", "127.0.0.1", "--save", ""),
                *("--appendonly", "no", "--dir", str(tmp_path)),
            ],
            {},
        )
        stack.wait_redis()
        stack.spawn(
            "coordinator",
            [sys.executable, "-m", "coordinator"],
            {
                "DEXP_ENVIRONMENT": "production",
                "DEXP_ADMIN_TOKEN": admin,
                "DEXP_REDIS_URL": stack.redis_url,
                "DEXP_HOST": "127.0.0.1",
                "DEXP_PORT": str(http_port),
                "DEXP_EXPERIMENT": "demo",
                "DEXP_LOG_LEVEL": "warning",
            },
        )
        stack.wait_coordinator()
        yield stack, admin
    finally:
        stack.stop()


def issue(stack: LocalStack, admin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dexp", "tickets", "issue", *args],
        env={
            "DEXP_COORDINATOR_URL": stack.coordinator_url,
            "DEXP_ADMIN_TOKEN": admin,
            "PATH": "",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )


def agents(stack: LocalStack) -> int:
    return int(
        httpx.get(f"{stack.coordinator_url}/v1/experiments/demo", timeout=5).json()["agents"]
    )


def spawn_agents(stack: LocalStack, name: str, count: int, **env: str) -> None:
    stack.spawn(
        name,
        [sys.executable, "-m", "agent"],
        {
            "DEXP_REDIS_URL": stack.redis_url,
            "DEXP_COORDINATOR_URL": stack.coordinator_url,
            "DEXP_EXPERIMENT": "demo",
            "AGENTS_PER_REPLICA": str(count),
            "DEXP_STATE_DIR": str(stack.workdir / "state" / name),
            "DEXP_SEED": "1",
            **env,
        },
    )


def exit_status(stack: LocalStack, name: str, timeout: float = 60) -> int | None:
    try:
        return stack.named[name].wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


def test_agents_enroll_with_tickets_and_stop_plainly_when_they_run_out(
    production: tuple[LocalStack, str],
) -> None:
    stack, admin = production
    start = time.monotonic()
    issued = issue(stack, admin, "demo", "--count", "3", "--ttl", "600")
    assert issued.returncode == 0, issued.stderr
    tickets = issued.stdout.splitlines()
    assert len(tickets) == 3 and all(t.startswith("ticket.demo.") for t in tickets)
    as_json = issue(stack, admin, "demo", "--count", "1", "--json")
    assert as_json.returncode == 0, as_json.stderr
    reply = json.loads(as_json.stdout)
    assert reply["experiment"] == "demo" and reply["expires_at"] > time.time() * 1000
    spare = reply["tickets"][0]
    refused = issue(stack, "not-the-admin-token-at-all", "demo", "--count", "1")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("dexp tickets: 401 ") and refused.stderr.count("\n") == 1
    # Shared by both processes: a forged ticket among them is skipped like a used one.
    tickets_file = stack.workdir / "tickets.txt"
    tickets_file.write_text(
        "# demo\n" + "\n".join([tickets[0], "ticket.demo.forged", *tickets[1:]])
    )

    spawn_agents(stack, "agent-0", 2, DEXP_TICKETS_FILE=str(tickets_file))
    wait_until(lambda: agents(stack) == 2, "two agents", timeout=60)
    spawn_agents(stack, "agent-1", 2, DEXP_TICKETS_FILE=str(tickets_file))
    assert exit_status(stack, "agent-1") == 3
    assert agents(stack) == 3  # the last ticket went to one agent of agent-1
    log = stack.log_path("agent-1").read_text()
    [line] = [line for line in log.splitlines() if "out of tickets" in line]
    assert "1 of the 2 agent(s) to enroll got one" in line
    assert "dexp tickets issue demo --count 1" in line
    # A restart re-uses the saved agents: no ticket needed (none is left).
    stack.kill("agent-0")
    stack.restart("agent-0", wait=False)
    wait_until(
        lambda: "2 restored from" in stack.log_path("agent-0").read_text(), "restart", timeout=60
    )
    assert stack.named["agent-0"].poll() is None and agents(stack) == 3
    # agent-1 restarted with one more ticket: its saved agent restored, one enrolled.
    tickets_file.write_text(tickets_file.read_text() + f"\n{spare}\n")
    stack.restart("agent-1", wait=False)
    wait_until(lambda: agents(stack) == 4, "four agents", timeout=60)
    wait_until(lambda: "1 restored from" in stack.log_path("agent-1").read_text(), "the restart")
    assert stack.named["agent-1"].poll() is None
    # Never a ticket or a token in full in the logs.
    logs = "".join(stack.log_path(n).read_text() for n in ("agent-0", "agent-1"))
    for secret in [*tickets, spare]:
        assert secret not in logs
        assert secret.rpartition(".")[2] not in logs
    assert "trying the next" not in logs  # a line per refused ticket only at DEBUG
    print(f"\n[tickets] {time.monotonic() - start:.1f} s for 4 agents from 4 tickets")


def test_a_replica_scaled_up_past_the_tickets_says_so_in_one_line(
    production: tuple[LocalStack, str],
) -> None:
    """`--scale agent=N` with no new ticket: the new replica meets only tickets the first one
    used, and logs one line (out of tickets, how many used, the command that issues more), not
    one per ticket; it exits with status 3 as a replica with no ticket does. With fresh tickets
    appended, the next one skips the used ones without trying them (the coordinator says which
    are unused, from their digests)."""
    stack, admin = production
    issued = issue(stack, admin, "demo", "--count", "5")
    assert issued.returncode == 0, issued.stderr
    tickets_file = stack.workdir / "tickets.txt"
    tickets_file.write_text(issued.stdout)
    spawn_agents(stack, "agent-0", 5, DEXP_TICKETS_FILE=str(tickets_file))
    wait_until(lambda: agents(stack) == 5, "five agents", timeout=60)
    spawn_agents(stack, "agent-1", 5, DEXP_TICKETS_FILE=str(tickets_file))
    assert exit_status(stack, "agent-1") == 3
    assert agents(stack) == 5
    lines = stack.log_path("agent-1").read_text().splitlines()
    about_tickets = [line for line in lines if "ticket" in line]
    assert len(about_tickets) == 1, lines
    assert "out of tickets: 0 of the 5 agent(s) to enroll got one" in about_tickets[0]
    assert (
        "(5 ticket(s) of demo configured, 5 of them used, expired or unknown)" in about_tickets[0]
    )
    assert "dexp tickets issue demo --count 5" in about_tickets[0]
    # Two fresh tickets among the used ones, apart (whatever its offset, a walk that enrolls two
    # meets a used ticket); a third replica (every line, DEBUG): it asks the coordinator, skips
    # the five used ones without trying any, and enrolls with the two fresh ones.
    more = issue(stack, admin, "demo", "--count", "2")
    assert more.returncode == 0, more.stderr
    used, fresh = issued.stdout.split(), more.stdout.split()
    tickets_file.write_text("\n".join([*used[:3], fresh[0], *used[3:], fresh[1]]) + "\n")
    spawn_agents(stack, "agent-2", 2, DEXP_TICKETS_FILE=str(tickets_file), DEXP_LOG_LEVEL="debug")
    wait_until(lambda: agents(stack) == 7, "seven agents", timeout=60)
    log = stack.log_path("agent-2").read_text()
    assert "trying the next" not in log  # not one refused enrollment
    assert "skipping 5 ticket(s) the coordinator knows used, expired or unknown" in log
    assert stack.named["agent-2"].poll() is None


def test_a_production_coordinator_refuses_open_enrollment(
    production: tuple[LocalStack, str],
) -> None:
    stack, _ = production
    reply = httpx.post(
        f"{stack.coordinator_url}/v1/agents",
        headers={"Authorization": "Bearer dev-enrollment-secret"},
        json={"experiment": "demo"},
        timeout=5,
    )
    assert reply.status_code == 401
    spawn_agents(stack, "agent-0", 1)  # no ticket configured: the shared secret
    assert exit_status(stack, "agent-0") == 3
    log = stack.log_path("agent-0").read_text()
    [line] = [line for line in log.splitlines() if "refused open enrollment" in line]
    assert "dexp tickets issue demo --count N" in line
    assert agents(stack) == 0
