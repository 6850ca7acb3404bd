"""What a test needs from the machine (a Docker engine, chromium, kubectl, /proc), and what happens
when it is missing: skipped with the reason on a developer's machine, a failure under CI, which
must provide everything (`.ci/run` sets CI and starts or installs what the suite needs). A green
CI therefore means that every test ran."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(reason: str) -> NoReturn:
    """The test cannot run here: fail under CI, skip elsewhere."""
    if under_ci():
        pytest.fail(f"CI must provide what this test needs: {reason}", pytrace=False)
    pytest.skip(reason)
