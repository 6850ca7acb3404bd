"""Arm Selection subroutines, by the names the CLI and the experiments use."""

from __future__ import annotations

from typing import Any

import numpy as np

from common.errors import ParameterError
from common.subroutines.base import ArmSelection, LocalParams
from common.subroutines.dp import DPSuccessiveElimination
from common.subroutines.explore_commit import KLLUCB, StitchedLUCB, UGapEc
from common.subroutines.fixed_budget import FixedBudget
from common.subroutines.lucb import LUCB
from common.subroutines.median import MedianElimination
from common.subroutines.sharp import KLSuccessiveElimination, StitchedSuccessiveElimination
from common.subroutines.successive import SER3, SER4, SuccessiveElimination

SUBROUTINES: dict[str, type[ArmSelection]] = {
    cls.name: cls
    for cls in (
        SuccessiveElimination,
        SER3,
        SER4,
        KLSuccessiveElimination,
        StitchedSuccessiveElimination,
        MedianElimination,
        LUCB,
        UGapEc,
        KLLUCB,
        StitchedLUCB,
        DPSuccessiveElimination,
        FixedBudget,
    )
}
# What an experiment may name (--subroutine, DEXP_SUBROUTINE, POST /v1/experiments): all but the
# ones an algorithm picks by itself.
USER_SUBROUTINES: tuple[str, ...] = tuple(n for n, c in SUBROUTINES.items() if c.selectable)


def catalog() -> list[dict[str, Any]]:
    """Every subroutine an experiment may name, as `dexp subroutines` lists it."""
    return [
        {
            "name": name,
            "rewards": list(cls.rewards),
            "description": cls.summary,
            "reference": cls.reference,
        }
        for name, cls in SUBROUTINES.items()
        if cls.selectable
    ]


def subroutine_class(name: str) -> type[ArmSelection]:
    try:
        return SUBROUTINES[name]
    except KeyError:
        raise ParameterError(
            "subroutine", name, f"must be one of {', '.join(SUBROUTINES)}"
        ) from None


def restore(state: dict[str, Any], rng: np.random.Generator) -> ArmSelection:
    return subroutine_class(state["name"]).from_state(state, rng)


__all__ = [
    "LUCB",
    "SER3",
    "SER4",
    "SUBROUTINES",
    "USER_SUBROUTINES",
    "ArmSelection",
    "DPSuccessiveElimination",
    "FixedBudget",
    "KLSuccessiveElimination",
    "LocalParams",
    "MedianElimination",
    "StitchedSuccessiveElimination",
    "SuccessiveElimination",
    "catalog",
    "restore",
    "subroutine_class",
]
