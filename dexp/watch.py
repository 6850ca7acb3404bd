"""`dexp watch ID`: follow one experiment until it ends, without a browser or curl in a loop.

It polls GET /v1/experiments/{id} (public: no token needed) every --interval seconds and shows
each arm's votes against the threshold, the status, agents, messages and epoch, and the simulated
environment's progress when the load generator publishes it. On a terminal this is a live view
(rich Live); otherwise (a pipe, a log, CI) one plain line per change, so the output stays readable
as a file; --json prints the coordinator's document, one per line, per change.

It ends when the experiment is identified or tied: the final state (the best arm, or the tie's
candidates and what is certified about them) and exit 0. Exit 1 with one line when the experiment
does not exist (or is deleted meanwhile), when the coordinator stays unreachable for
--unreachable-seconds (until then it says so and retries: a coordinator restart or a Redis failover
should not end a watch), or when --timeout passes while it is still exploring. Ctrl-C exits 130
without a message: stopping a watch is not an error.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, Protocol

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from dexp.admin import (
    DEFAULT_COORDINATOR_URL,
    AdminError,
    AdminTokenOption,
    Coordinator,
    CoordinatorUrlOption,
    ExperimentArgument,
    Unreachable,
    check_experiment,
    connect,
)
from dexp.manage import (
    ENDED,
    arm_label,
    arms_table,
    console,
    fetch_experiment,
    fetch_outcome,
    load_generator_text,
    result_text,
    status_text,
)

COMMAND = "dexp watch"
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it

# ----------------------------------------------------------------------------- rendering


def _clock(now: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(now))


def change_key(doc: dict[str, Any]) -> tuple[Any, ...]:
    """What makes a new line: the votes, the arms, the status and the counters. Not the load
    generator's progress, which moves at every poll and would make a line per interval."""
    return (
        doc.get("status"),
        tuple(doc.get("votes", [])),
        tuple(doc.get("remaining_arms", [])),
        doc.get("agents"),
        doc.get("settled_agents"),
        doc.get("messages"),
        doc.get("epoch"),
        doc.get("epoch_messages"),
    )


def counters_text(doc: dict[str, Any]) -> str:
    messages = f"messages {doc.get('messages')}"
    if doc.get("epoch_messages") is not None:
        messages += f" ({doc['epoch_messages']} this epoch)"
    return f"agents {doc.get('agents')}, {messages}, epoch {doc.get('epoch')}"


def votes_text(doc: dict[str, Any]) -> str:
    """`A 0/3, B 3/3 out #1, C 1/3`: each arm's votes out of the threshold."""
    threshold = doc.get("threshold")
    order = {int(e["arm"]): e.get("order") for e in doc.get("eliminations", [])}
    return ", ".join(
        f"{arm_label(doc, arm)} {votes}/{threshold}"
        + (f" out #{order[arm]}" if arm in order else "")
        for arm, votes in enumerate(doc.get("votes", []))
    )


def state_line(doc: dict[str, Any], now: float) -> str:
    """One plain line of the state, for a pipe or a log."""
    line = (
        f"{_clock(now)} {doc.get('id')} {status_text(doc)} | {votes_text(doc)} | "
        f"{counters_text(doc)}"
    )
    if isinstance(doc.get("load_generator"), dict):
        line += f" | load generator: {load_generator_text(doc['load_generator'], now)}"
    return line


def final_lines(doc: dict[str, Any], outcome: dict[str, Any] | None) -> list[str]:
    """The verdict: the best arm, or the tie's candidates and what is certified about them."""
    experiment = doc.get("id")
    after = f"after {doc.get('messages')} messages, epoch {doc.get('epoch')}"
    if doc.get("status") == "identified":
        best = (outcome or {}).get("best_arm") or {}
        arm = best.get("index", (doc.get("remaining_arms") or [None])[0])
        name = best.get("name", arm_label(doc, arm) if isinstance(arm, int) else "?")
        return [f"{experiment} identified: best arm {name} (arm {arm}) {after}", *kept(doc)]
    candidates = (outcome or {}).get("candidates") or [
        {"name": arm_label(doc, a)} for a in doc.get("remaining_arms", [])
    ]
    lines = [
        f"{experiment} tied: candidates {', '.join(str(c['name']) for c in candidates)} {after}"
    ]
    if outcome and outcome.get("certified"):
        lines.append(f"certified: {outcome['certified']}")
    return lines + kept(doc)


def kept(doc: dict[str, Any]) -> list[str]:
    """The result the coordinator kept (with the load generator's figures at the decision)."""
    return [f"result: {result_text(doc['result'])}"] if isinstance(doc.get("result"), dict) else []


def watch_view(
    doc: dict[str, Any] | None,
    *,
    now: float,
    interval: float,
    problem: str | None = None,
    experiment: str = "",
) -> Group:
    """The live view: status, counters, the arms' bars against the threshold, the load
    generator, and what is wrong right now (an unreachable coordinator)."""
    parts: list[RenderableType] = []
    if doc is None:
        parts.append(Text(f"{experiment}: waiting for the coordinator", style="bold"))
    else:
        parts.append(Text(f"{doc.get('id')}  {status_text(doc)}", style="bold"))
        parts.append(Text(counters_text(doc) + f", version {doc.get('version')}"))
        if isinstance(doc.get("load_generator"), dict):
            parts.append(Text(f"load generator: {load_generator_text(doc['load_generator'], now)}"))
        parts.append(arms_table(doc))
        # e.g. fewer agents than the threshold: why nothing moves
        parts += [Text(f"warning: {w}", style="yellow") for w in doc.get("warnings", [])]
    if problem:
        parts.append(Text(problem, style="bold red"))
    parts.append(
        Text(f"refreshed {_clock(now)}, every {interval:g} s; Ctrl-C to stop", style="dim")
    )
    return Group(*parts)


# ----------------------------------------------------------------------------- outputs


class Sink(Protocol):
    """Where the watch shows what it sees: a live view, plain lines or JSON lines."""

    def update(self, doc: dict[str, Any], now: float) -> None: ...

    def unreachable(self, message: str, seconds: float, now: float) -> None: ...

    def final(self, doc: dict[str, Any], outcome: dict[str, Any] | None, now: float) -> None: ...

    def close(self) -> None: ...


class LineSink:
    """One plain line per change on stdout, flushed (a pipe would hold it otherwise)."""

    def __init__(self, experiment: str, limit: float) -> None:
        self.experiment = experiment
        self.limit = limit
        self.last: tuple[Any, ...] | None = None
        self.away = False

    def _write(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def update(self, doc: dict[str, Any], now: float) -> None:
        if self.away:
            self._write(f"{_clock(now)} {self.experiment}: the coordinator answers again")
            self.away = False
        key = change_key(doc)
        if key != self.last:
            self.last = key
            self._write(state_line(doc, now))

    def unreachable(self, message: str, seconds: float, now: float) -> None:
        if not self.away:  # once per outage
            self.away = True
            self._write(
                f"{_clock(now)} {self.experiment}: {message}; retrying for up to {self.limit:g} s"
            )

    def final(self, doc: dict[str, Any], outcome: dict[str, Any] | None, now: float) -> None:
        self.update(doc, now)
        for line in final_lines(doc, outcome):
            self._write(line)

    def close(self) -> None:
        pass


class JsonSink:
    """The coordinator's document, one compact JSON line per change; the last one carries
    GET .../best-arm's reply under `outcome`. Outages go to stderr: stdout stays JSON."""

    def __init__(self, experiment: str, limit: float) -> None:
        self.experiment = experiment
        self.limit = limit
        self.last: tuple[Any, ...] | None = None
        self.away = False

    def update(self, doc: dict[str, Any], now: float) -> None:
        self.away = False
        key = change_key(doc)
        if key != self.last:
            self.last = key
            sys.stdout.write(json.dumps(doc) + "\n")
            sys.stdout.flush()

    def unreachable(self, message: str, seconds: float, now: float) -> None:
        if not self.away:
            self.away = True
            sys.stderr.write(f"{self.experiment}: {message}; retrying for up to {self.limit:g} s\n")
            sys.stderr.flush()

    def final(self, doc: dict[str, Any], outcome: dict[str, Any] | None, now: float) -> None:
        sys.stdout.write(json.dumps({**doc, "outcome": outcome}) + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        pass


class LiveSink:
    """A rich Live view, redrawn at every poll (the elapsed outage and the load generator's
    progress move even when the votes do not); the last frame stays on the screen."""

    def __init__(self, out: Console, experiment: str, interval: float, limit: float) -> None:
        self.out = out
        self.experiment = experiment
        self.interval = interval
        self.limit = limit
        self.doc: dict[str, Any] | None = None
        self.live = Live(console=out, auto_refresh=False, transient=False)
        self.live.start()

    def _show(self, now: float, problem: str | None = None) -> None:
        view = watch_view(
            self.doc, now=now, interval=self.interval, problem=problem, experiment=self.experiment
        )
        self.live.update(view, refresh=True)

    def update(self, doc: dict[str, Any], now: float) -> None:
        self.doc = doc
        self._show(now)

    def unreachable(self, message: str, seconds: float, now: float) -> None:
        self._show(
            now,
            f"unreachable for {seconds:.0f} s, retrying (gives up after {self.limit:g} s): "
            f"{message}",
        )

    def final(self, doc: dict[str, Any], outcome: dict[str, Any] | None, now: float) -> None:
        self.update(doc, now)
        self.live.stop()
        for line in final_lines(doc, outcome):
            bold = not line.startswith("certified:")
            self.out.print(line, style="bold" if bold else None, highlight=False)

    def close(self) -> None:
        self.live.stop()


# ----------------------------------------------------------------------------- the loop


def follow(
    coordinator: Coordinator,
    experiment: str,
    sink: Sink,
    *,
    interval: float,
    unreachable_seconds: float,
    timeout: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Poll until the experiment is identified or tied and return its final document. A
    refusal (404: no such experiment, or deleted meanwhile) ends it at once; an unreachable
    coordinator (no answer, 502/503/504) is retried until `unreachable_seconds` have passed
    since its last answer."""
    start = clock()
    away_since: float | None = None
    doc: dict[str, Any] | None = None
    problem = ""
    while True:
        try:
            seen = fetch_experiment(coordinator, experiment)
            outcome = fetch_outcome(coordinator, experiment) if seen["status"] in ENDED else None
        except Unreachable as exc:
            now = clock()
            away_since = now if away_since is None else away_since
            problem = str(exc)
            if now - away_since >= unreachable_seconds:
                raise AdminError(
                    COMMAND, f"{exc} (unreachable for {round(now - away_since, 1):g} s)"
                ) from None
            sink.unreachable(problem, now - away_since, wall())
        else:
            away_since, doc = None, seen
            # the outcome is read after the document: final only when both say it ended
            if outcome is not None and outcome.get("status") == seen["status"]:
                sink.final(seen, outcome, wall())
                return seen
            sink.update(seen, wall())
        elapsed = clock() - start
        if timeout is not None and elapsed >= timeout:
            if doc is None:
                raise AdminError(
                    COMMAND, f"no answer about {experiment} within {timeout:g} s: {problem}"
                )
            raise AdminError(
                COMMAND,
                f"{experiment} still {doc.get('status')} after {timeout:g} s (--timeout): "
                f"{status_text(doc)}; {votes_text(doc)}",
            )
        pause = interval if timeout is None else min(interval, timeout - elapsed)
        sleep(max(pause, 0.0))


def watch(
    experiment: ExperimentArgument,
    interval: Annotated[
        float, typer.Option(min=0.05, help="Seconds between two reads of the experiment.")
    ] = 1.0,
    unreachable_seconds: Annotated[
        float,
        typer.Option(min=0, help="Give up (exit 1) when the coordinator is unreachable this long."),
    ] = 30.0,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Give up (exit 1) after this many seconds if it has not ended.",
            show_default=False,
        ),
    ] = None,
    coordinator_url: CoordinatorUrlOption = DEFAULT_COORDINATOR_URL,
    admin_token: AdminTokenOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON document per change instead of a view.")
    ] = False,
) -> None:
    """Follow EXPERIMENT live until it is identified or tied: each arm's votes against the
    threshold, status, agents, messages, epoch. Exit 0 when it ends, 1 if it does not exist, the
    coordinator stays unreachable or --timeout passes, 130 on Ctrl-C."""
    check_experiment(experiment)
    # A request never waits longer than the outage the watch tolerates (at least a second).
    request_timeout = max(1.0, min(10.0, unreachable_seconds))
    coordinator = connect(
        COMMAND, coordinator_url, admin_token, token_required=False, timeout=request_timeout
    )
    out = console()
    sink: Sink
    if as_json:
        sink = JsonSink(experiment, unreachable_seconds)
    elif out.is_terminal:
        sink = LiveSink(out, experiment, interval, unreachable_seconds)
    else:
        sink = LineSink(experiment, unreachable_seconds)
    try:
        follow(
            coordinator,
            experiment,
            sink,
            interval=interval,
            unreachable_seconds=unreachable_seconds,
            timeout=timeout,
        )
    except KeyboardInterrupt:
        raise typer.Exit(INTERRUPTED) from None
    finally:
        sink.close()
        coordinator.close()
