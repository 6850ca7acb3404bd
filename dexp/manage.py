"""`dexp experiments`: an operator's view and control of a running coordinator's experiments,
through its REST API (dexp/admin.py's client), so that nobody hand-writes curl with a token.

- `list`: every experiment (all pages, following `next`), one summary each.
- `show ID`: the aggregates (GET /v1/experiments/{id}) and the outcome (GET .../best-arm): a tie's
  candidates and what is `certified` about them come only from the latter.
- `create ID --arms a,b,c [...]`: the options are exactly ExperimentCreate's body fields, and an
  omitted option is not sent, so the coordinator's defaults (and its validation) apply.
- `reset ID`: the admin's reset (new epoch, every arm back, votes cleared).
- `delete ID`: asks first, unless --yes; refuses without --yes when stdin is not a terminal.

The reads are public (the token is sent if given); create, reset and delete need the admin
token. Tables by default, the coordinator's JSON with --json. A refusal or an unreachable
coordinator is one line and exit 1 (`dexp experiments: 404 experiment 'x' does not exist`), bad
arguments exit 2 (dexp.cli.DexpGroup). The rendering functions below take the documents and return
rich renderables: they do no I/O (dexp/watch.py reuses them).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from common.errors import ParameterError
from common.ldp import DEFAULT_DP_EPSILON, check_dp_epsilon, check_reports_per_agent
from common.rounding import upper
from dexp.admin import (
    DEFAULT_COORDINATOR_URL,
    AdminError,
    AdminTokenOption,
    Coordinator,
    CoordinatorUrlOption,
    ExperimentArgument,
    JsonOption,
    check_experiment,
    connect,
    write_json,
)
from dexp.choices import ALGORITHMS, PRIVACY_HELP, REWARD_FAMILIES, SUBROUTINES

COMMAND = "dexp experiments"
PAGE_SIZE = 100  # the coordinator's largest page
BAR_WIDTH = 20
ENDED = ("identified", "tied")

# ----------------------------------------------------------------------------- rendering


def console() -> Console:
    """On the current sys.stdout; wide when not a terminal (logs, pipes), as dexp.cli's."""
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=160)
    return out


def format_time(value: Any) -> str:
    """A time as UTC text: unix ms (the coordinator's) or s (the load generator's may be
    either), or a string, shown as it is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-" if value is None else str(value)
    seconds = value / 1000 if value > 1e11 else float(value)
    whole, millis = divmod(round(seconds * 1000), 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value / 1000 if value > 1e11 else float(value)


def _count(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-" if value is None else str(value)
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def arm_label(doc: dict[str, Any], arm: int) -> str:
    arms = doc.get("arms", [])
    return str(arms[arm]) if 0 <= arm < len(arms) else f"#{arm}"


def status_text(doc: dict[str, Any], outcome: dict[str, Any] | None = None) -> str:
    """`identified: best arm A`, `tied: candidates A, B`, `exploring: 3 of 10 arms remain`."""
    status = str(doc.get("status", "?"))
    remaining = [int(a) for a in doc.get("remaining_arms", [])]
    names = ", ".join(arm_label(doc, a) for a in remaining)
    if status == "identified" and remaining:
        return f"identified: best arm {names}"
    if status == "tied":
        return f"tied: candidates {names}"
    return f"{status}: {len(remaining)} of {len(doc.get('arms', []))} arms remain"


def result_text(result: Any) -> str:
    """The kept `result` of a decided experiment in one line: the outcome, when and how long after
    the creation, its messages and votes (CDE: reports), and the load generator's activations and
    rate at the decision if one fed it; '-' while exploring (null)."""
    if not isinstance(result, dict):
        return "-"
    if result.get("status") == "identified":
        outcome = f"best arm {(result.get('best_arm') or {}).get('name')}"
    else:
        names = ", ".join(str(c.get("name")) for c in result.get("candidates") or [])
        outcome = f"tied: {names}"
    duration = result.get("duration_ms")
    seconds = f" after {duration / 1000:,.1f} s" if isinstance(duration, int | float) else ""
    counted = result.get("reports") if isinstance(result.get("reports"), list) else None
    what = "reports" if counted is not None else "votes"
    total = sum(counted if counted is not None else result.get("votes") or [])
    text = (
        f"{outcome}, decided {format_time(result.get('decided_at'))}{seconds}; "
        f"{_count(result.get('messages'))} messages, {_count(total)} {what}"
    )
    lg = result.get("load_generator")
    if isinstance(lg, dict) and lg.get("activations") is not None:
        text += f"; {_count(lg['activations'])} activations"
        rate = lg.get("activations_per_second")
        if isinstance(rate, int | float) and not isinstance(rate, bool):
            text += f" at {rate:,.0f}/s"
    return text


def load_generator_text(lg: dict[str, Any], now: float | None = None) -> str:
    """The simulated environment's progress as it published it (GET /v1/experiments/{id}
    `load_generator`; any field may be null), with its age: a stopped load generator's last
    report would otherwise read as live."""
    parts = []
    if lg.get("run") is not None:
        parts.append(f"run {lg['run']}" + (f" on {lg['host']}" if lg.get("host") else ""))
    if lg.get("activations") is not None:
        activations = f"{_count(lg['activations'])} activations"
        rate = lg.get("activations_per_second")
        if isinstance(rate, int | float) and not isinstance(rate, bool):
            activations += f" ({rate:,.0f}/s)"
        parts.append(activations)
    if lg.get("delivered") is not None:
        parts.append(f"{_count(lg['delivered'])} delivered")
    if lg.get("backlog") is not None:
        parts.append(f"backlog {_count(lg['backlog'])}")
    if lg.get("epoch") is not None:
        parts.append(f"epoch {lg['epoch']}")
    updated = _seconds(lg.get("updated_at"))
    if updated is not None:
        age = (time.time() if now is None else now) - updated
        parts.append(f"updated {max(age, 0):.0f} s ago")
    return ", ".join(parts) or "running (no figures yet)"


def certified_text(doc: dict[str, Any]) -> str | None:
    """The experiment's certified failure with the agents enrolled (and at the coordinator's cap),
    against its delta, then its sentence; None for a document without one."""
    failure = doc.get("certified_failure")
    if isinstance(failure, bool) or not isinstance(failure, int | float):
        return None
    delta = doc.get("params", {}).get("delta")
    text = f"at most {upper(failure)} with {_count(doc.get('certified_agents'))} agents"
    if isinstance(delta, int | float) and not isinstance(delta, bool):
        text += f" ({'within' if failure <= delta else 'ABOVE'} delta = {delta:g})"
    cap = doc.get("certified_failure_at_max_agents")
    if isinstance(cap, int | float) and not isinstance(cap, bool):
        text += f"; at most {upper(cap)} with as many agents as the coordinator admits"
    sentence = doc.get("certificate")
    return f"{text}\n{sentence}" if sentence else text


def privacy_text(doc: dict[str, Any]) -> str | None:
    """CDE's certified epsilon and its hit rate under a uniform prior: the document's sentence,
    which starts with e0, or both figures (None for the others, and for a document without
    them)."""
    e0, hit = doc.get("certified_epsilon"), doc.get("hit_rate_uniform_prior")
    if isinstance(e0, bool) or not isinstance(e0, int | float):
        return None
    sentence = doc.get("privacy_certificate")
    if isinstance(sentence, str):
        return sentence
    text = f"e0 = {upper(e0)}, for every prior"
    if isinstance(hit, int | float) and not isinstance(hit, bool):
        text += f" (hit rate under a uniform prior: at most {upper(hit)})"
    return text


def reporting(doc: dict[str, Any]) -> bool:
    """A CDE experiment's document: its counts are reports of arms, not votes against them."""
    return isinstance(doc.get("reports"), list) and not crowd(doc)


def crowd(doc: dict[str, Any]) -> bool:
    """An LDP experiment's document: estimates and lift from private reports, no threshold."""
    return isinstance(doc.get("estimates"), list)


def _ci(ci: Any) -> str:
    return f"[{float(ci[0]):.3f}, {float(ci[1]):.3f}]"


def _signed(value: Any, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{float(value):+.3f}" if signed else f"{float(value):.3f}"


def estimates_table(doc: dict[str, Any]) -> Table:
    """LDP: each arm's mean reward and interval (simultaneous and anytime at 1 - delta), its
    reports, its weight in the published allocation, and whether it is still in play."""
    remaining = set(doc.get("remaining_arms", []))
    allocation = doc.get("allocation") or []
    table = Table(
        title="estimates (mean reward, interval at 1 - delta for all arms and all times)",
        title_justify="left",
    )
    for column in ("#", "arm", "reports", "mean", "interval", "allocation", "state"):
        table.add_column(column, justify="right" if column in ("#", "reports") else "left")
    for e in doc["estimates"]:
        arm = int(e["index"])
        weight = f"{float(allocation[arm]):.2f}" if arm < len(allocation) else "-"
        state = Text("in", style="green") if arm in remaining else Text("out", style="red")
        table.add_row(
            str(arm),
            str(e.get("name", arm_label(doc, arm))),
            _count(e.get("reports")),
            _signed(e.get("mean")),
            _ci(e["ci"]),
            weight,
            state,
        )
    return table


def lift_table(doc: dict[str, Any]) -> Table | None:
    """LDP: the leader's lift over each other arm (difference of means) and its interval."""
    lift = doc.get("lift") or []
    if not lift:
        return None
    others = {int(item["vs"]) for item in lift}
    leader = next((int(e["index"]) for e in doc["estimates"] if int(e["index"]) not in others), 0)
    table = Table(title=f"lift of the leader {arm_label(doc, leader)}", title_justify="left")
    for column in ("vs", "lift", "interval"):
        table.add_column(column)
    for item in lift:
        table.add_row(
            str(item.get("name", arm_label(doc, int(item["vs"])))),
            _signed(item.get("mean"), signed=True),
            _ci(item["ci"]),
        )
    return table


def summaries_table(experiments: Sequence[dict[str, Any]], title: str) -> Table:
    """GET /v1/experiments's summaries, one row each."""
    table = Table(title=title, title_justify="left")
    for column in ("id", "status", "remaining", "threshold", "agents", "epoch", "version"):
        table.add_column(column, justify="left" if column in ("id", "status") else "right")
    table.add_column("created (UTC)")
    table.add_column("result")
    for e in experiments:
        table.add_row(
            str(e.get("id")),
            str(e.get("status")),
            f"{e.get('remaining')}/{e.get('n_arms')}",
            str(e.get("threshold")),
            _count(e.get("agents")),
            str(e.get("epoch")),
            str(e.get("version")),
            format_time(e.get("created_at")),
            result_text(e.get("result")),
        )
    return table


def vote_bar(votes: int, threshold: int, eliminated: bool, accepting: bool = False) -> Text:
    """Votes against an arm as a share of the threshold that removes it (`accepting`: CDE's
    reports for it, as a share of the threshold that accepts it)."""
    share = min(votes, threshold) / threshold if threshold > 0 else 0.0
    filled = round(share * BAR_WIDTH)
    style = "red" if eliminated else "yellow" if share >= 0.5 else "green"
    if accepting:
        style = "dim" if eliminated else "green" if share >= 1 else "yellow"
    return Text("█" * filled, style=style) + Text("░" * (BAR_WIDTH - filled), style="dim")


def arms_table(doc: dict[str, Any]) -> Table:
    """Each arm's votes against it, out of the threshold, and whether it left (and in which
    order): the one picture of how far the experiment is."""
    threshold = int(doc.get("threshold", 0))
    order = {int(e["arm"]): e for e in doc.get("eliminations", [])}
    remaining = set(doc.get("remaining_arms", []))
    reports = reporting(doc)
    what = "reports for" if reports else "votes against"
    table = Table(title=f"{what} each arm (threshold {threshold})", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("arm")
    table.add_column("reports" if reports else "votes", justify="right")
    table.add_column(f"of {threshold}", no_wrap=True)
    table.add_column("state")
    for arm, votes in enumerate(doc["reports"] if reports else doc.get("votes", [])):
        gone = order.get(arm)
        if gone is not None:
            state = Text(f"out #{gone.get('order', '?')}", style="red")
        elif arm in remaining:
            state = Text("in", style="green")
        else:
            state = Text("out")
        table.add_row(
            str(arm),
            arm_label(doc, arm),
            f"{votes}/{threshold}",
            vote_bar(int(votes), threshold, arm not in remaining, accepting=reports),
            state,
        )
    return table


def eliminations_table(doc: dict[str, Any]) -> Table | None:
    eliminations = sorted(doc.get("eliminations", []), key=lambda e: e.get("order", 0))
    if not eliminations:
        return None
    table = Table(title="eliminations, in order", title_justify="left")
    for column in ("order", "arm", "votes", "time (UTC)"):
        table.add_column(column, justify="right" if column in ("order", "votes") else "left")
    for e in eliminations:
        table.add_row(
            str(e.get("order")),
            str(e.get("name", arm_label(doc, int(e.get("arm", -1))))),
            str(e.get("votes")),
            format_time(e.get("time")),
        )
    return table


def overview_table(
    doc: dict[str, Any], outcome: dict[str, Any] | None = None, now: float | None = None
) -> Table:
    """The experiment's counters and parameters, one per row."""
    table = Table(
        title=f"experiment {doc.get('id')}", show_header=False, title_justify="left", box=None
    )
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value")
    table.add_row("status", status_text(doc, outcome))
    if isinstance(doc.get("result"), dict):
        table.add_row("result", result_text(doc["result"]))
    table.add_row(
        "arms", f"{len(doc.get('remaining_arms', []))} of {len(doc.get('arms', []))} remain"
    )
    tolerance = doc.get("params", {}).get("tolerance", 0)
    liars = f" (f = {tolerance} may lie)" if tolerance else ""
    if crowd(doc):
        table.add_row(
            "privacy",
            f"each report {_value(doc.get('dp_epsilon'))}-locally private, at most "
            f"{doc.get('reports_per_agent')} per agent: {_value(doc.get('user_privacy'))} per "
            "agent over everything it sends",
        )
        table.add_row(
            "agents", f"{_count(doc.get('agents'))} ({_count(doc.get('reports_total'))} reports)"
        )
    elif reporting(doc):
        table.add_row(
            "threshold",
            f"{doc.get('threshold')} reports accept an arm, one per agent{liars}; chosen for "
            f"{_count(doc.get('expected_agents'))} agents",
        )
        table.add_row(
            "agents", f"{_count(doc.get('agents'))} ({sum(doc['reports'])} counted reports)"
        )
    else:
        table.add_row(
            "threshold",
            f"{doc.get('threshold')} distinct votes remove an arm"
            + (f" (M + f, f = {tolerance})" if tolerance else ""),
        )
        table.add_row(
            "agents", f"{_count(doc.get('agents'))} ({doc.get('settled_agents', 0)} settled)"
        )
    certified = certified_text(doc)
    if certified is not None:
        table.add_row("certified failure", certified)
    privacy = privacy_text(doc)
    if privacy is not None:
        table.add_row("certified epsilon", privacy)
    messages = f"{_count(doc.get('messages'))} ({_count(doc.get('ignored_messages', 0))} ignored)"
    if doc.get("epoch_messages") is not None:
        messages += f"; {_count(doc['epoch_messages'])} this epoch"
    table.add_row("messages", messages)
    since = doc.get("epoch_started_at")
    table.add_row(
        "epoch",
        f"{doc.get('epoch')}"
        + (f" since {format_time(since)}" if since is not None else "")
        + f" (version {doc.get('version')})",
    )
    table.add_row("created", format_time(doc.get("created_at")))
    params = " ".join(f"{k}={_value(v)}" for k, v in doc.get("params", {}).items())
    sigma = doc.get("sigma")
    if sigma is not None:
        params += f" sigma={_value(sigma)}"
    else:
        params += " rewards 0 or 1" if doc.get("rewards") == "bernoulli" else " rewards in [0, 1]"
    if doc.get("pulls_per_arm") is not None:
        params += f" T={doc['pulls_per_arm']} pulls per arm"
    table.add_row("params", params)
    if isinstance(doc.get("load_generator"), dict):
        table.add_row("load generator", load_generator_text(doc["load_generator"], now))
    return table


def warnings_table(doc: dict[str, Any]) -> Table | None:
    if not doc.get("warnings"):
        return None
    table = Table(title="warnings", show_header=False, title_justify="left")
    table.add_column("warning", style="yellow")
    for warning in doc["warnings"]:
        table.add_row(str(warning))
    return table


def outcome_text(doc: dict[str, Any], outcome: dict[str, Any] | None) -> Text | None:
    """A tie's candidates and what is certified about them (GET .../best-arm); nothing for
    another status, whose arms table says it all."""
    if outcome is None or outcome.get("status") != "tied":
        return None
    names = ", ".join(str(c.get("name")) for c in outcome.get("candidates", []))
    text = Text(f"tie: candidates {names}\n", style="bold")
    text.append(f"certified: {outcome.get('certified')}", style="")
    return text


def experiment_view(
    doc: dict[str, Any], outcome: dict[str, Any] | None = None, now: float | None = None
) -> Group:
    """`dexp experiments show` (and create): overview, arms, eliminations, warnings, the tie."""
    parts: list[RenderableType] = [overview_table(doc, outcome, now)]
    if crowd(doc):
        parts.append(estimates_table(doc))
        extra: tuple[RenderableType | None, ...] = (lift_table(doc),)
    else:
        parts.append(arms_table(doc))
        extra = (eliminations_table(doc),)
    for part in (*extra, warnings_table(doc), outcome_text(doc, outcome)):
        if part is not None:
            parts.append(part)
    return Group(*parts)


# ----------------------------------------------------------------------------- HTTP


def fetch_experiment(coordinator: Coordinator, experiment: str) -> dict[str, Any]:
    """GET /v1/experiments/{id}, checked to be an experiment document."""
    path = f"/v1/experiments/{experiment}"
    doc = coordinator.get(path)
    needed = ("status", "arms", "votes", "remaining_arms", "threshold")
    if not isinstance(doc, dict) or any(k not in doc for k in needed):
        raise coordinator.unexpected(path, "not an experiment document")
    return doc


def fetch_outcome(coordinator: Coordinator, experiment: str) -> dict[str, Any]:
    """GET /v1/experiments/{id}/best-arm: the best arm, or a tie's candidates and certificate."""
    path = f"/v1/experiments/{experiment}/best-arm"
    reply = coordinator.get(path)
    if not isinstance(reply, dict) or "status" not in reply:
        raise coordinator.unexpected(path, "not a best-arm document")
    return reply


def list_all(coordinator: Coordinator) -> list[dict[str, Any]]:
    """Every page of GET /v1/experiments, following `next`."""
    experiments: list[dict[str, Any]] = []
    after = ""
    while True:
        page = coordinator.get("/v1/experiments", {"limit": PAGE_SIZE, "after": after})
        if not isinstance(page, dict) or not isinstance(page.get("experiments"), list):
            raise coordinator.unexpected("/v1/experiments", "no experiments")
        experiments += page["experiments"]
        following = page.get("next")
        if following is None:
            return experiments
        if not isinstance(following, str) or following <= after:  # would loop for ever
            raise coordinator.unexpected("/v1/experiments", f"next={following!r} after {after!r}")
        after = following


def parse_arms(text: str) -> list[str]:
    """`a,b,c` as a list; at least two distinct names (ignoring case and blanks around them, as
    the coordinator compares them), else a usage error. The coordinator checks the rest."""
    arms = [a.strip() for a in text.split(",")]
    if any(not a for a in arms):
        raise typer.BadParameter(f"{text!r}: an empty arm name", param_hint="'--arms'")
    if len(arms) < 2:
        raise typer.BadParameter(
            f"{text!r}: at least two arms, comma-separated", param_hint="'--arms'"
        )
    seen: dict[str, str] = {}
    for arm in arms:
        if arm.casefold() in seen:
            raise typer.BadParameter(
                f"{seen[arm.casefold()]!r} and {arm!r} are the same arm (case is ignored)",
                param_hint="'--arms'",
            )
        seen[arm.casefold()] = arm
    return arms


def _choice(value: str | None, choices: Sequence[str], hint: str) -> str | None:
    if value is not None and value not in choices:
        raise typer.BadParameter(f"{value!r}: one of {', '.join(choices)}", param_hint=hint)
    return value


def _checked(check: Callable[[Any], None], value: Any, hint: str) -> None:
    """`check(value)` (common's rule), its ParameterError a usage error (exit 2, one line)."""
    try:
        check(value)
    except ParameterError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None


def _stdin_is_interactive() -> bool:
    """Whether a question can be answered (tests replace it)."""
    return sys.stdin is not None and sys.stdin.isatty()


# ----------------------------------------------------------------------------- commands

experiments_app = typer.Typer(
    help="List, show, create, reset and delete a coordinator's experiments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@experiments_app.command("list")
def list_command(
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Every experiment, one summary each (all pages)."""
    with connect(COMMAND, coordinator_url, admin_token, token_required=False) as coordinator:
        experiments = list_all(coordinator)
    if as_json:
        write_json({"experiments": experiments, "next": None})
        return
    title = f"{len(experiments)} experiment(s) at {coordinator.url}"
    console().print(summaries_table(experiments, title))


@experiments_app.command("show")
def show_command(
    experiment: ExperimentArgument,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the coordinator's experiment document, with GET .../best-arm's reply "
            "under `outcome`.",
        ),
    ] = False,
) -> None:
    """The aggregates of EXPERIMENT: status, votes per arm, eliminations, counters, warnings."""
    check_experiment(experiment)
    with connect(COMMAND, coordinator_url, admin_token, token_required=False) as coordinator:
        doc = fetch_experiment(coordinator, experiment)
        outcome = fetch_outcome(coordinator, experiment)
    if as_json:
        write_json({**doc, "outcome": outcome})
        return
    console().print(experiment_view(doc, outcome))


@experiments_app.command("create")
def create_command(
    experiment: ExperimentArgument,
    arms: Annotated[str, typer.Option(help="Arm names, comma-separated (at least two).")],
    algorithm: Annotated[
        str | None, typer.Option(help=" | ".join(ALGORITHMS), show_default=False)
    ] = None,
    subroutine: Annotated[
        str | None, typer.Option(help=" | ".join(SUBROUTINES), show_default=False)
    ] = None,
    epsilon: Annotated[
        float | None, typer.Option(help="Accuracy: an arm within eps of the best is good.")
    ] = None,
    delta: Annotated[float | None, typer.Option(help="Global failure probability.")] = None,
    eta: Annotated[float | None, typer.Option(help="Local failure probability (DE, CE).")] = None,
    xi: Annotated[float | None, typer.Option(help="CE: probability of dropping a vote.")] = None,
    dp_epsilon: Annotated[
        float | None,
        typer.Option(
            help="DP-MASE: eps_dp, the privacy of each agent's rewards; LDP: of each report "
            f"(default {DEFAULT_DP_EPSILON:g} for ldp)."
        ),
    ] = None,
    reports_per_agent: Annotated[
        int | None,
        typer.Option(
            help="LDP only: B, the private reports one agent may send (its privacy over its "
            "rewards is B x dp_epsilon)."
        ),
    ] = None,
    beta: Annotated[float | None, typer.Option(help="DP-MASE: local failure probability.")] = None,
    phi: Annotated[float | None, typer.Option(help="SER4: reset probability.")] = None,
    tolerance: Annotated[
        int | None, typer.Option(help="f, lying agents tolerated: threshold M + f.")
    ] = None,
    privacy: Annotated[
        float | None,
        typer.Option(help=f"{PRIVACY_HELP}."),
    ] = None,
    agents: Annotated[
        int | None,
        typer.Option(
            help="CDE: the agents expected; its threshold is chosen for them (omitted: the "
            "coordinator's DEXP_MAX_AGENTS)."
        ),
    ] = None,
    every_arm: Annotated[
        bool | None,
        typer.Option(
            "--every-arm/--no-every-arm",
            help="Every arm of the local set per activation (Rio et al.).",
            show_default=False,
        ),
    ] = None,
    sigma: Annotated[
        float | None,
        typer.Option(help="Sub-Gaussian reward scale (omitted: rewards in [0, 1])."),
    ] = None,
    rewards: Annotated[
        str | None,
        typer.Option(
            help="Without --sigma: bounded (each reward in [0, 1], the default) or bernoulli "
            "(each 0 or 1: the agents refuse any other; CDE's T is then the exact binomial one).",
            show_default=False,
        ),
    ] = None,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create EXPERIMENT (admin token).

    Omitted options are not sent: the coordinator's defaults apply, and the coordinator judges
    the values (422 with what is wrong)."""
    check_experiment(experiment)
    body: dict[str, Any] = {"id": experiment, "arms": parse_arms(arms)}
    _choice(algorithm, ALGORITHMS, "'--algorithm'")
    if algorithm == "ldp":
        dp_epsilon = DEFAULT_DP_EPSILON if dp_epsilon is None else dp_epsilon
        _checked(check_dp_epsilon, dp_epsilon, "'--dp-epsilon'")
        if reports_per_agent is not None:
            _checked(check_reports_per_agent, reports_per_agent, "'--reports-per-agent'")
    elif reports_per_agent is not None:
        raise typer.BadParameter(
            f"for --algorithm ldp only (not {algorithm or 'de'}): its agents send private "
            "reports, the others' do not",
            param_hint="'--reports-per-agent'",
        )
    given = {
        "algorithm": _choice(algorithm, ALGORITHMS, "'--algorithm'"),
        "subroutine": _choice(subroutine, SUBROUTINES, "'--subroutine'"),
        "epsilon": epsilon,
        "delta": delta,
        "eta": eta,
        "xi": xi,
        "dp_epsilon": dp_epsilon,
        "reports_per_agent": reports_per_agent,
        "beta": beta,
        "phi": phi,
        "tolerance": tolerance,
        "every_arm": every_arm,
        "sigma": sigma,
        "rewards": _choice(rewards, REWARD_FAMILIES, "'--rewards'"),
        "privacy": privacy,
        "agents": agents,
    }
    body.update({k: v for k, v in given.items() if v is not None})
    with connect(COMMAND, coordinator_url, admin_token, token_required=True) as coordinator:
        doc = coordinator.post("/v1/experiments", body)
    if as_json:
        write_json(doc)
        return
    if not isinstance(doc, dict) or "votes" not in doc:
        raise coordinator.unexpected("/v1/experiments", "not an experiment document")
    console().print(experiment_view(doc))


@experiments_app.command("reset")
def reset_command(
    experiment: ExperimentArgument,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Reset EXPERIMENT: a new epoch, every arm back, every vote cleared (admin token)."""
    check_experiment(experiment)
    with connect(COMMAND, coordinator_url, admin_token, token_required=True) as coordinator:
        reply = coordinator.post(f"/v1/experiments/{experiment}/reset")
        if as_json:
            write_json(reply)
            return
        doc = fetch_experiment(coordinator, experiment)
    console().print(
        f"reset {experiment}: epoch {doc.get('epoch')} (version {doc.get('version')}), "
        f"{len(doc['remaining_arms'])} of {len(doc['arms'])} arms remain, "
        f"{sum(doc['votes'])} votes"
    )


@experiments_app.command("delete")
def delete_command(
    experiment: ExperimentArgument,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
) -> None:
    """Delete EXPERIMENT with its votes and agents (their tokens stop working); asks first."""
    check_experiment(experiment)
    if not yes and not _stdin_is_interactive():
        raise typer.BadParameter(
            "stdin is not a terminal, so nobody can confirm: pass --yes to delete",
            param_hint="'--yes'",
        )
    with connect(COMMAND, coordinator_url, admin_token, token_required=True) as coordinator:
        if not yes:
            doc = fetch_experiment(coordinator, experiment)  # a 404 before the question
            question = (
                f"Delete experiment {experiment!r} ({doc['status']}, {doc.get('agents')} agents, "
                f"{doc.get('messages')} votes received)? Its votes and agents go with it"
            )
            if not typer.confirm(question, default=False, err=True):
                raise AdminError(COMMAND, f"{experiment} not deleted")
        coordinator.delete(f"/v1/experiments/{experiment}")
    console().print(f"deleted experiment {experiment}")


# ----------------------------------------------------------------------------- the admin views


def _arm_names(doc: dict[str, Any], arms: Sequence[int]) -> str:
    return ", ".join(arm_label(doc, arm) for arm in arms) or "-"


def _admin_view(
    experiment: str, view: str, coordinator_url: str, admin_token: str | None, as_json: bool
) -> tuple[Any, dict[str, Any]] | None:
    """GET /v1/experiments/{experiment}/{view} with the admin token, printed as it is with --json
    (then None); else the reply and the experiment's document, to name its arms."""
    check_experiment(experiment)
    with connect(COMMAND, coordinator_url, admin_token, token_required=True) as coordinator:
        reply = coordinator.get(f"/v1/experiments/{experiment}/{view}")
        if as_json:
            write_json(reply)
            return None
        return reply, fetch_experiment(coordinator, experiment)


@experiments_app.command("voters")
def voters_command(
    experiment: ExperimentArgument,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Who voted against each arm of EXPERIMENT this epoch (admin token: GET .../voters)."""
    read = _admin_view(experiment, "voters", coordinator_url, admin_token, as_json)
    if read is None:
        return
    reply, doc = read
    table = Table(title=f"{experiment}: voters, epoch {reply['epoch']}", title_justify="left")
    for column in ("arm", "votes", "agents"):
        table.add_column(column, justify="right" if column == "votes" else "left")
    for arm, ids in enumerate(reply["voters"]):
        table.add_row(arm_label(doc, arm), str(len(ids)), ", ".join(ids) or "-")
    console().print(table)


@experiments_app.command("agents")
def agents_command(
    experiment: ExperimentArgument,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """EXPERIMENT's agents in enrollment order (all pages): their votes this epoch and the DSER4
    resets each made (admin token: GET .../agents)."""
    check_experiment(experiment)
    agents: list[dict[str, Any]] = []
    with connect(COMMAND, coordinator_url, admin_token, token_required=True) as coordinator:
        after = 0
        while True:
            path = f"/v1/experiments/{experiment}/agents"
            page = coordinator.get(path, {"limit": 1000, "after": after})
            if not isinstance(page, dict) or not isinstance(page.get("agents"), list):
                raise coordinator.unexpected(path, "no agents")
            agents += page["agents"]
            if page.get("next") is None:
                break
            after = int(page["next"])
        if as_json:
            write_json({"experiment": experiment, "agents": agents, "next": None})
            return
        doc = fetch_experiment(coordinator, experiment)
    table = Table(title=f"{experiment}: {len(agents)} agent(s)", title_justify="left")
    for column in ("#", "agent", "voted against", "resets", "last reset"):
        table.add_column(column, justify="right" if column in ("#", "resets") else "left")
    for agent in agents:
        table.add_row(
            str(agent["index"]),
            agent["agent_id"],
            _arm_names(doc, agent["voted_against"]),
            str(agent.get("resets", 0)),
            format_time(agent.get("last_reset_at")),
        )
    console().print(table)


@experiments_app.command("suspects")
def suspects_command(
    experiment: ExperimentArgument,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """The agents of EXPERIMENT whose votes contradict the outcome: they voted against the
    identified, or leading, arm this epoch (admin token: GET .../suspects)."""
    read = _admin_view(experiment, "suspects", coordinator_url, admin_token, as_json)
    if read is None:
        return
    reply, doc = read
    reference = reply["reference_arm"]
    title = (
        f"{experiment} ({reply['status']}): {len(reply['suspects'])} agent(s) voted against "
        f"{reference['name']}, the {'identified' if reply['status'] == 'identified' else 'leading'}"
        f" arm (tolerance f = {reply['tolerance']})"
    )
    table = Table(title=title, title_justify="left")
    for column in ("agent", "votes", "voted against"):
        table.add_column(column, justify="right" if column == "votes" else "left")
    for suspect in reply["suspects"]:
        table.add_row(
            suspect["agent_id"], str(suspect["votes"]), _arm_names(doc, suspect["voted_against"])
        )
    console().print(table)
