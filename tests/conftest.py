"""Shared helpers: which simulator engine the heavy statistical tests can use.

The compiled engine (common/simulation/fast.py) is written separately; the tests that need many
trials are marked `slow` and `needs_fast`, and are skipped (with a reason) until it exists.
"""

from __future__ import annotations

import importlib.util

import pytest

HAVE_FAST = importlib.util.find_spec("common.simulation.fast") is not None

needs_fast = pytest.mark.skipif(
    not HAVE_FAST, reason="common/simulation/fast.py (the fast engine) does not exist yet"
)
