"""The `dexp` command: `dexp simulate` runs seeded trials of one configuration, `dexp reproduce`
runs one of the papers' experiments and writes CSV files and figures, `dexp tickets issue` asks a
coordinator for enrollment tickets (dexp/admin.py).

Bad arguments exit with status 2 and one line on stderr (`error: eta=1.5 is invalid: ...`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from typer.core import TyperGroup

from common.algorithms import ALGORITHMS, USER_SUBROUTINES, AlgorithmConfig
from common.cde import DEFAULT_PRIVACY
from common.certificate import REPORTS, VOTES, Certificate, certify_simulation
from common.environments import build_problem
from common.errors import ParameterError
from common.hillel import HILLEL_ALGORITHMS, HillelConfig
from common.params import REWARD_FAMILIES
from common.privacy import certified_epsilon, hit_rate_uniform_prior, privacy_statement
from common.rounding import upper
from common.simulation import ENGINES, SimulationConfig, TrialResult, run_trials, summarize
from common.simulation.config import ATTACKS, DEFAULT_BUDGET
from common.simulation.runner import simulation_warnings
from common.stats import describe, proportion_interval
from dexp.admin import AdminError, tickets_app
from dexp.audit import audit_app
from dexp.dubey import DEFAULT_TRIALS as DUBEY_TRIALS
from dexp.dubey import DUBEY_EXPERIMENTS, regret_app
from dexp.engines import EngineUnavailable, check_engine, trial_function
from dexp.manage import experiments_app
from dexp.options import (
    DEFAULT_PROBLEM,
    PRIVACY_HELP,
    ActivationOption,
    AttackOption,
    BudgetOption,
    DeclareOption,
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
from dexp.plan import plan
from dexp.watch import watch

PULLS = ("one", "every-arm")
CDE_STOP_HELP = {
    "all-agents": "an arm has M reports, or none can get them; agents keep being activated after "
    "reporting (Feraud et al.)",
    "global": "an arm has M reports, or none can get them; agents retire once they reported (Rio "
    "et al.)",
}
STOP_HELP = {
    "all-agents": "every agent holds one arm that is still in the global set (Feraud et al.)",
    "global": "the global set has one arm; agents with one local arm retire (Rio et al.)",
}


def _fail(message: str, code: int = 2, prefix: str = "error") -> NoReturn:
    """One line on stderr, then exit."""
    line = " ".join(message.split())
    sys.stderr.write(f"{prefix}: {line}\n")
    sys.stderr.flush()
    sys.exit(code)


# typer >= 0.2x vendors click (typer._click), older typer uses click itself: find the classes
# through a public exception rather than importing either.
_CLICK_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)
_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


class UsageProblem(Exception):
    """A usage error found by a command itself; the message is printed as it is."""


class DexpGroup(TyperGroup):
    """Reports every error as one line: click's usage errors, ParameterError, a missing engine."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name or "dexp", complete_var, False, **extra)
        except _USAGE_ERROR as err:
            ctx = getattr(err, "ctx", None)
            if type(err).__name__ == "NoArgsIsHelpError":  # `dexp` alone: typer printed the help
                sys.exit(2)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            _fail(err.format_message() + hint, getattr(err, "exit_code", 2))  # type: ignore[attr-defined]
        except _CLICK_ERROR as err:
            _fail(err.format_message(), getattr(err, "exit_code", 1))  # type: ignore[attr-defined]
        except typer.Abort:
            _fail("aborted", 1)
        except (ParameterError, UsageProblem) as err:
            _fail(str(err), 2)
        except EngineUnavailable as err:
            _fail(str(err), 1)
        except AdminError as err:  # the coordinator refused, or is unreachable
            _fail(str(err), 1, prefix=err.command)
        sys.exit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=DexpGroup,
    name="dexp",
    help="Private decentralized best-arm identification: simulate and reproduce experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _console(stderr: bool = False) -> Console:
    """Made per call, on the current sys.stdout/stderr; wide when not a terminal (logs, pipes)."""
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=stderr, highlight=False, width=160)
    return console


# ----------------------------------------------------------------------------- parsing


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


# ----------------------------------------------------------------------------- simulate


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=_console(stderr=True),
        transient=False,
    )


def _json_number(x: float) -> float | None:
    return x if math.isfinite(x) else None


def voted_out(result: TrialResult, best: int) -> bool:
    """Whether the best arm left the global set in the trial's last epoch: the event
    certified_failure bounds (common/certificate.py)."""
    return any(e.arm == best and e.epoch == result.resets for e in result.eliminations)


def summary_json(results: list[TrialResult], best: int | None = None) -> dict[str, Any]:
    """common.simulation.summarize, with sorted stop counts, a 95% CI on each mean and a 95%
    Wilson interval on the failure and tie rates; with the `best` arm, how often it was voted out
    (what certified_failure bounds), with its interval."""
    summary = summarize(results)
    if best is not None:
        out = sum(voted_out(r, best) for r in results)
        summary["best_arm_voted_out"] = out
        summary["best_arm_voted_out_rate"] = out / len(results)
        summary["best_arm_voted_out_ci95"] = list(proportion_interval(out, len(results)))
    summary["stopped_by"] = dict(sorted(summary["stopped_by"].items()))
    for metric in ("sample_complexity", "messages"):
        d = describe([getattr(r, metric) for r in results])
        summary[metric]["ci95"] = [d.ci95_low, d.ci95_high] if math.isfinite(d.ci95_low) else None
    for count in ("failures", "ties"):
        rate = "failure_rate" if count == "failures" else "tie_rate"
        summary[f"{rate}_ci95"] = list(proportion_interval(summary[count], len(results)))
    return summary


TIE_MEANING = (
    "tie: the votes can remove none of the remaining arms (the candidates). The best arm is "
    "among them unless M agents voted it out by error (at most the certified failure above, "
    "docs/SUBROUTINES.md) or another arm is within eps of it (then either may have been voted "
    "out without error); nothing is said about how they compare. best arm = the candidate with "
    "the fewest votes; correct = every candidate is eps-optimal."
)


def simulation_certificate(config: SimulationConfig, certificate: Certificate) -> str:
    """The certificate's sentence, and what it means on this simulated problem, whose means are
    known: whether another arm is within eps of the best (then the best arm can also leave without
    error, which the bound does not cover)."""
    statement = certificate.statement()
    if certificate.kind == REPORTS:
        return f"{statement} {_reports_here(config, certificate)}"
    if certificate.kind != VOTES or config.algorithm.algorithm == "dp-mase":
        return statement
    best, near = config.attacked_arm, _near_best(config)
    if near:
        arms = ", ".join(str(a) for a in near)
        return (
            f"{statement} Here arm {arms} is within epsilon of the best arm {best}: the best arm "
            "can also leave without error, which this does not bound."
        )
    return (
        f"{statement} Here no other arm is within epsilon of the best arm {best}: how often it is "
        "voted out (best arm voted out) must stay within the bound."
    )


def _near_best(config: SimulationConfig) -> list[int]:
    """The other arms within eps of the best arm (`attacked_arm`) at t = 0."""
    means = config.environment.means_at(0)
    best = config.attacked_arm
    bar = means[best] - config.algorithm.epsilon
    return [a for a in range(len(means)) if a != best and means[a] >= bar]


def _local_run(config: SimulationConfig) -> str:
    """CDE's local run in words: its pulls and activations, and the stress mode."""
    algo, k = config.algorithm, config.environment.n_arms
    per_arm = config.local_budget if algo.every_arm else config.local_budget // k
    run = f"{per_arm} pulls per arm, report at the agent's activation {config.local_budget:,}"
    if config.exact_local_error:
        return (
            f"{run}; stress mode: the local answer ignores the rewards, each arm that is not "
            f"eps-optimal with probability eta/(K-1) = {algo.eta / (k - 1):.4g}, the eps-optimal "
            "arms an even share of the rest"
        )
    return run


def _reports_here(config: SimulationConfig, certificate: Certificate) -> str:
    """CDE on a known instance: the whole bound applies to the failure rate, whatever the number
    of eps-optimal arms; it says how many there are."""
    best, near = config.attacked_arm, _near_best(config)
    rate = (
        "the failure rate (an answer that is not eps-optimal, or none) must stay within the bound"
    )
    if near:
        arms = ", ".join(str(a) for a in near)
        return (
            f"Here arm {arms} is within epsilon of the best arm {best} ({len(near) + 1} arms are "
            f"eps-optimal): {rate}, which holds whatever their number."
        )
    return f"Here no other arm is within epsilon of the best arm {best}: {rate}."


def check_cde_options(algorithm: str, privacy: float | None, exact_local_error: bool) -> None:
    """--privacy and --exact-local-error are CDE's: refused elsewhere, even at their defaults."""
    if algorithm == "cde":
        return
    if privacy is not None:
        raise ParameterError("privacy", privacy, "a privacy bound is for --algorithm cde only")
    if exact_local_error:
        raise ParameterError(
            "exact_local_error", True, "the stress mode of CDE's local runs: --algorithm cde only"
        )


def _warn(message: str) -> None:
    """One line on stderr; the exit status does not change."""
    sys.stderr.write(f"warning: {' '.join(message.split())}\n")
    sys.stderr.flush()


@app.command()
def simulate(
    problem: ProblemOption = None,
    means: MeansOption = None,
    rewards: RewardsOption = None,
    drift: DriftOption = None,
    agents: Annotated[int, typer.Option(help="Number of agents N.")] = 32,
    activation: ActivationOption = None,
    algorithm: Annotated[
        str, typer.Option(help=" | ".join((*ALGORITHMS, *HILLEL_ALGORITHMS)))
    ] = "de",
    subroutine: Annotated[str, typer.Option(help=" | ".join(USER_SUBROUTINES))] = "ser3",
    epsilon: Annotated[
        float, typer.Option(help="Target accuracy eps (hillel-*: 0 = the best arm).")
    ] = 0.25,
    delta: Annotated[float, typer.Option(help="Global failure probability.")] = 0.05,
    eta: Annotated[
        float | None,
        typer.Option(
            help="Local failure probability (DE, CE, CDE; default 0.9, cde 0.1). Certifies 1 - eta; a higher eta does not make votes reveal less (dexp audit votes)."
        ),
    ] = None,
    xi: Annotated[float, typer.Option(help="CE: probability of dropping a vote.")] = 0.0,
    dp_epsilon: Annotated[
        float,
        typer.Option(help="DP-MASE: eps_dp, the differential privacy of each agent's rewards."),
    ] = 0.1,
    beta: Annotated[float, typer.Option(help="DP-MASE: local failure probability.")] = 0.5,
    phi: PhiOption = 0.0,
    privacy: Annotated[
        float | None,
        typer.Option(help=f"{PRIVACY_HELP} (default {DEFAULT_PRIVACY:g})."),
    ] = None,
    exact_local_error: ExactLocalErrorOption = False,
    declare: DeclareOption = "bernoulli",
    tolerance: ToleranceOption = 0,
    attackers: Annotated[
        int,
        typer.Option(
            help="Byzantine agents: agents 0..A-1 vote against the best arm and nothing else "
            "(cde: report an arm that is not eps-optimal, as --attack says)."
        ),
    ] = 0,
    attack: AttackOption = "fixed",
    pulls: PullsOption = "one",
    stop: StopOption = "all-agents",
    budget: BudgetOption = DEFAULT_BUDGET,
    trials: Annotated[int, typer.Option(help="Number of trials.")] = 20,
    seed: Annotated[
        int, typer.Option(help="Seed; trial i uses SeedSequence(seed).spawn(T)[i].")
    ] = 0,
    horizon: Annotated[
        int | None,
        typer.Option(help="hillel-one-round: T, pulls per agent of one run (required)."),
    ] = None,
    repeats: Annotated[
        int | None,
        typer.Option(
            help="hillel-one-round: runs in parallel, majority answer (default from delta)."
        ),
    ] = None,
    max_time: Annotated[
        int | None, typer.Option(help="hillel-multi-round: most pulls per agent (default none).")
    ] = None,
    workers: WorkersOption = 1,
    engine: EngineOption = "fast",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object on stdout.")
    ] = False,
    per_trial: Annotated[
        bool | None,
        typer.Option(
            "--per-trial/--no-per-trial", help="Table of trials (default: when trials <= 30)."
        ),
    ] = None,
) -> None:
    """Run seeded trials of one configuration and report sample complexity, messages, failures
    and ties. Warnings (ties possible with N < 2M - 1; DSER4 resets faster than a run) go to
    stderr and leave the exit status alone."""
    # The parser the load generator uses too: a named problem, possibly with its means, rewards
    # or drift replaced, or a problem made of --means alone.
    name = problem if problem is not None or means is not None else DEFAULT_PROBLEM
    built = build_problem(name, means, rewards, drift, activation)
    env, act = built.environment, built.activation
    check_choice("pulls", pulls, PULLS)
    check_at_least("trials", trials, 1)
    check_at_least("workers", workers, 1)
    check_at_least("seed", seed, 0)
    check_at_least("agents", agents, 1)
    check_cde_options(algorithm, privacy, exact_local_error)
    check_choice("declare", declare, REWARD_FAMILIES)
    check_choice("attack", attack, ATTACKS)
    if algorithm in HILLEL_ALGORITHMS:
        _simulate_hillel(built, name, algorithm, agents, epsilon, delta, horizon, repeats,
                         max_time, trials, seed, as_json, per_trial)  # fmt: skip
        return
    for option, value in (("horizon", horizon), ("repeats", repeats), ("max_time", max_time)):
        if value is not None:
            raise ParameterError(option, value, "is for the hillel-* algorithms only")
    check_engine(engine)
    eta = default_eta(algorithm) if eta is None else eta
    algo = AlgorithmConfig(
        algorithm=algorithm,
        subroutine=subroutine,
        epsilon=epsilon,
        delta=delta,
        eta=eta,
        xi=xi,
        dp_epsilon=dp_epsilon,
        beta=beta,
        phi=phi,
        every_arm=pulls == "every-arm",
        tolerance=tolerance,
        privacy=DEFAULT_PRIVACY if privacy is None else privacy,
    )
    config = SimulationConfig(
        environment=env,
        algorithm=algo,
        n_agents=agents,
        activation=act,
        stop=stop,
        budget=budget,
        attackers=attackers,
        attack=attack,
        exact_local_error=exact_local_error,
        declare_bernoulli=declare == "bernoulli",
    )
    trial_function(engine)
    certificate = certify_simulation(config)
    epsilon_bound, hit_bound = certified_epsilon(config), hit_rate_uniform_prior(config)
    warnings = simulation_warnings(config, seed)
    uncertified = certificate.warning()  # certified failure above delta: what would certify it
    warnings += [uncertified] if uncertified else []
    for warning in warnings:
        _warn(warning)

    with _progress() as progress:
        label = algorithm if algo.reports else f"{algorithm}-{subroutine}"
        task = progress.add_task(f"{label} N={agents}", total=trials)
        results = run_trials(
            config,
            trials,
            seed=seed,
            engine=engine,
            workers=workers,
            on_trial=lambda _r: progress.advance(task),
        )

    config_json: dict[str, Any] = {
        "problem": name,  # the named problem, if any; the fields below are what ran
        "means": list(env.means),
        "rewards": env.rewards,
        "sigma": None if env.bounded else env.sigma,
        "drift": list(env.drift),
        "agents": agents,
        "activation": act.spec,
        "algorithm": algorithm,
        "subroutine": subroutine,
        "local_subroutine": algo.local_subroutine,
        "epsilon": epsilon,
        "delta": delta,
        "eta": eta,
        "xi": xi,
        "dp_epsilon": dp_epsilon,
        "beta": beta,
        "phi": phi,
        "privacy": algo.privacy if algo.reports else None,
        "declared_rewards": "bernoulli" if config.bernoulli else None,
        "pulls_per_arm": config.local_params().pulls,
        "exact_local_error": exact_local_error,
        "tolerance": tolerance,
        "attackers": attackers,
        "attack": attack,
        "pulls": pulls,
        "every_arm": algo.every_arm,
        "stop": stop,
        "budget": budget,
        "trials": trials,
        "seed": seed,
        "workers": workers,
        "engine": engine,
    }
    summary = summary_json(results, None if algo.reports else config.attacked_arm)
    statement = simulation_certificate(config, certificate)
    if as_json:
        document = {
            "config": config_json,
            "threshold": config.threshold,
            "certified_failure": certificate.failure,
            "certificate": statement,
            "certified_epsilon": None if epsilon_bound is None else round(epsilon_bound, 12),
            "hit_rate_uniform_prior": None if hit_bound is None else round(hit_bound, 12),
            "privacy_certificate": privacy_statement(config),
            "warnings": warnings,
            "trials": [r.to_json() for r in results],
            "summary": summary,
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    show_per_trial = trials <= 30 if per_trial is None else per_trial
    replaced = {
        "means": means is not None,
        "rewards": rewards is not None,
        "drift": drift is not None,
    }
    print_simulation(
        config,
        {**config_json, "replaced": replaced},
        results,
        summary,
        show_per_trial,
        (certificate.failure, statement),
    )


def _simulate_hillel(
    built: Any,
    name: str | None,
    algorithm: str,
    agents: int,
    epsilon: float,
    delta: float,
    horizon: int | None,
    repeats: int | None,
    max_time: int | None,
    trials: int,
    seed: int,
    as_json: bool,
    per_trial: bool | None,
) -> None:
    """Hillel et al.'s synchronous players (dexp/hillel.py): no activation process, no votes."""
    from dexp.hillel import simulate as simulate_hillel

    config = HillelConfig(
        environment=built.environment,
        algorithm=algorithm,
        n_agents=agents,
        epsilon=epsilon,
        delta=delta,
        horizon=horizon,
        repeats=repeats,
        max_time=max_time,
    )
    simulate_hillel(config, name, trials, seed, as_json, per_trial)


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def print_simulation(
    config: SimulationConfig,
    params: dict[str, Any],
    results: list[TrialResult],
    summary: dict[str, Any],
    per_trial: bool,
    certified: tuple[float, str] | None = None,
) -> None:
    out = _console()
    algo = config.algorithm
    env = config.environment
    table = Table(title="dexp simulate", show_header=False, title_justify="left")
    table.add_column("parameter", style="bold")
    table.add_column("value")
    means = ", ".join(f"{m:g}" for m in env.means)
    arms = f"{env.rewards}" + ("" if env.bounded else f" sigma={env.sigma:g}")
    replaced = [k for k in ("means", "rewards", "drift") if params["replaced"][k]]
    problem = params["problem"] or "(custom)"
    if params["problem"] and replaced:
        problem += f" with its {'/'.join(replaced)} replaced"
    table.add_row("problem", problem)
    table.add_row("arms", f"{env.n_arms} {arms}: {means}" + (" (drifting)" if env.drift else ""))
    table.add_row("agents N", str(config.n_agents))
    table.add_row("activation", config.activation.spec)
    table.add_row("algorithm", f"{algo.algorithm} with {algo.local_subroutine}")
    privacy = f"epsilon={algo.epsilon:g} delta={algo.delta:g} eta={algo.eta:g}"
    if algo.algorithm == "ce":
        privacy += f" xi={algo.xi:g}"
    if algo.algorithm == "dp-mase":
        privacy += f" dp_epsilon={algo.dp_epsilon:g} beta={algo.beta:g}"
    if algo.subroutine == "ser4":
        privacy += f" phi={algo.phi:g}"
    if algo.reports:
        privacy += f" privacy={algo.privacy:g}"
    table.add_row("parameters", privacy)
    table.add_row("pulls", params["pulls"])
    if algo.reports:
        table.add_row("local run", _local_run(config))
    base = algo.base_threshold(env.n_arms)
    if config.threshold is None:
        threshold = "none (no votes)"
    elif algo.reports:
        liars = f", f={algo.tolerance} of them may lie" if algo.tolerance else ""
        threshold = (
            f"{config.threshold} reports accept an arm (chosen from N={config.n_agents}{liars})"
        )
    elif algo.tolerance > 0:
        threshold = f"{config.threshold} (M={base} + tolerance f={algo.tolerance})"
    else:
        threshold = str(config.threshold)
    table.add_row("threshold M", threshold)
    byzantine = f"tolerance f={algo.tolerance}; attackers {config.attackers}"
    if config.attackers:
        last = config.attackers - 1
        who = "agent 0" if last == 0 else f"agents 0-{last}"
        if algo.reports and config.attack == "adaptive":
            byzantine += (
                f" ({who} wait until an arm that is not eps-optimal has M - "
                f"{config.attackers} honest reports, then all report it)"
            )
        elif algo.reports:
            byzantine += f" ({who} report arm {config.lie_arm} at once)"
        else:
            byzantine += f" ({who} vote against arm {config.attacked_arm} only)"
    table.add_row("byzantine", byzantine)
    stop_help = CDE_STOP_HELP if algo.reports else STOP_HELP
    table.add_row("stop rule", f"{config.stop}: {stop_help[config.stop]}")
    table.add_row(
        "trials", f"{params['trials']} (seed {params['seed']}, engine {params['engine']})"
    )
    out.print(table)

    # Suspects (agents that voted against the returned arm) are shown in a Byzantine setting.
    byzantine_run = config.attackers > 0 or algo.tolerance > 0
    any_tie = summary["ties"] > 0
    if per_trial:
        trials = Table(title="trials", title_justify="left")
        columns = ["trial", "sample complexity", "messages", "best arm", "correct", "stopped by"]
        if any_tie:
            columns.append("candidates")
        if byzantine_run:
            columns.append("suspects")
        for column in columns:
            trials.add_column(column, justify="right" if column != "stopped by" else "left")
        for i, r in enumerate(results):
            row = [
                str(i),
                f"{r.sample_complexity:,}",
                f"{r.messages:,}",
                str(r.best_arm),
                "yes" if r.correct else "[red]no[/red]",
                r.stopped_by,
            ]
            if any_tie:
                row.append(",".join(str(a) for a in r.candidates))
            if byzantine_run:
                row.append(str(len(r.suspects)))
            trials.add_row(*row)
        out.print(trials)

    table = Table(title=f"summary of {len(results)} trials", title_justify="left")
    for column in ("metric", "mean", "std", "95% CI"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for metric, label in (("sample_complexity", "sample complexity"), ("messages", "messages")):
        s = summary[metric]
        ci = s["ci95"]
        table.add_row(
            label,
            _fmt(s["mean"]),
            _fmt(s["std"]),
            f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "-",
        )
    if algo.vote_drop > 0:
        table.add_row("  of which settled", _fmt(summary["settled_messages"]), "", "")
    n = len(results)
    for label, rate, count in (
        ("failure rate", "failure_rate", "failures"),
        ("tie rate", "tie_rate", "ties"),
    ):
        low, high = summary[f"{rate}_ci95"]
        table.add_row(
            label, f"{summary[rate]:.3f}", "", f"[{low:.3f}, {high:.3f}] ({summary[count]}/{n})"
        )
    if certified is not None and "best_arm_voted_out" in summary:
        low, high = summary["best_arm_voted_out_ci95"]
        out_count = summary["best_arm_voted_out"]
        table.add_row(
            "best arm voted out",
            f"{summary['best_arm_voted_out_rate']:.3f}",
            "",
            f"[{low:.3f}, {high:.3f}] ({out_count}/{n})",
        )
        table.add_row("certified failure", upper(certified[0]), "", "at most (see below)")
    if certified is not None and algo.reports:
        table.add_row("certified failure", upper(certified[0]), "", "at most (see below)")
        e0, hit = certified_epsilon(config), hit_rate_uniform_prior(config)
        table.add_row("certified epsilon e0", upper(e0 or 0.0), "", "any prior (see below)")
        table.add_row("hit rate, uniform prior", upper(hit or 0.0), "", "at most (see below)")
    if any_tie:
        kept: dict[str, int] = {}
        for r in results:
            if r.stopped_by == "tie":
                key = "{" + ",".join(str(a) for a in r.candidates) + "}"
                kept[key] = kept.get(key, 0) + 1
        table.add_row(
            "tie candidates", ", ".join(f"{k} {v}" for k, v in sorted(kept.items())), "", ""
        )
    table.add_row(
        "stopped by", ", ".join(f"{k} {v}" for k, v in summary["stopped_by"].items()), "", ""
    )
    if byzantine_run:
        counts = [len(r.suspects) for r in results]
        caught = sum(set(range(config.attackers)) <= set(r.suspects) for r in results)
        table.add_row(
            "suspects",
            _fmt(sum(counts) / len(counts)),
            "",
            f"every attacker a suspect in {caught}/{len(results)}",
        )
    out.print(table)
    if certified is not None:
        out.print(f"certified failure: {certified[1]}")
    if algo.reports:
        out.print(f"certified epsilon: {privacy_statement(config)}")
    if any_tie:
        out.print(TIE_MEANING)


# ----------------------------------------------------------------------------- subroutines


@app.command()
def subroutines(
    json_output: Annotated[bool, typer.Option("--json", help="Print them as JSON.")] = False,
    widths: Annotated[
        bool,
        typer.Option(
            "--widths",
            help="Instead, print each confidence bound's half-widths (below / above the mean) "
            "for one arm of a [0, 1] problem, every arm with n samples.",
        ),
    ] = False,
    arms: Annotated[int, typer.Option(help="K, for --widths.")] = 10,
    eta: Annotated[float, typer.Option(help="Local failure probability, for --widths.")] = 0.9,
    failure_bounds: Annotated[
        bool,
        typer.Option(
            "--failure-bounds",
            help="Instead, print the proven local failure of lucb, ugapec and kl-lucb as a "
            "multiple of eta, by how the union bound is taken (docs/SUBROUTINES.md).",
        ),
    ] = False,
) -> None:
    """List the local subroutines an experiment may name (--subroutine, DEXP_SUBROUTINE, POST
    /v1/experiments): name, the reward models their bounds are valid for, what they do."""
    from common.subroutines import catalog

    if widths:
        _print_widths(arms, eta)
        return
    if failure_bounds:
        _print_failure_bounds()
        return
    entries = catalog()
    if json_output:
        print(json.dumps(entries, indent=2))
        return
    table = Table(title="subroutines (--subroutine NAME)", title_justify="left")
    for column in ("name", "rewards", "description", "reference"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        table.add_row(
            entry["name"], ", ".join(entry["rewards"]), entry["description"], entry["reference"]
        )
    _console().print(table)


def _print_failure_bounds() -> None:
    from common.subroutines.bounds import KL_LUCB_K1, explore_commit_failure

    table = Table(
        title="proven local failure / eta: exp(-level) summed over arms, sides and pull counts "
        "n (level at t = n), or over every time t and every n <= t",
        title_justify="left",
    )
    unions = (
        ("both sides, all t, n <= t", False, True),
        ("one side, all t, n <= t", True, True),
        ("both sides, all n", False, False),
        ("one side, all n (proof)", True, False),
    )
    table.add_column("rule")
    for label, _, _ in unions:
        table.add_column(label, justify="right")
    for label, name, k1 in (
        ("lucb", "lucb", KL_LUCB_K1),
        ("ugapec", "ugapec", KL_LUCB_K1),
        (f"kl-lucb, k1 = {KL_LUCB_K1:g}", "kl-lucb", KL_LUCB_K1),
        ("kl-lucb, k1 = 405.5 (before)", "kl-lucb", 405.5),
    ):
        cells = [f"{explore_commit_failure(name, one, times, k1):.3f}" for _, one, times in unions]
        table.add_row(label, *cells)
    _console().print(table)


def _print_widths(arms: int, eta: float) -> None:
    from common.subroutines.bounds import half_widths

    if arms < 2:
        raise ParameterError("arms", arms, "must be at least 2")
    if not 0 < eta < 1:
        raise ParameterError("eta", eta, "must be in (0, 1)")
    points = [(mean, n) for mean in (0.1, 0.5) for n in (50, 200, 1000)]
    table = Table(
        title=f"half-widths below / above the mean, K = {arms}, eta = {eta:g} "
        "(t = K n for the time-indexed rates)",
        title_justify="left",
    )
    table.add_column("bound")
    for mean, n in points:
        table.add_column(f"mean {mean:g}, n = {n}", justify="right")
    rows: dict[str, list[str]] = {}
    for mean, n in points:
        for name, (low, high) in half_widths(arms, eta, mean, n).items():
            cell = f"{high:.3f}" if abs(high - low) < 5e-4 else f"{low:.3f} / {high:.3f}"
            rows.setdefault(name, []).append(cell)
    for name, cells in rows.items():
        table.add_row(name, *cells)
    _console().print(table)


# ----------------------------------------------------------------------------- reproduce


def print_experiments() -> None:
    from dexp.experiments import EXPERIMENTS

    out = _console()
    table = Table(title="experiments (dexp reproduce NAME --out DIR)", title_justify="left")
    for column in ("name", "source", "problem", "N", "trials", "stop", "series"):
        table.add_column(column)
    for e in EXPERIMENTS.values():
        table.add_row(
            e.name,
            e.source,
            e.problem + (" every-arm" if e.every_arm else ""),
            ",".join(str(n) for n in e.agents),
            str(e.trials),
            e.stop,
            ", ".join(e.labels),
        )
    table.add_row(
        "privacy-frontier",
        "dexp audit votes per point",
        "feraud-1",
        "64",
        "20 (+20 training)",
        "all-agents",
        "DE, CE xi=0.1, DE at CE's M, DP-MASE eps_dp=0.1",
    )
    table.add_row(
        "hillel-speedup",
        "Hillel et al. NIPS 2013",
        "32 arms: 0.7, 0.5 x 31",
        "k = 1 .. 1024",
        "200",
        "synchronous",
        "one-round (smallest T at 2/3), multi-round (delta 0.05)",
    )
    for dubey_name, dubey_description in DUBEY_EXPERIMENTS.items():
        table.add_row(
            dubey_name,
            "Dubey & Pentland AAMAS 2020" if dubey_name != "dubey-liars" else "ours",
            dubey_description,
            "200",
            str(DUBEY_TRIALS[dubey_name]),
            "horizon T = 1000",
            "group regret",
        )
    out.print(table)


def print_reproduce_summary(rows: list[dict[str, Any]], title: str) -> None:
    out = _console()
    table = Table(title=title, title_justify="left")
    columns = ("series", "N", "M", "trials", "samples", "± 95% CI", "messages", "± 95% CI")
    privacy = any(r["certified_epsilon"] != "" for r in rows)  # CDE's e0 and hit-rate bound
    shown = {"certified_epsilon": "e0", "hit_rate_uniform_prior": "hit rate"} if privacy else {}
    for column in (*columns, "failures", "certified", *shown.values(), "stopped by"):
        table.add_column(
            column,
            justify="left" if column in ("series", "stopped by") else "right",
            no_wrap=column == "series",
        )
    for r in rows:
        cells = []
        for metric in ("sample_complexity", "messages"):
            lo, hi = r[f"{metric}_ci95_low"], r[f"{metric}_ci95_high"]
            cells += [_fmt(r[f"{metric}_mean"]), _fmt((hi - lo) / 2)]
        table.add_row(
            r["series"],
            str(r["n_agents"]),
            str(r["threshold"]) if r["threshold"] != "" else "-",
            str(r["trials"]),
            *cells,
            f"{r['failure_rate']:.2f}",
            upper(r["certified_failure"]),
            *(upper(r[key]) if r[key] != "" else "-" for key in shown),
            r["stopped_by"],
        )
    out.print(table)
    out.print(
        "failures: trials whose answer was not eps-optimal; certified: the probability bound on "
        "the best arm voted out by error for that configuration and N (docs/SUBROUTINES.md, "
        "section 3), a bound on failures when no other arm is within eps of the best."
        + (
            " CDE's certified failure bounds a wrong answer (docs/CDE.md); e0: its certified "
            "epsilon, for every prior (a report multiplies any adversary's odds about the agent's "
            "answer by at most e^e0); hit rate: how often an adversary with a uniform prior over "
            "which arm is best names an agent's eps-optimal arm, at most."
            if privacy
            else ""
        )
    )


def reproduce_privacy_frontier(
    out_dir: Path | None,
    trials: int | None,
    seed: int,
    workers: int,
    agents: str | None,
    engine: str,
    plots: bool,
) -> None:
    """The privacy frontier (dexp/privacy_frontier.py): a vote audit per (series, level)."""
    from dexp.privacy_frontier import DESCRIPTION, NAME, run_frontier

    if out_dir is None:
        raise UsageProblem("missing option --out DIR (the directory for the output files)")
    counts = parse_ints("agents", agents) if agents is not None else (64,)
    if len(counts) != 1:
        raise ParameterError("agents", agents, "the privacy frontier takes one agent count")
    check_engine(engine)
    n_trials = 20 if trials is None else check_at_least("trials", trials, 1)
    err = _console(stderr=True)
    outcome = run_frontier(
        out_dir,
        trials=n_trials,
        training_trials=n_trials,
        seed=seed,
        n_agents=counts[0],
        engine=engine,
        workers=workers,
        plots=plots,
        on_point=lambda label: err.print(f"auditing {label}"),
    )
    from dexp.audit_votes import print_points

    print_points(
        [{**p, "label": f"{p['series']} level={p['level']:g}"} for p in outcome.points],
        f"{NAME}: {DESCRIPTION}; N={counts[0]}, {n_trials} trials per point, seed {seed}",
    )
    _console().print(f"wrote {', '.join(str(f) for f in outcome.files)} in {outcome.elapsed:.1f} s")


def reproduce_dubey_experiment(
    name: str, out_dir: Path | None, trials: int | None, seed: int, plots: bool
) -> None:
    """Dubey & Pentland's Figure 1 and the liar-fraction experiment (dexp/dubey.py)."""
    from dexp.dubey import print_dubey, reproduce_dubey

    if out_dir is None:
        raise UsageProblem("missing option --out DIR (the directory for the output files)")
    if trials is not None:
        check_at_least("trials", trials, 2)
    err = _console(stderr=True)
    outcome = reproduce_dubey(name, out_dir, trials, seed, plots, on_point=err.print)
    print_dubey(name, outcome, seed)
    files = ", ".join(str(f) for f in outcome["files"])
    _console().print(f"wrote {files} in {outcome['elapsed']:.1f} s")


def reproduce_hillel_speedup(
    out_dir: Path | None, trials: int | None, seed: int, agents: str | None, plots: bool
) -> None:
    """Hillel et al.'s speed-up against k (dexp/hillel.py)."""
    from dexp.hillel import SPEEDUP_AGENTS, print_speedup, run_speedup

    if out_dir is None:
        raise UsageProblem("missing option --out DIR (the directory for the output files)")
    counts = parse_ints("agents", agents) if agents is not None else SPEEDUP_AGENTS
    n_trials = 200 if trials is None else check_at_least("trials", trials, 3)
    err = _console(stderr=True)
    outcome = run_speedup(
        out_dir, n_trials, seed, counts, plots, on_point=lambda label: err.print(label)
    )
    print_speedup(outcome, n_trials, seed)
    _console().print(
        f"wrote {', '.join(str(f) for f in outcome['files'])} in {outcome['elapsed']:.1f} s"
    )


@app.command()
def reproduce(
    name: Annotated[
        str | None, typer.Argument(help="Experiment name (see --list).", show_default=False)
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Directory for the CSV, PNG and JSON files.")
    ] = None,
    trials: Annotated[
        int | None, typer.Option(help="Trials per point (default: the experiment's).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed; every point uses the same trial seeds.")] = 0,
    workers: Annotated[int, typer.Option(help="Processes running trials.")] = 1,
    agents: Annotated[
        str | None, typer.Option(help="Agent counts, e.g. 32,64 (default: the experiment's).")
    ] = None,
    series: Annotated[
        list[str] | None,
        typer.Option(help="Run only this series (repeatable; default: all of them)."),
    ] = None,
    engine: Annotated[str, typer.Option(help=" | ".join(ENGINES))] = "fast",
    budget: Annotated[int, typer.Option(help="Most activations per trial.")] = DEFAULT_BUDGET,
    plots: Annotated[
        bool, typer.Option("--plots/--no-plots", help="Write the PNG figures.")
    ] = True,
    list_: Annotated[bool, typer.Option("--list", help="List the experiments and exit.")] = False,
) -> None:
    """Run one of the papers' experiments: NAME.csv, NAME_summary.csv, PNG figures in --out."""
    from dexp.experiments import experiment
    from dexp.reproduce import Point, run_experiment

    if list_:
        print_experiments()
        return
    if name is None:
        raise UsageProblem("missing experiment NAME (dexp reproduce --list shows them)")
    if name == "privacy-frontier":
        reproduce_privacy_frontier(out_dir, trials, seed, workers, agents, engine, plots)
        return
    if name == "hillel-speedup":
        reproduce_hillel_speedup(out_dir, trials, seed, agents, plots)
        return
    if name in DUBEY_EXPERIMENTS:
        reproduce_dubey_experiment(name, out_dir, trials, seed, plots)
        return
    exp = experiment(name)
    if out_dir is None:
        raise UsageProblem("missing option --out DIR (the directory for the output files)")
    agent_counts = parse_ints("agents", agents) if agents is not None else None
    check_engine(engine)
    check_at_least("budget", budget, 1)

    # The bar starts once every point is validated, so that a bad argument prints one line only.
    progress = _progress()
    tasks: dict[str, TaskID] = {}

    def on_start(points: list[Point]) -> None:
        progress.start()
        tasks["points"] = progress.add_task(f"{exp.name} (series, N)", total=len(points))
        tasks["trials"] = progress.add_task("trials", total=sum(len(p.results) for p in points))

    def on_trial(point: Point) -> None:
        label = f"trials: {point.series.label} N={point.n_agents}"
        progress.update(tasks["trials"], advance=1, description=label)

    def on_point(point: Point) -> None:
        progress.advance(tasks["points"])

    try:
        outcome = run_experiment(
            exp,
            out_dir,
            trials=trials,
            seed=seed,
            workers=workers,
            agents=agent_counts,
            series=series,
            engine=engine,
            budget=budget,
            plots=plots,
            on_start=on_start,
            on_trial=on_trial,
            on_point=on_point,
        )
    finally:
        if tasks:
            progress.stop()
    print_reproduce_summary(
        outcome.summary_rows(),
        f"{exp.name}: {exp.description} ({exp.source}); engine {engine}, seed {seed}",
    )
    _console().print(f"wrote {', '.join(str(f) for f in outcome.files)} in {outcome.elapsed:.1f} s")


@app.command()
def demo(
    problem: ProblemOption = None,
    means: MeansOption = None,
    rewards: RewardsOption = None,
    declare: DeclareOption = "bernoulli",
    drift: DriftOption = None,
    activation: ActivationOption = None,
    agents: Annotated[int, typer.Option(help="Agents in all (must reach the threshold M).")] = 32,
    processes: Annotated[int, typer.Option(help="Agent processes hosting them.")] = 2,
    algorithm: Annotated[str, typer.Option(help="de | ce | dp-mase | cde")] = "de",
    subroutine: Annotated[str, typer.Option(help=" | ".join(USER_SUBROUTINES))] = "ser3",
    epsilon: Annotated[float, typer.Option(help="Target accuracy.")] = 0.25,
    delta: Annotated[float, typer.Option(help="Global failure probability.")] = 0.05,
    eta: Annotated[
        float | None,
        typer.Option(
            help="Local failure probability (DE, CE); certifies 1 - eta, see dexp audit votes. "
            "Default 0.9; 0.1 for cde, whose certificate needs local runs better than a guess.",
            show_default=False,
        ),
    ] = None,
    xi: Annotated[float, typer.Option(help="CE: probability of dropping a vote.")] = 0.0,
    privacy: Annotated[
        float,
        typer.Option(help=f"{PRIVACY_HELP} (its threshold is chosen for --agents)."),
    ] = DEFAULT_PRIVACY,
    seed: Annotated[int | None, typer.Option(help="Seed of agents and environment.")] = None,
    rate: Annotated[
        float, typer.Option(help="Activations per second; 0: as fast as it goes.")
    ] = 0.0,
    max_seconds: Annotated[float, typer.Option(help="Give up after this long.")] = 600.0,
    coordinators: Annotated[
        int,
        typer.Option(
            help="Coordinator processes on the same Redis; the agents and the load generator get "
            "every URL and fail over (1 to 16)."
        ),
    ] = 1,
    redis_cluster: Annotated[
        int,
        typer.Option(
            help="0: one redis-server; N (3 to 16): a Redis Cluster of N masters (DEXP_REDIS_CLUSTER)."
        ),
    ] = 0,
    redis_replicas: Annotated[
        int, typer.Option(help="With --redis-cluster: replicas per master (0 to 2).")
    ] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    linger: Annotated[
        float,
        typer.Option(
            help="Keep the stack up this many seconds after the summary, so that its dashboard "
            "can be opened; Ctrl-C ends it early."
        ),
    ] = 0.0,
) -> None:
    """Run the whole system as local processes (redis-server, coordinator, agents, load generator)
    until the experiment ends: identified, or tied (several arms left that no agent can separate
    any more). The agents enroll with one-time tickets the demo issues (up to 10,000 agents from
    one machine). Exit status as the load generator's: 0 when the arm, or every tied candidate, is
    eps-optimal; 1 budget or deadline; 4 not eps-optimal; 5 stalled; and 7 when a process the demo
    started (redis, the coordinator, an agent process) exited during the run, or the agents stopped
    enrolling: it says which, with its exit status and the last lines of its log (logs kept). With
    several coordinators, one that exits while another runs is a warning line, not the end; with
    a Redis Cluster that has replicas, so is a node whose death the cluster heals within 15 s.
    The summary is printed while the stack still runs; with --linger it stays up that long."""
    from dexp.demo import DEMO_FAILED, DemoFailed, DemoSummary, format_demo_summary, run_demo
    from load_generator.generator import exit_code

    check_at_least("agents", agents, 1)
    check_at_least("processes", processes, 1)
    name = problem if problem is not None or means is not None else DEFAULT_PROBLEM

    def show(summary: DemoSummary) -> None:  # while the stack runs: its dashboard still answers
        print(format_demo_summary(summary, json_output), flush=True)

    try:
        config = AlgorithmConfig(
            algorithm=algorithm,
            subroutine=subroutine,
            epsilon=epsilon,
            delta=delta,
            eta=default_eta(algorithm) if eta is None else eta,
            xi=xi,
            privacy=privacy,
        )
        if algorithm not in ("de", "ce", "dp-mase", "cde"):
            raise ParameterError("algorithm", algorithm, "the services run de, ce, dp-mase or cde")
        summary = run_demo(
            name,
            config,
            agents,
            processes,
            seed=seed,
            rate=rate,
            max_seconds=max_seconds,
            means=means,
            rewards=rewards,
            declare=declare,
            drift=drift,
            activation=activation,
            coordinators=coordinators,
            redis_cluster=redis_cluster,
            redis_replicas=redis_replicas,
            linger=linger,
            on_summary=show,
        )
    except ParameterError as exc:
        _fail(str(exc))
    except DemoFailed as exc:
        sys.stderr.write("".join(f"{line}\n" for line in exc.details))
        if exc.logs is not None:
            sys.stderr.write(f"every process's log is kept in {exc.logs}\n")
        _fail(f"stopped: {exc}", DEMO_FAILED, prefix="dexp demo")
    except KeyboardInterrupt:  # every process it started is stopped on the way out
        _fail("interrupted; every process it started is stopped", 130, prefix="dexp demo")
    raise typer.Exit(exit_code(summary))


app.add_typer(tickets_app, name="tickets")
app.add_typer(experiments_app, name="experiments")
app.command("watch")(watch)
app.command("plan")(plan)
app.add_typer(audit_app, name="audit")
app.add_typer(regret_app, name="regret")


def main() -> None:
    app(prog_name="dexp")


if __name__ == "__main__":
    main()
