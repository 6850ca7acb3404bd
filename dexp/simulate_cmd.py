"""`dexp simulate`: seeded trials of one configuration, in named steps: check the options, build
the configuration, warn, run the trials under a progress bar, then print one JSON document or the
tables (parameters, trials, summary) and the certificate's sentences."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, replace
from typing import Annotated, Any

import typer
from rich.table import Table

from common.algorithms import (
    ALGORITHMS,
    HILLEL_ALGORITHMS,
    USER_SUBROUTINES,
    AlgorithmConfig,
    default_dp_epsilon,
)
from common.cde import DEFAULT_PRIVACY
from common.certificate import REPORTS, VOTES, Certificate, certify_simulation
from common.environments import Problem, build_problem
from common.errors import ParameterError
from common.ldp import DEFAULT_DP_EPSILON, DEFAULT_REPORTS_PER_AGENT, check_reports_per_agent
from common.params import REWARD_FAMILIES
from common.privacy import certified_epsilon, hit_rate_uniform_prior, privacy_statement
from common.rounding import upper
from common.simulation import SimulationConfig, TrialResult, run_trials, summarize
from common.simulation.config import ATTACKS, DEFAULT_BUDGET, estimates_json, lift_json
from common.simulation.runner import simulation_warnings
from common.stats import describe, proportion_interval
from dexp.choices import PRIVACY_HELP
from dexp.engines import check_engine, trial_function
from dexp.options import (
    DEFAULT_PROBLEM,
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
    check_at_least,
    check_choice,
    default_eta,
)
from dexp.terminal import console, fmt, progress, warn

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

# The options of `simulate` alone (the shared ones are in dexp/options.py).
AgentsOption = Annotated[int, typer.Option(help="Number of agents N.")]
AlgorithmOption = Annotated[str, typer.Option(help=" | ".join((*ALGORITHMS, *HILLEL_ALGORITHMS)))]
SubroutineOption = Annotated[str, typer.Option(help=" | ".join(USER_SUBROUTINES))]
EpsilonOption = Annotated[
    float, typer.Option(help="Target accuracy eps (hillel-*: 0 = the best arm).")
]
DeltaOption = Annotated[float, typer.Option(help="Global failure probability.")]
EtaOption = Annotated[
    float | None,
    typer.Option(
        help="Local failure probability (DE, CE, CDE; default 0.9, cde 0.1). Certifies 1 - eta; a higher eta does not make votes reveal less (dexp audit votes)."
    ),
]
XiOption = Annotated[float, typer.Option(help="CE: probability of dropping a vote.")]
DpEpsilonOption = Annotated[
    float | None,
    typer.Option(
        help="DP-MASE: eps_dp, the differential privacy of each agent's rewards (default 0.1); "
        f"ldp: each report's local privacy (default {DEFAULT_DP_EPSILON:g})."
    ),
]
ReportsPerAgentOption = Annotated[
    int | None,
    typer.Option(
        help=f"ldp: B, the reports one agent may send (default {DEFAULT_REPORTS_PER_AGENT}); "
        "its privacy over its whole history is B * dp_epsilon."
    ),
]
BetaOption = Annotated[float, typer.Option(help="DP-MASE: local failure probability.")]
PrivacyOption = Annotated[
    float | None,
    typer.Option(help=f"{PRIVACY_HELP} (default {DEFAULT_PRIVACY:g})."),
]
AttackersOption = Annotated[
    int,
    typer.Option(
        help="Byzantine agents: agents 0..A-1 vote against the best arm and nothing else "
        "(cde: report an arm that is not eps-optimal, as --attack says)."
    ),
]
TrialsOption = Annotated[int, typer.Option(help="Number of trials.")]
SeedOption = Annotated[int, typer.Option(help="Seed; trial i uses SeedSequence(seed).spawn(T)[i].")]
HorizonOption = Annotated[
    int | None,
    typer.Option(help="hillel-one-round: T, pulls per agent of one run (required)."),
]
RepeatsOption = Annotated[
    int | None,
    typer.Option(help="hillel-one-round: runs in parallel, majority answer (default from delta)."),
]
MaxTimeOption = Annotated[
    int | None, typer.Option(help="hillel-multi-round: most pulls per agent (default none).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
PerTrialOption = Annotated[
    bool | None,
    typer.Option(
        "--per-trial/--no-per-trial", help="Table of trials (default: when trials <= 30)."
    ),
]


@dataclass(frozen=True)
class SimulateOptions:
    """What `dexp simulate` was given, as typed: the steps below read it, and the JSON document's
    "config" repeats it."""

    problem: str | None
    means: str | None
    rewards: str | None
    drift: str | None
    agents: int
    activation: str | None
    algorithm: str
    subroutine: str
    epsilon: float
    delta: float
    eta: float | None
    xi: float
    dp_epsilon: float | None
    reports_per_agent: int | None
    beta: float
    phi: float
    privacy: float | None
    exact_local_error: bool
    declare: str
    tolerance: int
    attackers: int
    attack: str
    pulls: str
    stop: str
    budget: int
    trials: int
    seed: int
    horizon: int | None
    repeats: int | None
    max_time: int | None
    workers: int
    engine: str
    as_json: bool
    per_trial: bool | None

    @property
    def name(self) -> str | None:
        """The named problem: the one given, none for --means alone, else the default."""
        return (
            self.problem if self.problem is not None or self.means is not None else DEFAULT_PROBLEM
        )


def simulate(
    problem: ProblemOption = None,
    means: MeansOption = None,
    rewards: RewardsOption = None,
    drift: DriftOption = None,
    agents: AgentsOption = 32,
    activation: ActivationOption = None,
    algorithm: AlgorithmOption = "de",
    subroutine: SubroutineOption = "ser3",
    epsilon: EpsilonOption = 0.25,
    delta: DeltaOption = 0.05,
    eta: EtaOption = None,
    xi: XiOption = 0.0,
    dp_epsilon: DpEpsilonOption = None,
    reports_per_agent: ReportsPerAgentOption = None,
    beta: BetaOption = 0.5,
    phi: PhiOption = 0.0,
    privacy: PrivacyOption = None,
    exact_local_error: ExactLocalErrorOption = False,
    declare: DeclareOption = "bernoulli",
    tolerance: ToleranceOption = 0,
    attackers: AttackersOption = 0,
    attack: AttackOption = "fixed",
    pulls: PullsOption = "one",
    stop: StopOption = "all-agents",
    budget: BudgetOption = DEFAULT_BUDGET,
    trials: TrialsOption = 20,
    seed: SeedOption = 0,
    horizon: HorizonOption = None,
    repeats: RepeatsOption = None,
    max_time: MaxTimeOption = None,
    workers: WorkersOption = 1,
    engine: EngineOption = "fast",
    as_json: JsonOption = False,
    per_trial: PerTrialOption = None,
) -> None:
    """Run seeded trials of one configuration and report sample complexity, messages, failures
    and ties. Warnings (ties possible with N < 2M - 1; DSER4 resets faster than a run) go to
    stderr and leave the exit status alone."""
    run_simulate(SimulateOptions(**locals()))


def run_simulate(options: SimulateOptions) -> None:
    """The steps of `dexp simulate`, in order."""
    # The parser the load generator uses too: a named problem, possibly with its means, rewards
    # or drift replaced, or a problem made of --means alone.
    built = build_problem(
        options.name, options.means, options.rewards, options.drift, options.activation
    )
    check_options(options)
    if options.algorithm in HILLEL_ALGORITHMS:
        simulate_hillel(built, options)
        return
    for option, value in (
        ("horizon", options.horizon),
        ("repeats", options.repeats),
        ("max_time", options.max_time),
    ):
        if value is not None:
            raise ParameterError(option, value, "is for the hillel-* algorithms only")
    check_engine(options.engine)
    eta = default_eta(options.algorithm) if options.eta is None else options.eta
    options = replace(options, eta=eta)
    config = simulation_config(options, built)
    trial_function(options.engine)
    certificate = certify_simulation(config)
    epsilon_bound, hit_bound = certified_epsilon(config), hit_rate_uniform_prior(config)
    warnings = announce_warnings(config, certificate, options.seed)
    results = run_with_progress(config, options)
    best = None if config.algorithm.reports or config.algorithm.crowd else config.attacked_arm
    summary = summary_json(results, best)
    if config.algorithm.crowd:
        summary.update(crowd_summary(config, results, summary))
    statement = simulation_certificate(config, certificate)
    if options.as_json:
        document = {
            "config": config_json(config, options),
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
    show_per_trial = options.trials <= 30 if options.per_trial is None else options.per_trial
    replaced = {
        "means": options.means is not None,
        "rewards": options.rewards is not None,
        "drift": options.drift is not None,
    }
    print_simulation(
        config,
        {**config_json(config, options), "replaced": replaced},
        results,
        summary,
        show_per_trial,
        (certificate.failure, statement),
    )


def check_options(options: SimulateOptions) -> None:
    """The checks every algorithm's run needs, in the order their errors are reported."""
    check_choice("pulls", options.pulls, PULLS)
    check_at_least("trials", options.trials, 1)
    check_at_least("workers", options.workers, 1)
    check_at_least("seed", options.seed, 0)
    check_at_least("agents", options.agents, 1)
    check_cde_options(options.algorithm, options.privacy, options.exact_local_error)
    check_ldp_options(options.algorithm, options.reports_per_agent)
    check_choice("declare", options.declare, REWARD_FAMILIES)
    check_choice("attack", options.attack, ATTACKS)


def simulation_config(options: SimulateOptions, built: Problem) -> SimulationConfig:
    """The algorithm and the simulated experiment the options describe (eta already set)."""
    assert options.eta is not None
    algo = AlgorithmConfig(
        algorithm=options.algorithm,
        subroutine=options.subroutine,
        epsilon=options.epsilon,
        delta=options.delta,
        eta=options.eta,
        xi=options.xi,
        dp_epsilon=dp_epsilon_for(options.algorithm, options.dp_epsilon),
        beta=options.beta,
        phi=options.phi,
        every_arm=options.pulls == "every-arm",
        tolerance=options.tolerance,
        privacy=DEFAULT_PRIVACY if options.privacy is None else options.privacy,
        reports_per_agent=(
            DEFAULT_REPORTS_PER_AGENT
            if options.reports_per_agent is None
            else options.reports_per_agent
        ),
    )
    return SimulationConfig(
        environment=built.environment,
        algorithm=algo,
        n_agents=options.agents,
        activation=built.activation,
        stop=options.stop,
        budget=options.budget,
        attackers=options.attackers,
        attack=options.attack,
        exact_local_error=options.exact_local_error,
        declare_bernoulli=options.declare == "bernoulli",
    )


def announce_warnings(config: SimulationConfig, certificate: Certificate, seed: int) -> list[str]:
    """The run's warnings on stderr, the certificate's own last (what would certify delta)."""
    warnings = simulation_warnings(config, seed)
    uncertified = certificate.warning()  # certified failure above delta: what would certify it
    warnings += [uncertified] if uncertified else []
    for warning in warnings:
        warn(warning)
    return warnings


def run_with_progress(config: SimulationConfig, options: SimulateOptions) -> list[TrialResult]:
    with progress() as bar:
        algorithm, subroutine = options.algorithm, options.subroutine
        plain = config.algorithm.reports or config.algorithm.crowd  # no local subroutine to name
        label = algorithm if plain else f"{algorithm}-{subroutine}"
        task = bar.add_task(f"{label} N={options.agents}", total=options.trials)
        return run_trials(
            config,
            options.trials,
            seed=options.seed,
            engine=options.engine,
            workers=options.workers,
            on_trial=lambda _r: bar.advance(task),
        )


def config_json(config: SimulationConfig, options: SimulateOptions) -> dict[str, Any]:
    """The document's "config": the named problem, if any; the fields after it are what ran."""
    env, algo = config.environment, config.algorithm
    return {
        "problem": options.name,
        "means": list(env.means),
        "rewards": env.rewards,
        "sigma": None if env.bounded else env.sigma,
        "drift": list(env.drift),
        "agents": options.agents,
        "activation": config.activation.spec,
        "algorithm": options.algorithm,
        "subroutine": options.subroutine,
        "local_subroutine": algo.local_subroutine,
        "epsilon": options.epsilon,
        "delta": options.delta,
        "eta": options.eta,
        "xi": options.xi,
        "dp_epsilon": algo.dp_epsilon,
        "reports_per_agent": algo.reports_per_agent,
        "user_privacy": algo.user_privacy,
        "reward_range": _reward_range(config),
        "beta": options.beta,
        "phi": options.phi,
        "privacy": algo.privacy if algo.reports else None,
        "declared_rewards": "bernoulli" if config.bernoulli else None,
        "pulls_per_arm": config.local_params().pulls,
        "exact_local_error": options.exact_local_error,
        "tolerance": options.tolerance,
        "attackers": options.attackers,
        "attack": options.attack,
        "pulls": options.pulls,
        "every_arm": algo.every_arm,
        "stop": options.stop,
        "budget": options.budget,
        "trials": options.trials,
        "seed": options.seed,
        "workers": options.workers,
        "engine": options.engine,
    }


def _reward_range(config: SimulationConfig) -> list[float] | None:
    """LDP: the range rewards are clipped to before they are privatized; None elsewhere."""
    if not config.algorithm.crowd:
        return None
    from common.simulation.ldp import reward_range  # numpy only; loaded when ldp runs

    scale = reward_range(config)
    return [scale.low, scale.high]


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


def dp_epsilon_for(algorithm: str, dp_epsilon: float | None) -> float:
    """--dp-epsilon as given, else the algorithm's default (common.algorithms)."""
    return default_dp_epsilon(algorithm) if dp_epsilon is None else dp_epsilon


def check_ldp_options(algorithm: str, reports_per_agent: int | None) -> None:
    """--reports-per-agent is LDP's: refused elsewhere, even at its default."""
    if reports_per_agent is None:
        return
    if algorithm != "ldp":
        raise ParameterError(
            "reports_per_agent", reports_per_agent, "reports per agent are for --algorithm ldp only"
        )
    check_reports_per_agent(reports_per_agent)


def crowd_summary(
    config: SimulationConfig, results: list[TrialResult], summary: dict[str, Any]
) -> dict[str, Any]:
    """LDP: activations and reports (the summary's sample complexity and messages, named as the
    mode says them), the runs that spent every report, the privacy of one agent, the range its
    rewards are clipped to, and what the coordinator knew at the end of the first trial."""
    algo, first = config.algorithm, results[0]
    return {
        "activations": summary["sample_complexity"],
        "reports": summary["messages"],
        "exhausted": sum(r.stopped_by == "exhausted" for r in results),
        "user_privacy": algo.user_privacy,
        "reward_range": _reward_range(config),
        "first_trial": {
            "best_arm": first.best_arm,
            "stopped_by": first.stopped_by,
            "estimates": estimates_json(first.estimates or ()),
            "lift": lift_json(first.lift or ()),
        },
    }


def simulate_hillel(built: Problem, options: SimulateOptions) -> None:
    """Hillel et al.'s synchronous players (dexp/hillel.py): no activation process, no votes."""
    from common.hillel import HillelConfig  # numba: loaded by the command that runs it
    from dexp.hillel import simulate as simulate_hillel

    config = HillelConfig(
        environment=built.environment,
        algorithm=options.algorithm,
        n_agents=options.agents,
        epsilon=options.epsilon,
        delta=options.delta,
        horizon=options.horizon,
        repeats=options.repeats,
        max_time=options.max_time,
    )
    simulate_hillel(
        config, options.name, options.trials, options.seed, options.as_json, options.per_trial
    )


# ----------------------------------------------------------------------------- the tables


def print_simulation(
    config: SimulationConfig,
    params: dict[str, Any],
    results: list[TrialResult],
    summary: dict[str, Any],
    per_trial: bool,
    certified: tuple[float, str] | None = None,
) -> None:
    """The parameters, the trials (per_trial), the summary, then the certificate's sentences."""
    out = console()
    algo = config.algorithm
    out.print(parameters_table(config, params))
    # Suspects (agents that voted against the returned arm) are shown in a Byzantine setting
    # (not LDP's: a report names no arm against the answer, and nothing is counted per agent).
    byzantine_run = (config.attackers > 0 or algo.tolerance > 0) and not algo.crowd
    any_tie = summary["ties"] > 0
    if per_trial:
        out.print(trials_table(results, any_tie, byzantine_run))
    out.print(summary_table(config, results, summary, certified, byzantine_run))
    if certified is not None:
        out.print(f"certified failure: {certified[1]}")
    if algo.reports:
        out.print(f"certified epsilon: {privacy_statement(config)}")
    if algo.crowd:
        out.print(crowd_table(summary["first_trial"]))
    if any_tie:
        out.print(TIE_MEANING)


def parameters_table(config: SimulationConfig, params: dict[str, Any]) -> Table:
    algo = config.algorithm
    env = config.environment
    table = Table(title="dexp simulate", show_header=False, title_justify="left")
    table.add_column("parameter", style="bold")
    table.add_column("value")
    means = ", ".join(f"{m:g}" for m in env.means)
    arms = f"{env.rewards}" + ("" if env.bounded else f" sigma={env.sigma:g}")
    table.add_row("problem", _problem_text(params))
    table.add_row("arms", f"{env.n_arms} {arms}: {means}" + (" (drifting)" if env.drift else ""))
    table.add_row("agents N", str(config.n_agents))
    table.add_row("activation", config.activation.spec)
    if algo.crowd:
        table.add_row("algorithm", "ldp: agents send private reports, the coordinator decides")
    else:
        table.add_row("algorithm", f"{algo.algorithm} with {algo.local_subroutine}")
    table.add_row("parameters", _parameters_text(algo))
    if not algo.crowd:
        table.add_row("pulls", params["pulls"])
    if algo.reports:
        table.add_row("local run", _local_run(config))
    if algo.crowd:
        table.add_row("reports", _reports_text(config, params))
    else:
        table.add_row("threshold M", _threshold_text(config))
    table.add_row("byzantine", _byzantine_text(config))
    if algo.crowd:
        table.add_row("stop rule", LDP_STOP)
    else:
        stop_help = CDE_STOP_HELP if algo.reports else STOP_HELP
        table.add_row("stop rule", f"{config.stop}: {stop_help[config.stop]}")
    table.add_row(
        "trials", f"{params['trials']} (seed {params['seed']}, engine {params['engine']})"
    )
    return table


def _problem_text(params: dict[str, Any]) -> str:
    replaced = [k for k in ("means", "rewards", "drift") if params["replaced"][k]]
    problem = params["problem"] or "(custom)"
    if params["problem"] and replaced:
        problem += f" with its {'/'.join(replaced)} replaced"
    return str(problem)


def _parameters_text(algo: AlgorithmConfig) -> str:
    """epsilon, delta, eta, and the parameters of the algorithm that ran."""
    text = f"epsilon={algo.epsilon:g} delta={algo.delta:g} eta={algo.eta:g}"
    if algo.algorithm == "ce":
        text += f" xi={algo.xi:g}"
    if algo.algorithm == "dp-mase":
        text += f" dp_epsilon={algo.dp_epsilon:g} beta={algo.beta:g}"
    if algo.subroutine == "ser4":
        text += f" phi={algo.phi:g}"
    if algo.reports:
        text += f" privacy={algo.privacy:g}"
    if algo.crowd:  # no eta: no agent runs a local subroutine
        text = f"epsilon={algo.epsilon:g} delta={algo.delta:g} dp_epsilon={algo.dp_epsilon:g}"
    return text


LDP_STOP = (
    "the coordinator's: the leader identified (global), or every agent's B reports spent "
    "(exhausted, no answer)"
)


def _reports_text(config: SimulationConfig, params: dict[str, Any]) -> str:
    """LDP: B per agent, one agent's privacy, the batch, and the range Gaussian rewards are
    clipped to (the guarantee is on the clipped means)."""
    algo = config.algorithm
    text = (
        f"B={algo.reports_per_agent} per agent, each eps={algo.dp_epsilon:g}-locally private "
        f"(an agent's history: {algo.user_privacy:g}); the coordinator decides every 10 reports"
    )
    if not config.environment.bounded:
        low, high = params["reward_range"]
        text += (
            f"; rewards clipped to [{low:g}, {high:g}] and mapped to [0, 1]: the guarantee is on "
            "the clipped means"
        )
    return text


def _threshold_text(config: SimulationConfig) -> str:
    algo = config.algorithm
    base = algo.base_threshold(config.environment.n_arms)
    if config.threshold is None:
        return "none (no votes)"
    if algo.reports:
        liars = f", f={algo.tolerance} of them may lie" if algo.tolerance else ""
        return f"{config.threshold} reports accept an arm (chosen from N={config.n_agents}{liars})"
    if algo.tolerance > 0:
        return f"{config.threshold} (M={base} + tolerance f={algo.tolerance})"
    return str(config.threshold)


def _byzantine_text(config: SimulationConfig) -> str:
    algo = config.algorithm
    byzantine = f"tolerance f={algo.tolerance}; attackers {config.attackers}"
    if not config.attackers:
        return byzantine
    last = config.attackers - 1
    who = "agent 0" if last == 0 else f"agents 0-{last}"
    if algo.reports and config.attack == "adaptive":
        return byzantine + (
            f" ({who} wait until an arm that is not eps-optimal has M - "
            f"{config.attackers} honest reports, then all report it)"
        )
    if algo.reports:
        return byzantine + f" ({who} report arm {config.lie_arm} at once)"
    if algo.crowd:
        return byzantine + (
            f" ({who} send B reports each: bit 0 on arm {config.attacked_arm}, bit 1 on arm "
            f"{config.lie_arm}, alternately)"
        )
    return byzantine + f" ({who} vote against arm {config.attacked_arm} only)"


def trials_table(results: list[TrialResult], any_tie: bool, byzantine_run: bool) -> Table:
    """One row per trial; the candidates when some trial tied, the suspects when agents lie."""
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
    return trials


def summary_table(
    config: SimulationConfig,
    results: list[TrialResult],
    summary: dict[str, Any],
    certified: tuple[float, str] | None,
    byzantine_run: bool,
) -> Table:
    """Means with their intervals, the rates, what is certified, how the trials stopped."""
    table = Table(title=f"summary of {len(results)} trials", title_justify="left")
    for column in ("metric", "mean", "std", "95% CI"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    _add_means(table, summary, config.algorithm.vote_drop > 0, config.algorithm.crowd)
    _add_rates(table, summary, len(results))
    if certified is not None:
        _add_certified(table, config, summary, certified[0], len(results))
    if summary["ties"] > 0:
        table.add_row("tie candidates", _tie_candidates(results), "", "")
    table.add_row(
        "stopped by", ", ".join(f"{k} {v}" for k, v in summary["stopped_by"].items()), "", ""
    )
    if byzantine_run:
        counts = [len(r.suspects) for r in results]
        caught = sum(set(range(config.attackers)) <= set(r.suspects) for r in results)
        table.add_row(
            "suspects",
            fmt(sum(counts) / len(counts)),
            "",
            f"every attacker a suspect in {caught}/{len(results)}",
        )
    return table


def _add_means(table: Table, summary: dict[str, Any], settled: bool, crowd: bool = False) -> None:
    labels = ("activations", "reports") if crowd else ("sample complexity", "messages")
    for metric, label in zip(("sample_complexity", "messages"), labels, strict=True):
        s = summary[metric]
        ci = s["ci95"]
        table.add_row(
            label,
            fmt(s["mean"]),
            fmt(s["std"]),
            f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "-",
        )
    if settled:
        table.add_row("  of which settled", fmt(summary["settled_messages"]), "", "")
    if crowd:
        table.add_row("exhausted (no answer)", str(summary["exhausted"]), "", "")


def _add_rates(table: Table, summary: dict[str, Any], n: int) -> None:
    for label, rate, count in (
        ("failure rate", "failure_rate", "failures"),
        ("tie rate", "tie_rate", "ties"),
    ):
        low, high = summary[f"{rate}_ci95"]
        table.add_row(
            label, f"{summary[rate]:.3f}", "", f"[{low:.3f}, {high:.3f}] ({summary[count]}/{n})"
        )


def _add_certified(
    table: Table, config: SimulationConfig, summary: dict[str, Any], failure: float, n: int
) -> None:
    """Voting: how often the best arm was voted out, beside the bound. CDE: the bound, e0 and
    the hit rate."""
    if "best_arm_voted_out" in summary:
        low, high = summary["best_arm_voted_out_ci95"]
        out_count = summary["best_arm_voted_out"]
        table.add_row(
            "best arm voted out",
            f"{summary['best_arm_voted_out_rate']:.3f}",
            "",
            f"[{low:.3f}, {high:.3f}] ({out_count}/{n})",
        )
        table.add_row("certified failure", upper(failure), "", "at most (see below)")
    if config.algorithm.reports:
        table.add_row("certified failure", upper(failure), "", "at most (see below)")
        e0, hit = certified_epsilon(config), hit_rate_uniform_prior(config)
        table.add_row("certified epsilon e0", upper(e0 or 0.0), "", "any prior (see below)")
        table.add_row("hit rate, uniform prior", upper(hit or 0.0), "", "at most (see below)")


def crowd_table(first: dict[str, Any]) -> Table:
    """LDP: what the coordinator knew at the end of trial 0, each arm's mean and interval (they
    hold together, at all times, with probability 1 - delta) and the leader's lift."""
    table = Table(
        title=f"trial 0: estimates (leader arm {first['best_arm']}, {first['stopped_by']})",
        title_justify="left",
    )
    for column in ("arm", "reports", "mean", "interval", "lift of the leader", "its interval"):
        table.add_column(column, justify="right")
    lift = {d["vs"]: d for d in first["lift"]}
    for e in first["estimates"]:
        d = lift.get(e["index"])
        table.add_row(
            str(e["index"]),
            f"{e['reports']:,}",
            "-" if e["mean"] is None else f"{e['mean']:.3f}",
            f"[{e['ci'][0]:.3f}, {e['ci'][1]:.3f}]",
            "leader" if d is None else ("-" if d["mean"] is None else f"{d['mean']:+.3f}"),
            "" if d is None else f"[{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]",
        )
    return table


def _tie_candidates(results: list[TrialResult]) -> str:
    """How often each set of candidates was left by a tie."""
    kept: dict[str, int] = {}
    for r in results:
        if r.stopped_by == "tie":
            key = "{" + ",".join(str(a) for a in r.candidates) + "}"
            kept[key] = kept.get(key, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(kept.items()))
