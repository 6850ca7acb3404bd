"""`python -m coordinator`: one uvicorn process (replicate containers, not workers)."""

from __future__ import annotations

import importlib.util
import logging
import sys

import uvicorn
from pydantic import ValidationError
from uvicorn.config import STARTUP_FAILURE

from coordinator.server import listen_socket, uvicorn_config
from coordinator.settings import Settings, get_settings

log = logging.getLogger("dexp.coordinator")


def fast_stack() -> dict[str, bool]:
    """The C accelerators installed (uvicorn[standard], redis[hiredis]): uvicorn runs on uvloop
    (loop="auto") and parses HTTP with httptools (coordinator/server.py) when they are importable;
    redis-py uses hiredis whenever it is importable."""
    return {
        name: importlib.util.find_spec(name) is not None
        for name in ("uvloop", "httptools", "hiredis")
    }


def load_settings() -> Settings:
    """The settings, or exit with status 2 and one line (no traceback) if they are invalid, e.g. a
    production coordinator with a development placeholder for a secret."""
    try:
        return get_settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'DEXP_' + str(e['loc'][0]).upper() if e['loc'] else 'settings'}: {e['msg']}"
            for e in exc.errors()
        )
        print(f"dexp coordinator: invalid configuration, not starting: {problems}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    settings = load_settings()
    missing = [name for name, present in fast_stack().items() if not present]
    if missing:
        logging.basicConfig()
        log.warning("%s not importable: the vote path runs at about half speed", ", ".join(missing))
    try:  # the factory string: create_app() builds the app from the same (cached) settings
        config = uvicorn_config("coordinator.app:create_app", settings, factory=True)
    except ValueError as exc:  # e.g. DEXP_TRUSTED_PROXIES names no address or network
        sys.exit(f"dexp coordinator: invalid configuration, not starting:\n  {exc}")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[listen_socket(config, settings)])
    except KeyboardInterrupt:  # uvicorn shut down gracefully, then raised the SIGINT it caught
        sys.exit(130)
    if not server.started:  # as uvicorn.run: a failed start-up is a failed exit
        sys.exit(STARTUP_FAILURE)


if __name__ == "__main__":
    main()
