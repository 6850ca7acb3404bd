"""The commands of `dexp` that dexp/cli.py loads from here when they run or show their help:
`dexp subroutines`, `dexp reproduce` (one of the papers' experiments: CSV files and figures) and
`dexp demo` (the whole system as local processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import (
    TaskID,
)
from rich.table import Table

from common.algorithms import USER_SUBROUTINES, AlgorithmConfig, default_dp_epsilon
from common.cde import DEFAULT_PRIVACY
from common.errors import ParameterError
from common.rounding import upper
from common.simulation import ENGINES
from common.simulation.config import DEFAULT_BUDGET
from dexp.choices import PRIVACY_HELP
from dexp.cli import UsageProblem, _fail
from dexp.dubey import DEFAULT_TRIALS as DUBEY_TRIALS
from dexp.dubey import DUBEY_EXPERIMENTS
from dexp.engines import check_engine
from dexp.options import (
    DEFAULT_PROBLEM,
    ActivationOption,
    DeclareOption,
    DriftOption,
    MeansOption,
    ProblemOption,
    RewardsOption,
    check_at_least,
    default_eta,
    parse_ints,
)
from dexp.terminal import console, fmt, progress

# `dexp demo --algorithm ldp`: simulated users who visit once each; Problem 1 at dp_epsilon 1 is
# identified after about 1,050 reports (docs/RESULTS.md, section 12), so about three times that
LDP_DEMO_AGENTS = 3_000


# ----------------------------------------------------------------------------- subroutines


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
    console().print(table)


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
    console().print(table)


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
    console().print(table)


# ----------------------------------------------------------------------------- reproduce


def print_experiments() -> None:
    from dexp.experiments import EXPERIMENTS

    out = console()
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
    out = console()
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
            cells += [fmt(r[f"{metric}_mean"]), fmt((hi - lo) / 2)]
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
    err = console(stderr=True)
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
    console().print(f"wrote {', '.join(str(f) for f in outcome.files)} in {outcome.elapsed:.1f} s")


def reproduce_dubey_experiment(
    name: str, out_dir: Path | None, trials: int | None, seed: int, plots: bool
) -> None:
    """Dubey & Pentland's Figure 1 and the liar-fraction experiment (dexp/dubey.py)."""
    from dexp.dubey import print_dubey, reproduce_dubey

    if out_dir is None:
        raise UsageProblem("missing option --out DIR (the directory for the output files)")
    if trials is not None:
        check_at_least("trials", trials, 2)
    err = console(stderr=True)
    outcome = reproduce_dubey(name, out_dir, trials, seed, plots, on_point=err.print)
    print_dubey(name, outcome, seed)
    files = ", ".join(str(f) for f in outcome["files"])
    console().print(f"wrote {files} in {outcome['elapsed']:.1f} s")


def reproduce_hillel_speedup(
    out_dir: Path | None, trials: int | None, seed: int, agents: str | None, plots: bool
) -> None:
    """Hillel et al.'s speed-up against k (dexp/hillel.py)."""
    from dexp.hillel import SPEEDUP_AGENTS, print_speedup, run_speedup

    if out_dir is None:
        raise UsageProblem("missing option --out DIR (the directory for the output files)")
    counts = parse_ints("agents", agents) if agents is not None else SPEEDUP_AGENTS
    n_trials = 200 if trials is None else check_at_least("trials", trials, 3)
    err = console(stderr=True)
    outcome = run_speedup(
        out_dir, n_trials, seed, counts, plots, on_point=lambda label: err.print(label)
    )
    print_speedup(outcome, n_trials, seed)
    console().print(
        f"wrote {', '.join(str(f) for f in outcome['files'])} in {outcome['elapsed']:.1f} s"
    )


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
    bar = progress()
    tasks: dict[str, TaskID] = {}

    def on_start(points: list[Point]) -> None:
        bar.start()
        tasks["points"] = bar.add_task(f"{exp.name} (series, N)", total=len(points))
        tasks["trials"] = bar.add_task("trials", total=sum(len(p.results) for p in points))

    def on_trial(point: Point) -> None:
        label = f"trials: {point.series.label} N={point.n_agents}"
        bar.update(tasks["trials"], advance=1, description=label)

    def on_point(point: Point) -> None:
        bar.advance(tasks["points"])

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
            bar.stop()
    print_reproduce_summary(
        outcome.summary_rows(),
        f"{exp.name}: {exp.description} ({exp.source}); engine {engine}, seed {seed}",
    )
    console().print(f"wrote {', '.join(str(f) for f in outcome.files)} in {outcome.elapsed:.1f} s")


def demo(
    problem: ProblemOption = None,
    means: MeansOption = None,
    rewards: RewardsOption = None,
    declare: DeclareOption = "bernoulli",
    drift: DriftOption = None,
    activation: ActivationOption = None,
    agents: Annotated[
        int | None,
        typer.Option(
            help="Agents in all (must reach the threshold M). Default 32; ldp: "
            f"{LDP_DEMO_AGENTS:,}, simulated users who visit once each (B times with "
            "--reports-per-agent B).",
            show_default=False,
        ),
    ] = None,
    processes: Annotated[int, typer.Option(help="Agent processes hosting them.")] = 2,
    algorithm: Annotated[str, typer.Option(help="de | ce | dp-mase | cde | ldp")] = "de",
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
    dp_epsilon: Annotated[
        float | None,
        typer.Option(
            help="DP-MASE: the privacy of each agent's rewards (default 0.1); ldp: of each "
            "report (default 1).",
            show_default=False,
        ),
    ] = None,
    reports_per_agent: Annotated[
        int | None,
        typer.Option(
            help="ldp only: B, the private reports of one agent (default 1); each simulated user "
            "visits B times.",
            show_default=False,
        ),
    ] = None,
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

    if agents is None:
        agents = LDP_DEMO_AGENTS if algorithm == "ldp" else 32
    check_at_least("agents", agents, 1)
    check_at_least("processes", processes, 1)
    if reports_per_agent is not None and algorithm != "ldp":
        _fail(f"--reports-per-agent is for --algorithm ldp only (not {algorithm})")
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
            dp_epsilon=default_dp_epsilon(algorithm) if dp_epsilon is None else dp_epsilon,
            reports_per_agent=1 if reports_per_agent is None else reports_per_agent,
        )
        if algorithm not in ("de", "ce", "dp-mase", "cde", "ldp"):
            raise ParameterError(
                "algorithm", algorithm, "the services run de, ce, dp-mase, cde or ldp"
            )
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
