"""`python -m load_generator [--json]`: play the environment until the best arm is identified."""

from __future__ import annotations

import logging
import sys

from common.errors import ParameterError
from load_generator.generator import LoadGenerator, NotEnoughAgents, format_summary
from load_generator.settings import LoadSettings


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
    except NotEnoughAgents as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    print(format_summary(summary, settings.json_output), flush=True)
    if summary.status != "identified":
        return 1
    return 0 if summary.correct else 4


if __name__ == "__main__":
    sys.exit(main())
