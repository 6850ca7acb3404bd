"""The admin's calls to a running coordinator: a small HTTP client shared by `dexp tickets`,
`dexp experiments` (dexp/manage.py) and `dexp watch` (dexp/watch.py), so that no operator writes
curl with a bearer token.

`dexp tickets issue ID --count N` asks the coordinator for N one-time enrollment tickets of
experiment ID (POST /v1/experiments/{id}/tickets with the admin token) and prints them, one per
line, on stdout and nothing else there, so that `> tickets.txt` makes the file the agents read
(DEXP_TICKETS_FILE). Each ticket enrolls one agent, once: the way to decide who may vote when the
shared enrollment secret (open enrollment) is refused, as it is in production.

The coordinator's URL and the credential come from DEXP_COORDINATOR_URL and DEXP_API_KEY (a named
key of the role the call needs, `dexp keys create`) or DEXP_ADMIN_TOKEN (the coordinator's own
variables: `docker compose exec coordinator dexp tickets issue ...` needs no flag), or from the
flags (--coordinator-url, --key or its old name --admin-token), which win. A refusal or an unreachable coordinator is one line on stderr
and exit status 1 (`dexp tickets: 403 key 'ci' has role viewer: ...`); bad arguments, exit status 2.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Annotated, Any

import httpx
import typer

from clients.coordinator import coordinator_urls

DEFAULT_COORDINATOR_URL = "http://127.0.0.1:8000"
MAX_TICKETS = 10_000  # per request, as the coordinator accepts
DEFAULT_TTL_SECONDS = 86_400
MAX_TTL_SECONDS = 30 * 86_400
DEFAULT_TIMEOUT_SECONDS = 30.0
EXPERIMENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# A proxy or the coordinator itself (Redis down: 503 with Retry-After) may answer these while the
# coordinator is briefly away: worth a retry for a caller that waits (dexp watch), not a refusal.
RETRYABLE_STATUSES = frozenset({502, 503, 504})


class AdminError(Exception):
    """The coordinator refused the call or could not be reached: reported as one line, exit 1."""

    def __init__(self, command: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.status = status


class Unreachable(AdminError):
    """No answer, or a 502/503/504: the coordinator (or its Redis) is away, perhaps briefly, so a
    caller that waits may retry, where a refusal (4xx) would only repeat itself."""


class Coordinator:
    """One coordinator, as one admin command talks to it: its base URL, the bearer token (None:
    none sent, for the public reads), a timeout, and the command named in every error line.

    Nothing is retried here: a retried POST after a lost reply could act twice (a second batch of
    tickets, a second reset); the callers that can retry safely (reads) decide for themselves."""

    def __init__(
        self,
        command: str,
        url: str,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self.command = command
        # Several URLs (DEXP_COORDINATOR_URL as the agents take it): the first that accepts the
        # connection answers. Only a refused connection moves on: the request was not sent, so
        # trying the next coordinator cannot act twice.
        self.urls = [part.strip().rstrip("/") for part in url.split(",") if part.strip()]
        self.url = self.urls[0]
        self.token = token or None
        self._http = httpx.Client(timeout=timeout)

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Any:
        """The reply's JSON (None for an empty reply, e.g. 204), or AdminError with one line:
        `404 experiment 'x' does not exist`, `cannot reach the coordinator at URL: ...`."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        for index, url in enumerate(self.urls):
            try:
                response = self._http.request(
                    method, url + path, json=body, params=params, headers=headers
                )
                self.url = url
                break
            except httpx.ConnectError as exc:
                if index + 1 < len(self.urls):
                    continue
                raise Unreachable(
                    self.command, f"cannot reach the coordinator at {url}: ConnectError: {exc}"
                ) from None
            except httpx.HTTPError as exc:
                raise Unreachable(
                    self.command,
                    f"cannot reach the coordinator at {url}: {type(exc).__name__}: {exc}",
                ) from None
        status = response.status_code
        if status >= 400:
            error = Unreachable if status in RETRYABLE_STATUSES else AdminError
            raise error(self.command, f"{status} {_detail(response)}", status)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise self.unexpected(path, f"not JSON ({status})") from None

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def unexpected(self, path: str, what: str) -> AdminError:
        """A reply that is not what the API documents (an old coordinator, something else)."""
        return AdminError(self.command, f"unexpected reply from {self.url}{path}: {what}")


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


# ----------------------------------------------------------------------------- shared options

ExperimentArgument = Annotated[str, typer.Argument(help="Experiment id.", show_default=False)]
CoordinatorUrlOption = Annotated[
    str,
    typer.Option(
        envvar="DEXP_COORDINATOR_URL",
        help="The coordinator's base URL, or several separated by commas (the first that accepts the connection answers).",
    ),
]
# A named key (POST /v1/keys, `dexp keys create`) or the admin token: the coordinator tells them
# apart. DEXP_API_KEY wins over DEXP_ADMIN_TOKEN, so that a person's own key is what a shell that
# has both sends (the coordinator's container has the admin token).
AdminTokenOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        "--admin-token",
        envvar=["DEXP_API_KEY", "DEXP_ADMIN_TOKEN"],
        help="A key (`dexp keys create`; its role must allow the call) or the admin token.",
        show_default=False,
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the coordinator's JSON reply instead.")
]


def check_experiment(experiment: str) -> str:
    """The id as the coordinator's routes accept it; anything else is a usage error (exit 2)
    rather than a 404 or a request to another path."""
    if not EXPERIMENT_ID.match(experiment):
        raise typer.BadParameter(
            f"{experiment!r}: letters, digits, '_' and '-', 1 to 64 of them",
            param_hint="'EXPERIMENT'",
        )
    return experiment


def connect(
    command: str,
    coordinator_url: str,
    admin_token: str | None,
    *,
    token_required: bool,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Coordinator:
    """A client for `command`, its arguments checked first (exit 2 with one line): an http(s)
    URL, and the admin token where the call needs it. The public reads send it if it is given."""
    try:
        coordinator_urls(coordinator_url)  # one URL, or several separated by commas
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--coordinator-url'") from None
    if token_required and not admin_token:
        raise typer.BadParameter(
            "required: set DEXP_API_KEY (a key) or DEXP_ADMIN_TOKEN, or pass --key",
            param_hint="'--key'",
        )
    return Coordinator(command, coordinator_url, admin_token, timeout)


def write_json(document: Any) -> None:
    """The coordinator's JSON, indented, on stdout: for scripts (`| jq`)."""
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
    sys.stdout.flush()


# ----------------------------------------------------------------------------- dexp tickets


def issue_tickets(
    coordinator: Coordinator, experiment: str, count: int, ttl_seconds: int = DEFAULT_TTL_SECONDS
) -> dict[str, Any]:
    """The coordinator's reply: {"experiment", "tickets": [...], "expires_at": unix ms}.

    Not retried: a retry after a lost reply would issue a second batch (the first one unused,
    expiring by itself); the operator reruns the command instead."""
    path = f"/v1/experiments/{experiment}/tickets"
    reply = coordinator.post(path, {"count": count, "ttl_seconds": ttl_seconds})
    tickets = reply.get("tickets") if isinstance(reply, dict) else None
    if not (isinstance(tickets, list) and all(isinstance(t, str) for t in tickets)):
        raise coordinator.unexpected(path, "no tickets")
    result: dict[str, Any] = reply
    return result


tickets_app = typer.Typer(
    help="One-time enrollment tickets: each enrolls one agent (admin token required).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@tickets_app.command("issue")
def issue(
    experiment: ExperimentArgument,
    count: Annotated[
        int, typer.Option(min=1, max=MAX_TICKETS, help="Tickets to issue (one per agent).")
    ],
    ttl: Annotated[
        int,
        typer.Option(min=1, max=MAX_TTL_SECONDS, help="Seconds each ticket stays valid."),
    ] = DEFAULT_TTL_SECONDS,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Issue COUNT tickets for EXPERIMENT and print them, one per line, on stdout."""
    check_experiment(experiment)
    with connect("dexp tickets", coordinator_url, admin_token, token_required=True) as coordinator:
        reply = issue_tickets(coordinator, experiment, count, ttl)
    if as_json:
        write_json(reply)
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
