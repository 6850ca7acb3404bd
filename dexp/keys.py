"""`dexp keys` and `dexp audit-log`: a team's named keys and what each one changed.

- `keys create NAME --role viewer|operator|admin`: a new key, printed once on stdout (nothing else
  there: `> key.txt`); the coordinator keeps only its digest.
- `keys list`: every key's name, role and creation time (never a key).
- `keys revoke NAME`: the key is refused (401) from the next request on.
- `audit-log`: the state-changing calls made with a key or the admin token, newest first: when,
  which key, the route, the experiment, the status (GET /v1/audit, page after page with --limit).

Each call needs an admin key or the admin token (--key, DEXP_API_KEY or DEXP_ADMIN_TOKEN), as
dexp/admin.py's commands take it. A refusal is one line and exit 1; bad arguments exit 2.
"""

from __future__ import annotations

import re
import sys
import time
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from dexp.admin import (
    DEFAULT_COORDINATOR_URL,
    AdminTokenOption,
    CoordinatorUrlOption,
    JsonOption,
    connect,
    write_json,
)

COMMAND = "dexp keys"
ROLES = ("viewer", "operator", "admin")
NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_PAGE = 1000  # the coordinator's largest page of the audit log

keys_app = typer.Typer(
    help="Named keys with roles: viewer (reads), operator (changes experiments), admin (keys).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _name(name: str) -> str:
    if not NAME.match(name):
        raise typer.BadParameter(
            f"{name!r}: letters, digits, '_' and '-', 1 to 64 of them", param_hint="'NAME'"
        )
    return name


def _when(ms: Any) -> str:
    if not isinstance(ms, int):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ms / 1000))


NameArgument = Annotated[str, typer.Argument(help="The key's name.", show_default=False)]


@keys_app.command("create")
def create_command(
    name: NameArgument,
    role: Annotated[
        str,
        typer.Option(help="viewer, operator or admin: the least the holder needs."),
    ],
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    key: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create key NAME with ROLE and print it once on stdout."""
    _name(name)
    if role not in ROLES:
        raise typer.BadParameter(f"{role!r}: one of {', '.join(ROLES)}", param_hint="'--role'")
    with connect(COMMAND, coordinator_url, key, token_required=True) as coordinator:
        reply = coordinator.post("/v1/keys", {"name": name, "role": role})
    if not isinstance(reply, dict) or not isinstance(reply.get("key"), str):
        raise coordinator.unexpected("/v1/keys", "no key")
    if as_json:
        write_json(reply)
    else:
        sys.stdout.write(reply["key"] + "\n")
        sys.stdout.flush()
    sys.stderr.write(
        f"created key {name} ({role}): shown this once, keep it secret; "
        f"`dexp keys revoke {name}` ends it\n"
    )


@keys_app.command("list")
def list_command(
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    key: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every key's name, role and creation time."""
    with connect(COMMAND, coordinator_url, key, token_required=True) as coordinator:
        reply = coordinator.get("/v1/keys")
    if as_json:
        write_json(reply)
        return
    table = Table(title=f"{len(reply['keys'])} key(s), and the admin token (admin)")
    for column in ("name", "role", "created"):
        table.add_column(column)
    for entry in reply["keys"]:
        table.add_row(entry["name"], entry["role"], _when(entry.get("created_at")))
    Console(soft_wrap=True).print(table)


@keys_app.command("revoke")
def revoke_command(
    name: NameArgument,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    key: AdminTokenOption = None,
) -> None:
    """Revoke key NAME: refused (401) from the next request on."""
    _name(name)
    with connect(COMMAND, coordinator_url, key, token_required=True) as coordinator:
        coordinator.delete(f"/v1/keys/{name}")
    sys.stderr.write(f"revoked key {name}\n")


def audit_log_command(
    limit: Annotated[
        int, typer.Option(min=1, max=MAX_PAGE, help="Entries to show, newest first.")
    ] = 50,
    before: Annotated[
        str, typer.Option(help="Only entries older than this id (the `next` of a page).")
    ] = "",
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    key: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """The state-changing calls made with a key or the admin token, newest first (admin)."""
    params: dict[str, Any] = {"limit": limit, **({"before": before} if before else {})}
    with connect("dexp audit-log", coordinator_url, key, token_required=True) as coordinator:
        reply = coordinator.get("/v1/audit", params)
    if as_json:
        write_json(reply)
        return
    table = Table(title=f"audit log at {coordinator.url}, newest first")
    for column in ("when", "key", "role", "call", "experiment", "status"):
        table.add_column(column)
    for e in reply["entries"]:
        call = f"{e['method']} {e['route']}"
        table.add_row(_when(e["at"]), e["key"], e["role"], call, e["experiment"], str(e["status"]))
    console = Console(soft_wrap=True)
    console.print(table)
    if reply.get("next"):
        console.print(f"older entries: dexp audit-log --before {reply['next']}")
