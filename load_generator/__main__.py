"""`python -m load_generator [--json]`: play the environment until the experiment ends.

Exit status: 0 identified or tied, and correct (the arm, or every candidate, eps-optimal), or
already identified or tied when it started (nothing to play; it says so); 1 the budget or the
deadline ran out; 2 bad settings (one line); 3 too few agents (N < M, or CE's N (1 - xi) < M); 4 identified
or tied but not correct; 5 stalled (no activation consumed for DEXP_STALL_SECONDS, or the
coordinator or Redis unreachable for DEXP_UNREACHABLE_SECONDS): the summary says what it saw; 6
another load generator is feeding the experiment (it holds the experiment's lease and kept it for
DEXP_LEASE_SECONDS plus a second): one line says which run, on which host, since when.

The summary, in text, is one block between two rules naming the experiment, so that it stands out
in a foreground `docker compose up` among the other services' lines (--json: one JSON object).

SIGTERM (docker stop) ends the run as Ctrl-C does: the lease is deleted, so the next run need not
wait for it to expire.
"""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

import redis
from pydantic import ValidationError

from common.errors import ParameterError
from load_generator.generator import LoadGenerator, NotEnoughAgents, exit_code, format_summary
from load_generator.lease import LeaseHeld
from load_generator.settings import LoadSettings

RULE_WIDTH = 100  # the summary's rules


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: unwind (SystemExit 128 + 15), so that the run releases its lease on the way out."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    unknown = [a for a in args if a != "--json"]
    if unknown:
        print(
            f"error: unknown argument {unknown[0]!r} (only --json; the rest is DEXP_* env)",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.WARNING)
    try:
        settings = LoadSettings()
        if "--json" in args:
            settings.json_output = True
        with LoadGenerator(settings) as generator:
            summary = generator.run()
    except ParameterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a DEXP_* variable of the wrong type or out of range
        problems = "; ".join(
            f"DEXP_{str(e['loc'][0]).upper() if e['loc'] else 'SETTINGS'}: {e['msg']}"
            for e in exc.errors()
        )
        print(f"error: invalid configuration: {problems}", file=sys.stderr)
        return 2
    except NotEnoughAgents as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except LeaseHeld as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 6
    except (ConnectionError, redis.ConnectionError, redis.TimeoutError) as exc:
        # Before the run started (waiting for agents): the coordinator or Redis never answered
        # within DEXP_UNREACHABLE_SECONDS. A stall, as during the run.
        print(f"error: stalled before the run: {exc}", file=sys.stderr)
        return 5
    text = format_summary(summary, settings.json_output)
    if not settings.json_output:
        text = framed(f"dexp load generator: experiment {summary.experiment}", text)
    print(text, flush=True)
    return exit_code(summary)


def framed(title: str, text: str) -> str:
    """`text` between a rule that names it and a closing rule, RULE_WIDTH wide (or the title's)."""
    width = max(RULE_WIDTH, len(title) + 10)
    head = f"==== {title} ".ljust(width, "=")
    return "\n".join([head, text, "=" * width])


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main())
