"""`dexp plan`'s options, apart from the planning (dexp/plan.py), so that `dexp plan --help`
answers without loading numpy, the simulators or the bounds (issue 37, point 11)."""

from __future__ import annotations

from typing import Annotated

import typer

CDE_ETAS = (0.05, 0.2, 0.5)  # CDE's local error bounds tried by default
CDE_ETAS_TEXT = ",".join(f"{eta:g}" for eta in CDE_ETAS)
LDP_EPSILONS = (0.5, 1.0, 2.0)  # LDP: each report's privacy, tried by default
LDP_EPSILONS_TEXT = ",".join(f"{e:g}" for e in LDP_EPSILONS)


def plan(
    agents: Annotated[int, typer.Option(help="Agents N.")],
    delta: Annotated[float, typer.Option(help="The failure probability to certify.")],
    privacy: Annotated[
        float | None,
        typer.Option(
            help="Keep configurations whose hit-rate bound under a uniform prior over which arm "
            "is best (with this instance's eps-optimal arms) is at most this: CDE, at the P "
            "that gives it, equivalently e0 = log(P (K-1)/(1-P))."
        ),
    ] = None,
    problem: Annotated[
        str | None,
        typer.Option(help="A named problem, as dexp simulate takes it; default feraud-1."),
    ] = None,
    means: Annotated[
        str | None,
        typer.Option(help="Arm means (alone, or replacing the problem's), e.g. 0.8,0.8,0.2."),
    ] = None,
    rewards: Annotated[
        str | None, typer.Option(help="bernoulli (default with --means) or gaussian:SIGMA.")
    ] = None,
    activation: Annotated[
        str | None,
        typer.Option(
            help="uniform | groups:P:Q | power:ALPHA:GAMMA | zipf:S (default: the problem's)."
        ),
    ] = None,
    epsilon: Annotated[float, typer.Option(help="Target accuracy eps.")] = 0.25,
    tolerance: Annotated[
        int, typer.Option(help="Lying agents f the certificates allow for (thresholds M + f).")
    ] = 0,
    eta: Annotated[
        str, typer.Option(help="CDE: the local error bounds to try, comma-separated.")
    ] = CDE_ETAS_TEXT,
    dp_epsilon: Annotated[
        str, typer.Option(help="LDP: each report's privacy levels to try, comma-separated.")
    ] = LDP_EPSILONS_TEXT,
    reports_per_agent: Annotated[
        int, typer.Option(help="LDP: B, the reports one device may send.")
    ] = 1,
    trials: Annotated[
        int, typer.Option(help="Fast-simulator trials per configuration (0: no run).")
    ] = 5,
    seconds: Annotated[
        float, typer.Option(help="No new trial of a configuration after this long (>= 2 run).")
    ] = 20.0,
    seed: Annotated[int, typer.Option(help="Seed; trial i is dexp simulate's trial i.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """The configurations that certify delta with N agents: algorithm, threshold, certified
    failure, certified e0 (CDE, LDP), activations from a short run of the fast simulator beside
    the information-theoretic lower bound, and the `dexp experiments create` command that makes
    each. Exit 2 with one line when nothing certifies."""
    from dexp.plan import run

    run(
        agents, delta, privacy, problem, means, rewards, activation, epsilon, tolerance, eta,
        dp_epsilon, reports_per_agent, trials, seconds, seed, as_json,
    )  # fmt: skip
