"""`dexp audit votes`: the adversaries of common/privacy.py on simulated trials, with sweeps.

Each point runs T audited trials and T' training trials of one configuration in one seeded
batch: audited trial i is trial i of `dexp simulate` with the same options and seed, the
training trials are the batch's next T' seeds. --eta, --xi, --beta, --privacy, --agents,
--algorithm and --subroutine take comma-separated lists; the points are their product. CDE's
points audit each agent's report and its time (common/privacy.py), against its bound on the hit
rate under a uniform prior, the corollary of its certified epsilon e0 for the audit's
adversaries. One point prints one JSON object; a sweep prints {"points": [...]}.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.cde import DEFAULT_PRIVACY
from common.certificate import certify_simulation
from common.environments import Environment, build_problem
from common.errors import ParameterError
from common.privacy import audit_votes
from common.rounding import upper
from common.simulation import SimulationConfig, TrialResult, run_trials
from common.simulation.config import DEFAULT_BUDGET
from common.stats import proportion_interval
from dexp.choices import PRIVACY_HELP
from dexp.engines import check_engine
from dexp.options import (
    DEFAULT_PROBLEM,
    ActivationOption,
    AttackOption,
    BudgetOption,
    DriftOption,
    EngineOption,
    ExactLocalErrorOption,
    MeansOption,
    PhiOption,
    ProblemOption,
    PullsOption,
    RewardsOption,
    StopOption,
    ToleranceOption,
    WorkersOption,
    default_eta,
)

AUDITED = ("de", "ce", "dp-mase", "cde")


@dataclass(frozen=True)
class AuditPoint:
    """One configuration of a sweep, with what it measured."""

    label: str
    config: SimulationConfig
    result: dict[str, Any]  # VoteAudit.to_json() plus the point's parameters


def parse_list(name: str, text: str, kind: Callable[[str], Any]) -> list[Any]:
    """A comma-separated list of values, each checked by `kind` (float, int or str)."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ParameterError(name, text, "must be one value or a comma-separated list")
    try:
        return [kind(x) for x in items]
    except ValueError:
        raise ParameterError(
            name, text, f"must be comma-separated {kind.__name__} values"
        ) from None


def point_label(algo: AlgorithmConfig, n_agents: int, attackers: int = 0, attack: str = "") -> str:
    liars = f" attackers={attackers}" + (f" {attack}" if algo.reports else "") if attackers else ""
    if algo.algorithm == "dp-mase":
        return f"dp-mase beta={algo.beta:g} eps_dp={algo.dp_epsilon:g} N={n_agents}{liars}"
    if algo.reports:
        return f"cde privacy={algo.privacy:g} eta={algo.eta:g} N={n_agents}{liars}"
    xi = f" xi={algo.xi:g}" if algo.algorithm == "ce" else ""
    return f"{algo.algorithm}-{algo.subroutine} eta={algo.eta:g}{xi} N={n_agents}{liars}"


def run_point(
    config: SimulationConfig,
    trials: int,
    training_trials: int,
    seed: int,
    engine: str = "fast",
    workers: int = 1,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> dict[str, Any]:
    """The audit of one configuration as JSON: `trials` audited, `training_trials` to learn the
    posterior from, all from one seeded batch."""
    if config.algorithm.algorithm not in AUDITED:
        raise ParameterError(
            "algorithm", config.algorithm.algorithm, f"the vote audit covers {', '.join(AUDITED)}"
        )
    results = run_trials(
        config,
        trials + training_trials,
        seed=seed,
        engine=engine,
        workers=workers,
        on_trial=on_trial,
    )
    audit = audit_votes(config, results[:trials], results[trials:])
    algo = config.algorithm
    failures = sum(not r.correct for r in results)
    low, high = proportion_interval(failures, len(results))
    return {
        "label": point_label(algo, config.n_agents, config.attackers, config.attack),
        "algorithm": algo.algorithm,
        "subroutine": algo.local_subroutine,
        "agents": config.n_agents,
        "eta": algo.eta,
        "xi": algo.xi,
        "beta": algo.beta,
        "dp_epsilon": algo.dp_epsilon,
        "privacy": algo.privacy if algo.reports else None,
        "seed": seed,
        "attackers": config.attackers,
        "attack": config.attack,
        "certified_failure": certify_simulation(config).failure,
        # every trial of the point (audited and training): answers not eps-optimal, or none
        "failure_rate": {
            "mean": failures / len(results),
            "ci95": [low, high],
            "failures": failures,
            "trials": len(results),
        },
        **audit.to_json(),
    }


def print_points(points: Sequence[dict[str, Any]], title: str) -> None:
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=200)
    table = Table(title=title, title_justify="left")
    columns = (
        "point",
        "M",
        "certified failure",
        "failure rate (95% CI)",
        "certified e0",
        "hit rate, uniform prior",
        "votes only (95% CI)",
        "adversary",
        "with outcome",
        "baseline",
        "uniform",
        "named exactly",
        "agents",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("point", "adversary") else "right")

    def rate(r: dict[str, Any]) -> str:
        low, high = r["ci95"]
        return f"{r['mean']:.3f} [{low:.3f}, {high:.3f}]"

    for p in points:
        table.add_row(
            p["label"],
            str(p["threshold"]),
            upper(p["certified_failure"]),
            rate(p["failure_rate"]),
            *privacy_cells(p),
            rate(p["votes_only"]),
            p["votes_only"]["adversary"],
            rate(p["hit_rate"]),
            rate(p["baseline"]),
            f"{p['baselines']['uniform']['mean']:.3f}",
            rate(p["named_exactly"]),
            str(p["agent_trials"]),
        )
    out.print(table)
    out.print(
        "certified failure: the probability bound on the best arm voted out by error for the "
        "point's configuration and N (docs/SUBROUTINES.md, section 3; cde: on an answer that is "
        "not eps-optimal, or none, docs/CDE.md), with its attackers; failure rate: measured over "
        "all the point's trials (audited and training). "
        "certified e0 (cde): whatever its prior, any adversary's odds about one agent's answer are "
        "multiplied by at most e^e0 by its report. hit rate, uniform prior: for cde its corollary "
        "for an adversary with a uniform prior over which arm is best, the prior of these "
        "adversaries, which the votes only column must not exceed; for the others none, beside "
        "the papers' figure, what the method promises no adversary can be surer of, not a bound on "
        "how often a guess hits. votes "
        "only: the strongest adversary reading one agent's votes, their order and times. with "
        "outcome: also the published answer. baseline: the published answer alone."
    )
    for p in points:
        if p.get("senders") is not None:
            out.print(
                f"{p['label']}: among the agents that sent their report, reported-arm hits "
                f"{rate(p['senders'])} (at most {upper(p['hit_rate_uniform_prior'])} under a "
                "uniform prior)"
            )


def privacy_cells(p: dict[str, Any]) -> tuple[str, str]:
    """The certified e0 and the hit-rate bound of a point: CDE's e0 and its bound under a uniform
    prior, or none and the papers' figure."""
    if p["certified_epsilon"] is None:
        return "none", f"none (papers' {p['papers_privacy']:.3f})"
    return upper(p["certified_epsilon"]), upper(p["hit_rate_uniform_prior"])


def votes(
    problem: ProblemOption = None,
    means: MeansOption = None,
    rewards: RewardsOption = None,
    drift: DriftOption = None,
    agents: Annotated[str, typer.Option(help="Agents N, or a list: 32,64.")] = "64",
    activation: ActivationOption = None,
    algorithm: Annotated[str, typer.Option(help="de | ce | dp-mase | cde, or a list.")] = "de",
    subroutine: Annotated[str, typer.Option(help="Local subroutine, or a list.")] = "ser3",
    epsilon: Annotated[float, typer.Option(help="Target accuracy eps.")] = 0.25,
    delta: Annotated[float, typer.Option(help="Global failure probability.")] = 0.05,
    eta: Annotated[
        str | None,
        typer.Option(
            help="Local failure probability eta (DE, CE, CDE), or a list (default 0.9, cde 0.1). "
            "Certified 1 - eta; the measured hit rate can rise with eta."
        ),
    ] = None,
    xi: Annotated[str, typer.Option(help="CE: vote drop probability, or a list.")] = "0.1",
    dp_epsilon: Annotated[float, typer.Option(help="DP-MASE: eps_dp of the rewards.")] = 0.1,
    beta: Annotated[
        str, typer.Option(help="DP-MASE: local failure probability, or a list.")
    ] = "0.5",
    phi: PhiOption = 0.0,
    privacy: Annotated[
        str | None,
        typer.Option(help=f"{PRIVACY_HELP}; or a list (default {DEFAULT_PRIVACY:g})."),
    ] = None,
    tolerance: ToleranceOption = 0,
    attackers: Annotated[
        int,
        typer.Option(
            help="Byzantine agents 0..A-1 (voting against the best arm; cde: reporting an arm "
            "that is not eps-optimal, as --attack says): not audited, but they count in the "
            "failure rate."
        ),
    ] = 0,
    attack: AttackOption = "fixed",
    exact_local_error: ExactLocalErrorOption = False,
    pulls: PullsOption = "one",
    stop: StopOption = "all-agents",
    budget: BudgetOption = DEFAULT_BUDGET,
    trials: Annotated[int, typer.Option(help="Audited trials per point.")] = 20,
    training_trials: Annotated[
        int, typer.Option(help="Trials the Bayes adversary learns from (other seeds).")
    ] = 20,
    seed: Annotated[int, typer.Option(help="Seed; audited trial i = dexp simulate's trial i.")] = 0,
    workers: WorkersOption = 1,
    engine: EngineOption = "fast",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """What one agent's votes reveal of its eps-optimal arm: the hit rate of adversaries reading
    what the coordinator sees of it (vote set, order and times; the public outcome), with 95%
    intervals, beside the certified bound and the best guess from public information alone."""
    name = problem if problem is not None or means is not None else DEFAULT_PROBLEM
    built = build_problem(name, means, rewards, drift, activation)
    if pulls not in ("one", "every-arm"):
        raise ParameterError("pulls", pulls, "must be one or every-arm")
    for option, value, low in (
        ("trials", trials, 1),
        ("training_trials", training_trials, 1),
        ("workers", workers, 1),
        ("seed", seed, 0),
    ):
        if value < low:
            raise ParameterError(option, value, f"must be >= {low}")
    check_engine(engine)
    grid = itertools.product(
        parse_list("algorithm", algorithm, str),
        parse_list("subroutine", subroutine, str),
        parse_list("eta", eta, float) if eta is not None else [None],
        parse_list("xi", xi, float),
        parse_list("beta", beta, float),
        parse_list("privacy", privacy, float) if privacy is not None else [DEFAULT_PRIVACY],
        parse_list("agents", agents, int),
        parse_list("attack", attack, str),
    )
    configs: list[SimulationConfig] = []
    seen: set[str] = set()
    for algo_name, sub, eta_v, xi_v, beta_v, privacy_v, n, attack_v in grid:
        config = build_config(
            built.environment,
            built.activation,
            AlgorithmConfig(
                algorithm=algo_name,
                subroutine=sub,
                epsilon=epsilon,
                delta=delta,
                eta=default_eta(algo_name) if eta_v is None else eta_v,
                xi=xi_v if algo_name == "ce" else 0.0,
                dp_epsilon=dp_epsilon,
                beta=beta_v,
                phi=phi,
                every_arm=pulls == "every-arm",
                tolerance=tolerance,
                privacy=privacy_v if algo_name == "cde" else DEFAULT_PRIVACY,
            ),
            n,
            stop,
            budget,
            attackers,
            attack_v,
            exact_local_error,
        )
        label = point_label(config.algorithm, n, config.attackers, config.attack)
        if label not in seen:  # e.g. a list of xi or privacy with DE: one point
            seen.add(label)
            configs.append(config)
    points = []
    for config in configs:
        label = point_label(config.algorithm, config.n_agents, config.attackers, config.attack)
        sys.stderr.write(f"auditing {label}\n")
        points.append(run_point(config, trials, training_trials, seed, engine, workers))
    if as_json:
        document = points[0] if len(points) == 1 else {"points": points}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    print_points(points, f"dexp audit votes: {name}, {trials} trials per point, seed {seed}")


def build_config(
    env: Environment,
    activation: Activation,
    algo: AlgorithmConfig,
    n_agents: int,
    stop: str,
    budget: int,
    attackers: int = 0,
    attack: str = "fixed",
    exact_local_error: bool = False,
) -> SimulationConfig:
    if algo.algorithm not in AUDITED:
        raise ParameterError("algorithm", algo.algorithm, f"must be one of {', '.join(AUDITED)}")
    if n_agents < 1:
        raise ParameterError("agents", n_agents, "must be >= 1")
    return SimulationConfig(
        environment=env,
        algorithm=algo,
        n_agents=n_agents,
        activation=activation,
        stop=stop,
        budget=budget,
        attackers=attackers,
        attack=attack if algo.reports else "fixed",  # a sweep's voting points: their one attack
        exact_local_error=exact_local_error and algo.reports,
    )
