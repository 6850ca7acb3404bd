"""The `dexp` command's root. Each command lives in its own module, imported only when that command
runs or shows its help, so that `dexp --help` answers at once and `dexp experiments list` or
`dexp plan --help` load nothing they do not use (issue 37, point 11; tests/test_cli_imports.py).

Bad arguments exit with status 2 and one line on stderr (`error: eta=1.5 is invalid: ...`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Lazy:
    """Where a command is (a function or a Typer group) and its line in `dexp --help`."""

    module: str
    attribute: str
    help: str


COMMANDS: dict[str, Lazy] = {
    "simulate": Lazy(
        "dexp.simulate_cmd",
        "simulate",
        "Run seeded trials of one configuration and report sample complexity, messages, failures "
        "and ties.",
    ),
    "subroutines": Lazy(
        "dexp.commands",
        "subroutines",
        "List the local subroutines an experiment may name, with the reward models their bounds "
        "are valid for.",
    ),
    "reproduce": Lazy(
        "dexp.commands",
        "reproduce",
        "Run one of the papers' experiments: NAME.csv, NAME_summary.csv, PNG figures in --out.",
    ),
    "demo": Lazy(
        "dexp.commands",
        "demo",
        "Run the whole system as local processes (redis-server, coordinator, agents, load "
        "generator) until the experiment ends.",
    ),
    "watch": Lazy(
        "dexp.watch",
        "watch",
        "Follow EXPERIMENT live until it is identified or tied.",
    ),
    "plan": Lazy(
        "dexp.plan_cmd",
        "plan",
        "The configurations that certify delta with N agents, each with the command that "
        "creates it.",
    ),
    "tickets": Lazy(
        "dexp.admin",
        "tickets_app",
        "One-time enrollment tickets: each enrolls one agent (admin token required).",
    ),
    "experiments": Lazy(
        "dexp.manage",
        "experiments_app",
        "List, show, create, reset and delete a coordinator's experiments; its admin views.",
    ),
    "keys": Lazy(
        "dexp.keys",
        "keys_app",
        "Named API keys with roles (viewer, operator, admin): create, list, revoke (admin key).",
    ),
    "audit-log": Lazy(
        "dexp.keys",
        "audit_log_command",
        "The coordinator's audit log: every state-changing call, newest first (admin key).",
    ),
    "audit": Lazy(
        "dexp.audit",
        "audit_app",
        "Privacy audits: measured leakage with confidence intervals, beside the certified bound.",
    ),
    "regret": Lazy(
        "dexp.dubey",
        "regret_app",
        "Regret minimisation on a network: Dubey & Pentland's private and Byzantine-proof UCB.",
    ),
}


def _fail(message: str, code: int = 2, prefix: str = "error") -> NoReturn:
    """One line on stderr, then exit."""
    line = " ".join(message.split())
    sys.stderr.write(f"{prefix}: {line}\n")
    sys.stderr.flush()
    sys.exit(code)


# typer >= 0.2x vendors click (typer._click), older typer uses click itself: find the classes
# through a public exception rather than importing either.
_CLICK_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)
_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


class UsageProblem(Exception):
    """A usage error found by a command itself; the message is printed as it is."""


def _raised(err: BaseException, module: str, name: str) -> bool:
    """`err` is `module.name`; a module never imported raised nothing, so it is not imported here."""
    loaded = sys.modules.get(module)
    kind = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(kind, type) and isinstance(err, kind)


def load(name: str) -> Any:
    """The click command `name`, its module imported now."""
    lazy = COMMANDS[name]
    target = getattr(importlib.import_module(lazy.module), lazy.attribute)
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)  # a group even with one command (tickets issue)
    else:
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


class DexpGroup(TyperGroup):
    """Loads a command when it is used; reports every error as one line: click's usage errors,
    ParameterError, a missing engine, a coordinator's refusal."""

    listing = False  # while the root's help is drawn: each command's line, nothing imported

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in COMMANDS:
            return None
        if self.listing:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name].help)
        return load(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name or "dexp", complete_var, False, **extra)
        except _USAGE_ERROR as err:
            ctx = getattr(err, "ctx", None)
            if type(err).__name__ == "NoArgsIsHelpError":  # `dexp` alone: typer printed the help
                sys.exit(2)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            _fail(err.format_message() + hint, getattr(err, "exit_code", 2))  # type: ignore[attr-defined]
        except _CLICK_ERROR as err:
            _fail(err.format_message(), getattr(err, "exit_code", 1))  # type: ignore[attr-defined]
        except typer.Abort:
            _fail("aborted", 1)
        except Exception as err:
            if isinstance(err, UsageProblem) or _raised(err, "common.errors", "ParameterError"):
                _fail(str(err), 2)
            if _raised(err, "dexp.engines", "EngineUnavailable"):
                _fail(str(err), 1)
            if _raised(err, "dexp.admin", "AdminError"):  # refused, or unreachable
                _fail(str(err), 1, prefix=getattr(err, "command", "dexp"))
            raise
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=DexpGroup,
    name="dexp",
    help="Private decentralized best-arm identification: simulate and reproduce experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Private decentralized best-arm identification: simulate and reproduce experiments."""


def main() -> None:
    app(prog_name="dexp")


if __name__ == "__main__":
    main()
