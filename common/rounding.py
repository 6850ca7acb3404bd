"""Bounds as short text, rounded on their safe side: a bound rounded up stays a bound, a limit
rounded down stays within itself. Certificates, privacy statements and vote messages print their
figures through these, so none of those modules needs another to format a number."""

from __future__ import annotations

import math
from collections.abc import Callable


def upper(x: float) -> str:
    """x rounded up to 3 significant digits (a bound stays a bound), as short text: a probability,
    or a figure above 1 such as CDE's e0 (without an exponent)."""
    return _round(x, math.ceil)


def lower(x: float) -> str:
    """x rounded down to 3 significant digits (a limit stays within itself)."""
    return _round(x, math.floor)


def _round(x: float, direction: Callable[[float], int]) -> str:
    if x <= 0.0 or x == 1.0 or not math.isfinite(x):
        return f"{x:g}"
    exponent = math.floor(math.log10(x)) - 2
    scaled = x / 10.0**exponent
    nearest = round(scaled)
    digits = nearest if abs(scaled - nearest) < 1e-9 else direction(scaled)
    value = digits * 10.0**exponent
    if x < 1.0:
        return f"{value:.3g}"
    text = f"{value:.{max(0, -exponent)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
