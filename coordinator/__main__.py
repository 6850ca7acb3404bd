"""`python -m coordinator`: one uvicorn process (replicate containers, not workers)."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys

import uvicorn
from pydantic import ValidationError

from coordinator.settings import Settings, get_settings

log = logging.getLogger("dexp.coordinator")


def fast_stack() -> dict[str, bool]:
    """The C accelerators installed (uvicorn[standard], redis[hiredis]): with loop="auto" and
    http="auto", uvicorn runs on uvloop and parses HTTP with httptools when they are importable;
    redis-py uses hiredis whenever it is importable."""
    return {
        name: importlib.util.find_spec(name) is not None
        for name in ("uvloop", "httptools", "hiredis")
    }


def load_settings() -> Settings:
    """The settings, or exit with a plain message (no traceback) if they are invalid, e.g. a
    production coordinator with a development placeholder for a secret."""
    try:
        return get_settings()
    except ValidationError as exc:
        problems = "\n".join(
            f"  {'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}"
            for e in exc.errors()
        )
        sys.exit(f"dexp coordinator: invalid configuration, not starting:\n{problems}")


def main() -> None:
    settings = load_settings()
    missing = [name for name, present in fast_stack().items() if not present]
    if missing:
        logging.basicConfig()
        log.warning("%s not importable: the vote path runs at about half speed", ", ".join(missing))
    uvicorn.run(
        "coordinator.app:create_app",
        factory=True,
        host=os.environ.get("DEXP_HOST", "127.0.0.1"),
        port=int(os.environ.get("DEXP_PORT", "8000")),
        loop="auto",  # uvloop if installed
        http="auto",  # httptools if installed
        ws="none",  # no WebSocket routes
        log_level=settings.log_level,
        access_log=False,
    )


if __name__ == "__main__":
    main()
