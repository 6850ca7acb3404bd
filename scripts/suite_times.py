#!/usr/bin/env python3
"""How long each part of the suite takes, from a pytest JUnit XML report.

    scripts/test --junitxml=suite.xml && python3 scripts/suite_times.py suite.xml [--files]

A part is a folder of tests/ (services, e2e, faults, cluster) or, for the files at the top of
tests/, the file itself; with --files, every file is a part. Times are pytest's own (setup, call
and teardown of each test). `scripts/test` runs two workers at once, so their sum is above the
wall time of the run, which the last line gives (the report's own, collection and start-up
included). Under the table: the commit the suite ran on (tests/conftest.py records it in the
report, with "+ uncommitted changes" when the tree differed from it), when it began, and that
wall time.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def part(classname: str, files: bool = False) -> str:
    """'tests.services.test_api' -> 'tests/services/' (or the file, with `files`);
    'tests.test_votes' -> 'tests/test_votes.py'."""
    words = classname.split(".")
    module = next((i for i, w in enumerate(words) if w.startswith("test_")), len(words) - 1)
    if module >= 2 and not files:
        return "/".join(words[:module]) + "/"
    return "/".join(words[: module + 1]) + ".py"


def main(path: str, files: bool = False) -> int:
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, int] = defaultdict(int)
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = part(case.get("classname", ""), files)
        seconds[name] += float(case.get("time", 0))
        tests[name] += 1
    total = sum(seconds.values())
    print(f"{'part':<46} {'tests':>6} {'seconds':>8} {'share':>6}")
    for name, secs in sorted(seconds.items(), key=lambda kv: -kv[1]):
        print(f"{name:<46} {tests[name]:>6} {secs:>8.1f} {secs / total:>6.1%}")
    print(f"{'all':<46} {sum(tests.values()):>6} {total:>8.1f}")
    print(provenance(root))
    return 0


def provenance(root: ET.Element) -> str:
    """The commit and start of the run, as the report records them."""
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    suite = ET.Element("testsuite") if suite is None else suite
    commits = {p.get("value") for p in suite.iter("property") if p.get("name") == "commit"}
    commit = (
        commits.pop()
        if len(commits) == 1
        else "not recorded (a report from before tests/conftest.py recorded it)"
    )
    wall = suite.get("time")
    took = f", {float(wall):.1f} s wall time" if wall is not None else ""
    return f"commit {commit}, run {suite.get('timestamp', 'at an unrecorded time')}{took}"


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--files"]
    if len(args) != 1 or any(a.startswith("-") for a in args):
        print(
            "usage: suite_times.py REPORT.xml [--files] (from pytest --junitxml)", file=sys.stderr
        )
        sys.exit(2)
    sys.exit(main(args[0], files="--files" in sys.argv[1:]))
