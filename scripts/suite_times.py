#!/usr/bin/env python3
"""How long each part of the suite takes, from a pytest JUnit XML report.

    scripts/test --junitxml=suite.xml && python3 scripts/suite_times.py suite.xml

A part is a folder of tests/ (services, e2e, faults, cluster) or, for the files at the top of
tests/, the file itself. Times are pytest's own (setup, call and teardown of each test), so their
sum is a little below the wall time of the run, which adds collection and start-up.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def part(classname: str) -> str:
    """'tests.services.test_api' -> 'tests/services/'; 'tests.test_votes' -> 'tests/test_votes.py'."""
    words = classname.split(".")
    module = next((i for i, w in enumerate(words) if w.startswith("test_")), len(words) - 1)
    if module >= 2:
        return "/".join(words[:module]) + "/"
    return "/".join(words[: module + 1]) + ".py"


def main(path: str) -> int:
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    for case in ET.parse(path).getroot().iter("testcase"):
        name = part(case.get("classname", ""))
        seconds[name] += float(case.get("time", 0))
        tests[name] += 1
    total = sum(seconds.values())
    print(f"{'part':<40} {'tests':>6} {'seconds':>8} {'share':>6}")
    for name, secs in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"{name:<40} {tests[name]:>6} {secs:>8.1f} {secs / total:>6.1%}")
    print(f"{'all':<40} {sum(tests.values()):>6} {total:>8.1f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: suite_times.py REPORT.xml (from pytest --junitxml)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
