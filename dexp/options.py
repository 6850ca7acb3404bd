"""Command-line options that several `dexp` commands share: the problem and its arms, and the
checks of their values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from common.environments import PROBLEMS
from common.errors import ParameterError
from common.simulation import ENGINES
from common.simulation.config import ATTACKS, STOP_RULES

DEFAULT_PROBLEM = "feraud-1"
# --eta when none is given: the papers' 0.9 for the voting algorithms; CDE's certificate needs
# local runs better than a uniform guess (eta < (K - 1) / K), and 0.1 certifies delta = 0.05 from
# 15 agents on 10 arms at the default privacy (common.cde.smallest_agents).
DEFAULT_ETA = 0.9
CDE_ETA = 0.1


def default_eta(algorithm: str) -> float:
    return CDE_ETA if algorithm == "cde" else DEFAULT_ETA


# The problem options that `simulate`, `demo` and the audits share.
ProblemOption = Annotated[
    str | None,
    typer.Option(help=f"A named problem ({', '.join(PROBLEMS)}); default {DEFAULT_PROBLEM}."),
]
MeansOption = Annotated[
    str | None,
    typer.Option(help="Arm means (alone, or replacing the problem's), e.g. 0.8,0.8,0.2."),
]
RewardsOption = Annotated[
    str | None, typer.Option(help="bernoulli (default with --means) or gaussian:SIGMA.")
]
DeclareOption = Annotated[
    str,
    typer.Option(
        help="Bernoulli arms: what the agents are told of the rewards, bernoulli (each 0 or 1: "
        "CDE's exact binomial T) or bounded (each in [0, 1]: the sub-Gaussian T).",
    ),
]
DriftOption = Annotated[
    str | None, typer.Option(help="Per-arm drift of the means per activation, e.g. 0,-1e-5.")
]
ActivationOption = Annotated[
    str | None,
    typer.Option(
        help="uniform | groups:P:Q | power:ALPHA:GAMMA | zipf:S (default: the problem's)."
    ),
]

# The run options that `simulate` and `audit votes` share.
PullsOption = Annotated[
    str, typer.Option(help="Per activation: one arm, or every arm of the local set (Rio).")
]
StopOption = Annotated[str, typer.Option(help=" | ".join(STOP_RULES))]
BudgetOption = Annotated[int, typer.Option(help="Most activations per trial.")]
WorkersOption = Annotated[int, typer.Option(help="Processes running trials.")]
EngineOption = Annotated[str, typer.Option(help=" | ".join(ENGINES))]
PhiOption = Annotated[float, typer.Option(help="SER4: reset probability per step.")]
ToleranceOption = Annotated[
    int, typer.Option(help="Byzantine agents tolerated f: the vote threshold is M + f.")
]
AttackOption = Annotated[
    str,
    typer.Option(
        help=f"CDE: how the attackers lie, {' | '.join(ATTACKS)} (audit votes: or a list): "
        "fixed, each reports the best "
        "arm that is not eps-optimal at once; adaptive, they wait until some such arm has M - A "
        "honest reports, then all report it (the strongest attack on the certificate)."
    ),
]
ExactLocalErrorOption = Annotated[
    bool,
    typer.Option(
        "--exact-local-error",
        help="CDE stress mode: each local answer ignores the rewards and is each arm that is not "
        "eps-optimal with probability eta/(K-1), the eps-optimal arms an even share of the rest "
        "(the certificate's worst case).",
    ),
]


def parse_ints(name: str, text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ParameterError(name, text, "must be comma-separated integers") from None
    if not values:
        raise ParameterError(name, text, "must be comma-separated integers")
    return values


def check_choice(name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ParameterError(name, value, f"must be one of {', '.join(choices)}")
    return value


def check_at_least(name: str, value: int, low: int) -> int:
    if value < low:
        raise ParameterError(name, value, f"must be >= {low}")
    return value
