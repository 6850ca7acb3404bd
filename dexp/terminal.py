"""Where `dexp` writes: rich consoles on stdout and stderr, the trials' progress bar, warnings,
and the short number format of its tables."""

from __future__ import annotations

import math
import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def console(stderr: bool = False) -> Console:
    """Made per call, on the current sys.stdout/stderr; wide when not a terminal (logs, pipes)."""
    made = Console(stderr=stderr, highlight=False)
    if not made.is_terminal:
        made = Console(stderr=stderr, highlight=False, width=160)
    return made


def progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console(stderr=True),
        transient=False,
    )


def warn(message: str) -> None:
    """One line on stderr; the exit status does not change."""
    sys.stderr.write(f"warning: {' '.join(message.split())}\n")
    sys.stderr.flush()


def fmt(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"
