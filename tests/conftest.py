"""Suite-wide rule: under CI no test is skipped. A skip there means a prerequisite CI should have
provided is missing (tests/prerequisites.py), or a test that depends on another one's data; either
way the suite would be green without having checked what it claims, so the skip becomes a failure
that names its reason."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.prerequisites import under_ci


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and under_ci():
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where every test must run: {reason}"
