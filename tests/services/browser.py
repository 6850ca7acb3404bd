"""Debian's chromium under Playwright, for the browser tests (the dashboard, the JavaScript SDK).

No browser download works here: the tests drive /usr/bin/chromium (scripts/test installs it).
Where it or the playwright package is missing a test is skipped with the reason, except under CI,
where it fails (tests.prerequisites.missing).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tests.prerequisites import missing

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def browser_missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no browser at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install -e '.[test]')"
    return None


@contextmanager
def chromium() -> Iterator[Browser]:
    """A launched chromium, closed on exit; the test is `missing` where there is none."""
    reason = browser_missing()
    if reason is not None:
        missing(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield launched
        finally:
            launched.close()
