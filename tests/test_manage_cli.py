"""`dexp experiments` and `dexp watch` against the real coordinator (uvicorn, real HTTP) on a real
redis-server: in-process through typer's CliRunner (fast), and as real processes where the exit
status and the streams are the point (a watch that ends, Ctrl-C). Votes are cast over HTTP by
enrolled agents, as the agents do. The renderers are checked on documents, without HTTP."""

from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import typing
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
import typer
from rich.console import Console
from typer.testing import CliRunner

from common.algorithms import default_dp_epsilon
from coordinator.api.models import ExperimentCreate
from dexp import manage
from dexp import watch as watch_module
from dexp.admin import AdminError, Unreachable
from dexp.cli import app
from dexp.watch import LineSink, LiveSink, final_lines, follow, watch_view
from tests.services.helpers import (
    ADMIN_TOKEN,
    coordinator,
    coordinator_settings,
    enroll_agents,
    redis_server,
)

pytestmark = pytest.mark.timeout(60)
SMALL = ["--delta", "0.2", "--eta", "0.5"]  # M = ceil(log 0.2 / log 0.5) = 3


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, str]]:
    with (
        redis_server() as redis_instance,
        coordinator(coordinator_settings(redis_instance.url)) as running,
    ):
        yield running.url, redis_instance.url


@pytest.fixture
def url(server: tuple[str, str]) -> str:
    """The coordinator's URL, its Redis emptied before the test."""
    client = redis.Redis.from_url(server[1])
    try:
        client.flushall()
    finally:
        client.close()
    return server[0]


@pytest.fixture
def http(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=10.0, trust_env=False) as client:
        yield client


def dexp(url: str, *args: str, input: str | None = None, **env: str | None) -> Any:
    """`dexp ARGS` in-process, with the coordinator and the admin token in the environment."""
    base: dict[str, str | None] = {"DEXP_COORDINATOR_URL": url, "DEXP_ADMIN_TOKEN": ADMIN_TOKEN}
    return CliRunner().invoke(app, list(args), env={**base, **env}, input=input)


def one_line(result: Any, code: int, start: str) -> str:
    """The result failed with `code` and one line on stderr starting with `start`."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert result.stderr.startswith(start), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    return str(result.stderr)


def vote(http: httpx.Client, experiment: str, token_headers: dict[str, str], arm: int) -> None:
    response = http.post(
        f"/v1/experiments/{experiment}/votes", json={"arm": arm, "epoch": 0}, headers=token_headers
    )
    assert response.status_code == 200, response.text


def spawn(url: str, *args: str) -> subprocess.Popen[str]:
    """`python -m dexp ARGS` as an operator runs it: stdout a pipe (not a terminal)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dexp", *args],
        env={"DEXP_COORDINATOR_URL": url, "PATH": os.environ.get("PATH", "")},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def free_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


# ----------------------------------------------------------------------------- the life of one


def test_create_list_show_vote_watch_reset_delete(url: str, http: httpx.Client) -> None:
    created = dexp(url, "experiments", "create", "life", "--arms", "A, B,C", *SMALL)
    assert created.exit_code == 0, created.stderr
    assert "experiment life" in created.stdout and "exploring: 3 of 3 arms remain" in created.stdout

    listed = dexp(url, "experiments", "list", DEXP_ADMIN_TOKEN=None)  # public: no token needed
    assert listed.exit_code == 0, listed.stderr
    assert "life" in listed.stdout and "exploring" in listed.stdout

    agents = enroll_agents(http, "life", 3)
    shown = dexp(url, "experiments", "show", "life", DEXP_ADMIN_TOKEN=None)
    assert shown.exit_code == 0, shown.stderr
    assert "3 distinct votes remove an arm" in shown.stdout
    words = " ".join(shown.stdout.split())
    assert "agents 3 (0 settled)" in words
    # 3 of the 3 agents erring, each at most (pi^2 / 24) 0.5: p^3, rounded up
    assert (
        "certified failure at most 0.0087 with 3 agents (within delta = 0.2); at most 1 with as "
        "many agents as the coordinator admits The best arm is voted out by error" in words
    )

    # A real `dexp watch` (stdout a pipe: one line per change) follows the votes to the end.
    watcher = spawn(url, "watch", "life", "--interval", "0.1")
    try:
        assert watcher.stdout is not None
        first = watcher.stdout.readline()
        assert "life exploring: 3 of 3 arms remain | A 0/3, B 0/3, C 0/3 | agents 3" in first
        for arm in (1, 2):
            for agent in agents:
                vote(http, "life", agent.headers, arm)
        out, err = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
        watcher.wait()
    assert watcher.returncode == 0, err
    assert err == ""
    lines = out.splitlines()
    assert lines[-2] == "life identified: best arm A (arm 0) after 6 messages, epoch 0"
    # the result the coordinator kept: decided at the last elimination, with its counters
    assert re.fullmatch(
        r"result: best arm A, decided \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z after "
        r"[\d,]+\.\d s; 6 messages, 6 votes",
        lines[-1],
    ), lines[-1]
    assert "A 0/3, B 3/3 out #1, C 3/3 out #2" in lines[-3]

    shown = dexp(url, "experiments", "show", "life")
    assert "identified: best arm A" in shown.stdout
    assert "result best arm A, decided " in " ".join(shown.stdout.split())
    listed = dexp(url, "experiments", "list")
    assert "best arm A, decided" in " ".join(listed.stdout.split())
    assert "out #1" in shown.stdout and "eliminations, in order" in shown.stdout

    reset = dexp(url, "experiments", "reset", "life")
    assert reset.exit_code == 0, reset.stderr
    assert reset.stdout.startswith("reset life: epoch 1 ")
    assert "3 of 3 arms remain, 0 votes" in reset.stdout
    doc = json.loads(dexp(url, "experiments", "show", "life", "--json").stdout)
    assert (doc["epoch"], doc["remaining_arms"], doc["votes"]) == (1, [0, 1, 2], [0, 0, 0])

    deleted = dexp(url, "experiments", "delete", "life", "--yes")
    assert (deleted.exit_code, deleted.stdout) == (0, "deleted experiment life\n")
    gone = dexp(url, "experiments", "show", "life")
    assert gone.stderr == "dexp experiments: 404 experiment 'life' does not exist\n"
    assert (gone.exit_code, gone.stdout) == (1, "")


def test_json_outputs_are_the_coordinators_documents(
    url: str, http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = dexp(url, "experiments", "create", "j0", "--arms", "X,Y", "--json", *SMALL)
    assert json.loads(created.stdout)["threshold"] == 3
    for name in ("j1", "j2", "j3", "j4"):
        assert dexp(url, "experiments", "create", name, "--arms", "X,Y").exit_code == 0
    monkeypatch.setattr(manage, "PAGE_SIZE", 2)  # five experiments: three pages, via `next`
    listed = json.loads(dexp(url, "experiments", "list", "--json").stdout)
    assert [e["id"] for e in listed["experiments"]] == ["j0", "j1", "j2", "j3", "j4"]
    assert listed["next"] is None

    a, b, c = enroll_agents(http, "j0", 3)  # X against Y 2:1, 3 agents, M = 3: tied
    vote(http, "j0", a.headers, 0)
    vote(http, "j0", b.headers, 1)
    vote(http, "j0", c.headers, 1)
    shown = json.loads(dexp(url, "experiments", "show", "j0", "--json").stdout)
    assert shown["status"] == "tied" and shown["votes"] == [1, 2]
    assert shown["outcome"]["status"] == "tied"
    assert [c["name"] for c in shown["outcome"]["candidates"]] == ["X", "Y"]
    assert "with the N = 3 agents enrolled" in shown["outcome"]["certified"]
    assert shown["certified_agents"] == shown["outcome"]["certified_agents"] == 3

    table = dexp(url, "experiments", "show", "j0")
    assert (
        "tie: candidates X, Y" in table.stdout
        and "certified: the best arm is among" in table.stdout
    )

    watched = dexp(url, "watch", "j0", "--json")  # already ended: its final document, at once
    assert watched.exit_code == 0, watched.stderr
    (final,) = [json.loads(line) for line in watched.stdout.splitlines()]
    assert final["status"] == "tied" and final["outcome"]["candidates"]
    lines = dexp(url, "watch", "j0").stdout.splitlines()
    assert lines[-3].startswith("j0 tied: candidates X, Y after 3 messages")
    assert lines[-2].startswith("certified: the best arm is among the candidates unless M = ")
    assert lines[-1].startswith("result: tied: X, Y, decided ")

    reset = json.loads(dexp(url, "experiments", "reset", "j0", "--json").stdout)
    assert (reset["reset"], reset["epoch"]) == (True, 1)


def test_create_sends_exactly_the_options_given(url: str) -> None:
    """An omitted option is not sent (the coordinator's defaults apply), and the options are
    ExperimentCreate's body fields, no more and no fewer."""
    plain = json.loads(dexp(url, "experiments", "create", "d", "--arms", "A,B", "--json").stdout)
    defaults = ExperimentCreate(id="d", arms=["A", "B"])
    assert plain["params"]["eta"] == defaults.eta and plain["threshold"] == 29
    assert plain["sigma"] is None

    given = [
        *("--algorithm", "ce", "--subroutine", "se", "--epsilon", "0.2", "--delta", "0.1"),
        *("--eta", "0.8", "--xi", "0.05", "--dp-epsilon", "0.5", "--beta", "0.4"),
        *("--phi", "0", "--tolerance", "2", "--every-arm", "--sigma", "0.5"),
    ]
    result = dexp(url, "experiments", "create", "all", "--arms", "A,B,C", "--json", *given)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["params"] == {
        **doc["params"],
        **{"algorithm": "ce", "subroutine": "se", "epsilon": 0.2, "delta": 0.1, "eta": 0.8},
        **{"xi": 0.05, "dp_epsilon": 0.5, "beta": 0.4, "tolerance": 2, "every_arm": True},
    }
    assert doc["sigma"] == 0.5

    experiments = typer.main.get_command(app).get_command(None, "experiments")  # type: ignore[arg-type]
    command = experiments.commands["create"]  # type: ignore[union-attr]
    options = {p.name for p in command.params} - {"coordinator_url", "admin_token", "as_json"}
    assert options == (set(ExperimentCreate.model_fields) - {"id"}) | {"experiment"}
    fields = ExperimentCreate.model_fields
    assert typing.get_args(fields["algorithm"].annotation) == manage.ALGORITHMS
    assert typing.get_args(fields["subroutine"].annotation) == manage.SUBROUTINES
    assert typing.get_args(fields["rewards"].annotation) == manage.REWARD_FAMILIES


def test_ldp_create_and_show_the_estimates_and_the_lift(url: str, http: httpx.Client) -> None:
    """`create --algorithm ldp` sends dp_epsilon (LDP's default when omitted) and B; `show`
    prints each arm's mean and interval, and the leader's lift over each arm with its interval."""
    made = dexp(
        url, "experiments", "create", "p", "--arms", "A,B,C", "--algorithm", "ldp", "--json"
    )
    assert made.exit_code == 0, made.stderr
    params = json.loads(made.stdout)["params"]
    assert params["dp_epsilon"] == default_dp_epsilon("ldp") and params["reports_per_agent"] == 1
    args = ("--algorithm", "ldp", "--dp-epsilon", "2", "--reports-per-agent", "3")
    result = dexp(url, "experiments", "create", "q", "--arms", "A,B,C", *args)
    assert result.exit_code == 0, result.stderr
    assert "each report 2-locally private, at most 3 per agent: 6 per agent" in result.stdout
    # reports: A's bits all 1, B's half, C's all 0 (published one by one: batch 1)
    for i, agent in enumerate(enroll_agents(http, "q", 12)):
        arm, bit = i % 3, [1, i % 2, 0][i % 3]
        reply = http.post(
            "/v1/experiments/q/reports",
            json={"arm": arm, "bit": bit, "seq": 1},
            headers=agent.headers,
        )
        assert reply.status_code == 200, reply.text
    doc = http.get("/v1/experiments/q").json()
    shown = dexp(url, "experiments", "show", "q")
    assert shown.exit_code == 0, shown.stderr
    text = " ".join(shown.stdout.replace("│", " ").split())  # the tables' cells, in order
    assert "12 reports" in text and "lift of the leader A" in text
    for e in doc["estimates"]:
        low, high = e["ci"]
        assert f"{e['mean']:.3f} [{low:.3f}, {high:.3f}]" in text, (e, text)
    for lift in doc["lift"]:
        low, high = lift["ci"]
        assert f"{lift['name']} {lift['mean']:+.3f} [{low:.3f}, {high:.3f}]" in text, (lift, text)
    assert "votes against" not in text and "threshold" not in text


# ----------------------------------------------------------------------------- errors


def test_refusals_are_one_line_and_status_1(url: str) -> None:
    assert dexp(url, "experiments", "create", "dup", "--arms", "A,B").exit_code == 0
    wrong = dexp(url, "experiments", "create", "x", "--arms", "A,B", DEXP_ADMIN_TOKEN="nope")
    assert one_line(wrong, 1, "dexp experiments: 401 ") == (
        "dexp experiments: 401 invalid key: neither the admin token nor a key (unknown or revoked)\n"
    )
    one_line(
        dexp(url, "experiments", "delete", "dup", "-y", "--admin-token", "no"),
        1,
        "dexp experiments: 401 ",
    )
    duplicate = dexp(url, "experiments", "create", "dup", "--arms", "A,B")
    assert "exists" in one_line(duplicate, 1, "dexp experiments: 409 ")
    invalid = dexp(url, "experiments", "create", "bad", "--arms", "A,B", "--delta", "2")
    assert "delta" in one_line(invalid, 1, "dexp experiments: 422 ")
    one_line(dexp(url, "experiments", "reset", "nope"), 1, "dexp experiments: 404 ")
    one_line(dexp(url, "watch", "nope"), 1, "dexp watch: 404 experiment 'nope' does not exist")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "one", "--arms", "A"], "at least two arms"),
        (["create", "one", "--arms", "A,a"], "the same arm"),
        (["create", "one", "--arms", "A,,B"], "empty arm name"),
        (["create", "one", "--arms", "A,B", "--algorithm", "ucb"], "'--algorithm'"),
        (["create", "one", "--arms", "A,B", "--eta", "high"], "'--eta'"),
        (["create", "o/ne", "--arms", "A,B"], "'EXPERIMENT'"),
        (["create", "one", "--arms", "A,B", "--reports-per-agent", "2"], "ldp only"),
        (
            ["create", "one", "--arms", "A,B", "--algorithm", "cde", "--reports-per-agent", "1"],
            "ldp only",
        ),
        (["create", "one", "--arms", "A,B", "--algorithm", "ldp", "--dp-epsilon", "0"], "(0, 10]"),
        (
            ["create", "one", "--arms", "A,B", "--algorithm", "ldp", "--reports-per-agent", "0"],
            "'--reports-per-agent'",
        ),
        (["show", "x", "--coordinator-url", "localhost:8000"], "'--coordinator-url'"),
        (["delete", "x"], "pass --yes"),  # stdin is not a terminal: nobody can confirm
    ],
)
def test_bad_arguments_exit_2_with_one_line(url: str, args: list[str], message: str) -> None:
    result = dexp(url, "experiments", *args)
    assert message in one_line(result, 2, "error: ")
    assert result.stdout == ""


def test_the_admin_token_is_required_where_the_call_needs_it(url: str) -> None:
    for args in (["create", "x", "--arms", "A,B"], ["reset", "x"], ["delete", "x", "--yes"]):
        result = dexp(url, "experiments", *args, DEXP_ADMIN_TOKEN=None)
        assert "DEXP_ADMIN_TOKEN" in one_line(result, 2, "error: ")


def test_an_unreachable_coordinator_is_one_line_and_status_1() -> None:
    away = free_url()
    listed = dexp(away, "experiments", "list")
    one_line(listed, 1, f"dexp experiments: cannot reach the coordinator at {away}: ")
    # watch retries first, saying so on stdout, then gives up with one line
    watched = dexp(away, "watch", "w", "--interval", "0.05", "--unreachable-seconds", "0.2")
    line = one_line(watched, 1, f"dexp watch: cannot reach the coordinator at {away}: ")
    assert re.search(r"\(unreachable for (0\.[2-9]|[1-9][.0-9]*) s\)$", line.strip()), line
    assert "retrying for up to 0.2 s" in watched.stdout


def test_several_coordinator_urls_the_first_that_accepts_answers(url: str) -> None:
    """DEXP_COORDINATOR_URL as the agents take it: a refused connection moves on to the next URL
    (the request was not sent, so nothing can act twice); every URL refused is one line."""
    away, other = free_url(), free_url()
    created = dexp(f"{away},{url}", "experiments", "create", "multi", "--arms", "A,B")
    assert created.exit_code == 0, created.stderr
    shown = dexp(f"{away}, {url}/", "experiments", "show", "multi", "--json")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["id"] == "multi"
    one_line(
        dexp(f"{away},{other}", "experiments", "list"),
        1,
        f"dexp experiments: cannot reach the coordinator at {other}: ",
    )
    one_line(dexp(f"{url},,{away}", "experiments", "list"), 2, "error: ")


def test_delete_asks_first_on_a_terminal(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert dexp(url, "experiments", "create", "ask", "--arms", "A,B").exit_code == 0
    monkeypatch.setattr(manage, "_stdin_is_interactive", lambda: True)
    kept = dexp(url, "experiments", "delete", "ask", input="n\n")
    assert "Delete experiment 'ask' (exploring, 0 agents" in kept.stderr
    assert kept.exit_code == 1 and kept.stderr.endswith("dexp experiments: ask not deleted\n")
    assert dexp(url, "experiments", "show", "ask").exit_code == 0
    deleted = dexp(url, "experiments", "delete", "ask", input="y\n")
    assert deleted.exit_code == 0  # (CliRunner echoes the answer on stdout)
    assert deleted.stdout.endswith("deleted experiment ask\n")


def test_watch_timeout_and_ctrl_c(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert dexp(url, "experiments", "create", "slow", "--arms", "A,B", *SMALL).exit_code == 0
    timed_out = dexp(url, "watch", "slow", "--interval", "0.05", "--timeout", "0.2")
    assert "still exploring after 0.2 s" in one_line(timed_out, 1, "dexp watch: slow ")
    assert timed_out.stdout.count("\n") == 1  # nothing changed: one line

    # A real SIGINT, through Python's own handler, at the second read of the experiment (the
    # handler set here: another test in this worker may have left its own)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    reads = []

    def read_then_interrupt(coordinator: Any, experiment: str) -> dict[str, Any]:
        reads.append(experiment)
        if len(reads) == 2:
            signal.raise_signal(signal.SIGINT)
        return manage.fetch_experiment(coordinator, experiment)

    monkeypatch.setattr(watch_module, "fetch_experiment", read_then_interrupt)
    try:
        interrupted = dexp(url, "watch", "slow", "--interval", "0.05")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (interrupted.exit_code, interrupted.stderr) == (130, "")
    assert "slow exploring" in interrupted.stdout and interrupted.stdout.count("\n") == 1


# ----------------------------------------------------------------------------- without HTTP


def document(**extra: Any) -> dict[str, Any]:
    """An experiment document as GET /v1/experiments/{id} returns it."""
    doc: dict[str, Any] = {
        "id": "demo",
        "arms": ["A", "B", "C"],
        "params": {"algorithm": "de", "subroutine": "ser3", "delta": 0.05, "tolerance": 0},
        "sigma": None,
        "threshold": 29,
        "remaining_arms": [0, 2],
        "votes": [3, 29, 17],
        "eliminations": [
            {"arm": 1, "name": "B", "votes": 29, "time": 1_700_000_000_123, "order": 1}
        ],
        "messages": 60,
        "ignored_messages": 2,
        "version": 1,
        "epoch": 0,
        "agents": 32,
        "settled_agents": 0,
        "created_at": 1_700_000_000_000,
        "status": "exploring",
        "warnings": ["32 agents < 2 x threshold - 1 = 57: ties possible"],
    }
    doc.update(extra)
    return doc


def render(renderable: Any) -> str:
    out = Console(width=200, record=True, file=io.StringIO())
    out.print(renderable)
    return out.export_text()


LOAD = {
    "run": "r1",
    "host": "box",
    "started_at": 1_700_000_000_000,
    "updated_at": 1_700_000_001_000,
    "epoch": 0,
    "activations": 12_345,
    "delivered": 12_400,
    "backlog": 55,
    "activations_per_second": 2_000.4,
}


def test_show_renders_the_new_fields_when_present_and_works_without() -> None:
    plain = render(manage.experiment_view(document()))
    assert "exploring: 2 of 3 arms remain" in plain and "60 (2 ignored)" in plain
    assert "out #1" in plain and "2023-11-14 22:13:20.123Z" in plain
    assert "ties possible" in plain and "load generator" not in plain
    assert "certified failure" not in plain  # a coordinator that does not say it
    certified = document(
        certified_failure=0.46,
        certified_agents=12,
        certified_failure_at_max_agents=None,
        certificate="The best arm is voted out by error with probability at most 0.46.",
    )
    shown = " ".join(render(manage.experiment_view(certified)).split())
    assert (
        "certified failure at most 0.46 with 12 agents (ABOVE delta = 0.05) The best arm is voted "
        "out" in shown
    )
    assert "certified epsilon" not in plain  # a voting experiment's: no e0
    private = document(certified_epsilon=math.log(8), hit_rate_uniform_prior=0.8)
    shown = " ".join(render(manage.experiment_view(private)).split())
    assert (
        "certified epsilon e0 = 2.08, for every prior (hit rate under a uniform prior: at most 0.8)"
        in shown
    )
    said = document(
        certified_epsilon=math.log(8), hit_rate_uniform_prior=0.8, privacy_certificate="e0 = 2.08."
    )
    assert "certified epsilon e0 = 2.08." in " ".join(render(manage.experiment_view(said)).split())
    richer = document(epoch_messages=41, load_generator=LOAD)
    text = render(manage.experiment_view(richer, now=1_700_000_003.0))
    assert "60 (2 ignored); 41 this epoch" in text
    assert (
        "run r1 on box, 12,345 activations (2,000/s), 12,400 delivered, backlog 55, epoch 0, "
        "updated 2 s ago" in text
    )
    nulls = {key: None for key in LOAD}
    assert "running (no figures yet)" in render(
        manage.experiment_view(document(load_generator=nulls))
    )


def test_watch_renders_a_view_and_plain_lines(capsys: pytest.CaptureFixture[str]) -> None:
    view = render(
        watch_view(
            document(epoch_messages=41, load_generator=LOAD), now=1_700_000_003.0, interval=1.0
        )
    )
    assert "demo  exploring: 2 of 3 arms remain" in view
    assert "agents 32, messages 60 (41 this epoch), epoch 0, version 1" in view
    assert "backlog 55" in view and "17/29" in view and "out #1" in view
    problem = render(watch_view(None, now=0.0, interval=1.0, problem="unreachable", experiment="x"))
    assert "x: waiting for the coordinator" in problem and "unreachable" in problem

    sink = LineSink("demo", 30.0)
    sink.update(document(), 0.0)
    sink.update(document(load_generator=LOAD), 1.0)  # only the load generator moved: no line
    sink.unreachable("cannot reach the coordinator", 0.0, 2.0)
    sink.unreachable("cannot reach the coordinator", 1.0, 3.0)  # once per outage
    done = document(status="identified", remaining_arms=[0], votes=[3, 29, 29])
    sink.final(done, {"best_arm": {"index": 0, "name": "A"}}, 4.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "00:00:00Z demo exploring: 2 of 3 arms remain | A 3/29, B 29/29 out #1, C 17/29 | "
        "agents 32, messages 60, epoch 0",
        "00:00:02Z demo: cannot reach the coordinator; retrying for up to 30 s",
        "00:00:04Z demo: the coordinator answers again",
        "00:00:04Z demo identified: best arm A | A 3/29, B 29/29 out #1, C 29/29 | "
        "agents 32, messages 60, epoch 0",
        "demo identified: best arm A (arm 0) after 60 messages, epoch 0",
    ]

    terminal = Console(force_terminal=True, width=120, file=io.StringIO())
    live = LiveSink(terminal, "demo", 1.0, 30.0)
    live.update(document(), 0.0)
    live.final(done, None, 1.0)
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.file.getvalue())  # type: ignore[attr-defined]
    assert "29/29" in screen and "demo identified: best arm A (arm 0)" in screen

    tied = document(status="tied", remaining_arms=[0, 2])
    assert final_lines(tied, {"candidates": [{"name": "A"}, {"name": "C"}], "certified": "so"}) == [
        "demo tied: candidates A, C after 60 messages, epoch 0",
        "certified: so",
    ]


class Flaky:
    """A coordinator that is away for its first two reads, then answers."""

    url = "http://stub"

    def __init__(self, replies: list[Any]) -> None:
        self.replies = replies

    def get(self, path: str, params: Any = None) -> Any:
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def unexpected(self, path: str, what: str) -> AdminError:
        return AdminError("dexp watch", what)


def test_follow_retries_an_outage_shorter_than_the_limit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    away = Unreachable("dexp watch", "cannot reach the coordinator at http://stub: ConnectError")
    done = document(status="identified", remaining_arms=[0], votes=[3, 29, 29])
    best = {"status": "identified", "best_arm": {"index": 0, "name": "A"}}
    now = [0.0]  # a clock that only sleeping moves

    def clock() -> float:
        return now[0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    stub = Flaky([document(), away, away, done, best])
    final = follow(
        stub,  # type: ignore[arg-type]
        "demo",
        LineSink("demo", 5.0),
        interval=1.0,
        unreachable_seconds=5.0,
        clock=clock,
        wall=clock,
        sleep=sleep,
    )
    assert final is done and stub.replies == []
    out = capsys.readouterr().out
    assert "retrying for up to 5 s" in out and "answers again" in out
    with pytest.raises(AdminError, match=r"ConnectError \(unreachable for 3 s\)"):
        follow(
            Flaky([away] * 10),  # type: ignore[arg-type]
            "demo",
            LineSink("demo", 3.0),
            interval=1.0,
            unreachable_seconds=3.0,
            clock=clock,
            sleep=sleep,
        )


def test_each_plan_row_is_created_by_the_command_it_prints(url: str) -> None:
    """`dexp plan` prints, for each configuration, the `dexp experiments create` command that makes
    it (issue 37, point 7): run against a real coordinator, each command creates an experiment with
    the row's threshold and certified e0 (its certified failure waits for the agents to enroll)."""
    planned = dexp(url, "plan", "--agents", "1024", "--delta", "0.05", "--trials", "0", "--json")
    assert planned.exit_code == 0, planned.output
    rows = json.loads(planned.stdout)["configurations"]
    assert {row["algorithm"] for row in rows} >= {"cde", "de", "ce", "dp-mase", "ldp"}
    for row in rows:
        words = row["create"].split()
        assert words[:3] == ["dexp", "experiments", "create"], row["create"]
        created = dexp(url, *words[1:], "--json")
        assert created.exit_code == 0, (row["create"], created.output)
        doc = json.loads(created.stdout)
        shown = json.loads(dexp(url, "experiments", "show", words[3], "--json").stdout)
        if row["algorithm"] != "ldp":  # LDP has no threshold: it decides on its estimates
            assert doc["threshold"] == row["threshold"], row
        assert shown["certified_epsilon"] == row["certified_epsilon"], row


def test_the_admin_views_have_commands(url: str, http: httpx.Client) -> None:
    """GET .../voters, .../agents and .../suspects had no command (issue 37, point 8): `dexp
    experiments voters|agents|suspects` show them, need the admin token, and --json is the reply."""
    created = dexp(url, "experiments", "create", "views", "--arms", "A,B,C", *SMALL)
    assert created.exit_code == 0, created.stderr
    a0, a1, a2 = enroll_agents(http, "views", 3)
    for agent, arms in ((a0, (1, 2)), (a1, (1,)), (a2, (0, 2))):  # votes A 1, B 2, C 2
        for arm in arms:
            vote(http, "views", agent.headers, arm)

    voters = json.loads(dexp(url, "experiments", "voters", "views", "--json").stdout)
    assert [sorted(ids) for ids in voters["voters"]] == [
        [a2.agent_id],
        sorted([a0.agent_id, a1.agent_id]),
        sorted([a0.agent_id, a2.agent_id]),
    ]
    shown = dexp(url, "experiments", "voters", "views")
    assert shown.exit_code == 0 and a2.agent_id in shown.stdout, shown.output

    agents = dexp(url, "experiments", "agents", "views")
    assert agents.exit_code == 0, agents.output
    assert "3 agent(s)" in agents.stdout and "B, C" in agents.stdout
    listed = json.loads(dexp(url, "experiments", "agents", "views", "--json").stdout)
    assert [a["agent_id"] for a in listed["agents"]] == [a0.agent_id, a1.agent_id, a2.agent_id]

    suspects = dexp(url, "experiments", "suspects", "views")
    assert suspects.exit_code == 0, suspects.output
    words = " ".join(suspects.stdout.split())
    assert "1 agent(s) voted against A, the leading arm" in words and a2.agent_id in words

    for view in ("voters", "agents", "suspects"):
        refused = dexp(url, "experiments", view, "views", DEXP_ADMIN_TOKEN="not-the-admin-token")
        assert refused.exit_code == 1 and "401" in refused.stderr, (view, refused.output)
