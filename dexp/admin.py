"""`dexp tickets`: an admin's calls to a running coordinator.

`dexp tickets issue ID --count N` asks the coordinator for N one-time enrollment tickets of
experiment ID (POST /v1/experiments/{id}/tickets with the admin token) and prints them, one per
line, on stdout and nothing else there, so that `> tickets.txt` makes the file the agents read
(DEXP_TICKETS_FILE). Each ticket enrolls one agent, once: the way to decide who may vote when the
shared enrollment secret (open enrollment) is refused, as it is in production.

The coordinator's URL and the admin token come from DEXP_COORDINATOR_URL and DEXP_ADMIN_TOKEN (the
coordinator's own variables: `docker compose exec coordinator dexp tickets issue ...` needs no
flag), or from the flags, which win. A refusal or an unreachable coordinator is one line on stderr
and exit status 1 (`dexp tickets: 401 invalid admin token`); bad arguments, exit status 2.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Annotated, Any

import httpx
import typer

DEFAULT_COORDINATOR_URL = "http://127.0.0.1:8000"
MAX_TICKETS = 10_000  # per request, as the coordinator accepts
DEFAULT_TTL_SECONDS = 86_400
MAX_TTL_SECONDS = 30 * 86_400
EXPERIMENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class AdminError(Exception):
    """The coordinator refused the call or could not be reached: reported as one line, exit 1."""

    def __init__(self, command: str, message: str) -> None:
        super().__init__(message)
        self.command = command


def issue_tickets(
    coordinator_url: str,
    admin_token: str,
    experiment: str,
    count: int,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """The coordinator's reply: {"experiment", "tickets": [...], "expires_at": unix ms}.

    Not retried: a retry after a lost reply would issue a second batch (the first one unused,
    expiring by itself); the operator reruns the command instead."""
    url = f"{coordinator_url.rstrip('/')}/v1/experiments/{experiment}/tickets"
    try:
        response = httpx.post(
            url,
            json={"count": count, "ttl_seconds": ttl_seconds},
            headers={"Authorization": f"Bearer {admin_token}"},
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        raise AdminError(
            "dexp tickets",
            f"cannot reach the coordinator at {coordinator_url}: {type(exc).__name__}: {exc}",
        ) from None
    if response.status_code >= 400:
        raise AdminError("dexp tickets", f"{response.status_code} {_detail(response)}")
    try:
        reply = response.json()
        tickets = reply["tickets"]
        valid = isinstance(tickets, list) and all(isinstance(t, str) for t in tickets)
    except (ValueError, KeyError, TypeError):
        valid = False
    if not valid:
        raise AdminError(
            "dexp tickets", f"unexpected reply from {url} ({response.status_code}): no tickets"
        )
    result: dict[str, Any] = reply
    return result


def _detail(response: httpx.Response) -> str:
    """The error's `detail` (FastAPI), or the start of the body."""
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text[:200] or response.reason_phrase
    if isinstance(detail, list):  # request validation errors: "field: message; ..."
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', [])[1:])}: {e.get('msg', '')}"
            if isinstance(e, dict)
            else str(e)
            for e in detail
        )
    return " ".join(str(detail).split())


tickets_app = typer.Typer(
    help="One-time enrollment tickets: each enrolls one agent (admin token required).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@tickets_app.command("issue")
def issue(
    experiment: Annotated[str, typer.Argument(help="Experiment id.", show_default=False)],
    count: Annotated[
        int, typer.Option(min=1, max=MAX_TICKETS, help="Tickets to issue (one per agent).")
    ],
    ttl: Annotated[
        int,
        typer.Option(min=1, max=MAX_TTL_SECONDS, help="Seconds each ticket stays valid."),
    ] = DEFAULT_TTL_SECONDS,
    coordinator_url: Annotated[
        str, typer.Option(envvar="DEXP_COORDINATOR_URL", help="The coordinator's base URL.")
    ] = DEFAULT_COORDINATOR_URL,
    admin_token: Annotated[
        str | None,
        typer.Option(envvar="DEXP_ADMIN_TOKEN", help="The admin token.", show_default=False),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the coordinator's JSON reply instead.")
    ] = False,
) -> None:
    """Issue COUNT tickets for EXPERIMENT and print them, one per line, on stdout."""
    if not EXPERIMENT_ID.match(experiment):
        raise typer.BadParameter(
            f"{experiment!r}: letters, digits, '_' and '-', 1 to 64 of them",
            param_hint="'EXPERIMENT'",
        )
    if not re.match(r"^https?://[^/\s]+", coordinator_url):
        raise typer.BadParameter(
            f"{coordinator_url!r}: an http:// or https:// URL", param_hint="'--coordinator-url'"
        )
    if not admin_token:
        raise typer.BadParameter(
            "required: set DEXP_ADMIN_TOKEN or pass --admin-token", param_hint="'--admin-token'"
        )
    reply = issue_tickets(coordinator_url, admin_token, experiment, count, ttl)
    if as_json:
        sys.stdout.write(json.dumps(reply, indent=2) + "\n")
    else:
        sys.stdout.write("".join(f"{ticket}\n" for ticket in reply["tickets"]))
    sys.stdout.flush()
    expires = reply.get("expires_at")
    until = (
        time.strftime(" until %Y-%m-%dT%H:%M:%SZ", time.gmtime(expires / 1000))
        if isinstance(expires, int | float)
        else ""
    )
    sys.stderr.write(
        f"issued {len(reply['tickets'])} ticket(s) for {experiment}, valid{until}; "
        "each enrolls one agent once: keep them secret\n"
    )
