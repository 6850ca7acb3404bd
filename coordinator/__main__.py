"""`python -m coordinator`: one uvicorn process (replicate containers, not workers)."""

from __future__ import annotations

import os

import uvicorn

from coordinator.settings import get_settings


def main() -> None:
    settings = get_settings()
    uvicorn.run(
        "coordinator.app:create_app",
        factory=True,
        host=os.environ.get("DEXP_HOST", "127.0.0.1"),
        port=int(os.environ.get("DEXP_PORT", "8000")),
        log_level=settings.log_level,
        access_log=False,
    )


if __name__ == "__main__":
    main()
