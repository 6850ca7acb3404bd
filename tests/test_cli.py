"""The `dexp` command line: JSON shape, reproducibility, readable output, one-line errors with exit
status 2, and `dexp reproduce` on a tiny configuration (reference engine, so it does not depend on
the compiled simulator)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from common.certificate import LOCAL_ERROR_FACTORS
from dexp.cli import app
from dexp.experiments import EXPERIMENTS
from dexp.reproduce import SUMMARY_COLUMNS, TRIAL_COLUMNS, build_points

ENGINE = ["--engine", "reference"]
# Two well-separated arms: a DE trial with 32 agents takes a few thousand activations.
EASY = ["--means", "0.9,0.1", *ENGINE]


def run_dexp(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dexp.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def simulate_json(*args: str) -> dict:
    proc = run_dexp("simulate", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ----------------------------------------------------------------------------- simulate


def invoke_json(*args: str) -> dict:
    result = CliRunner().invoke(app, ["simulate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_json_shape_for_the_defaults() -> None:
    # A budget cuts the trials short: the shape is what matters here.
    doc = simulate_json(*ENGINE, "--trials", "2", "--budget", "3000")
    assert set(doc) == {
        "config", "threshold", "certified_failure", "certificate", "certified_epsilon",
        "hit_rate_uniform_prior", "privacy_certificate", "warnings", "trials", "summary"
    }  # fmt: skip
    # de: no e0, no hit-rate bound
    assert doc["certified_epsilon"] is None and doc["hit_rate_uniform_prior"] is None
    assert doc["privacy_certificate"] is None
    assert doc["threshold"] == 29
    # P(Bin(32, (pi^2 / 24) 0.9) >= 29): 29 of the 32 agents erring
    assert doc["certified_failure"] == pytest.approx(3.9866e-10, rel=1e-4)
    assert "29 of the 32 agents to err" in doc["certificate"]
    assert not any(w.startswith("certified failure") for w in doc["warnings"])  # 4e-10 <= delta
    config = doc["config"]
    assert config["problem"] == "feraud-1"
    assert config["agents"] == 32
    assert config["algorithm"] == "de"
    assert config["subroutine"] == "ser3"
    assert config["activation"] == "uniform"
    assert config["stop"] == "all-agents"
    assert config["engine"] == "reference"
    assert config["pulls"] == "one" and config["every_arm"] is False
    assert config["means"] == [0.7, 0.5, 0.3] + [0.1] * 7
    assert config["budget"] == 3000 and config["trials"] == 2 and config["seed"] == 0
    for key in ("epsilon", "delta", "eta", "xi", "dp_epsilon", "beta", "phi", "workers"):
        assert key in config

    assert len(doc["trials"]) == 2
    for trial in doc["trials"]:
        assert isinstance(trial["sample_complexity"], int) and trial["sample_complexity"] == 3000
        assert isinstance(trial["messages"], int) and 0 <= trial["messages"] <= 29 * 10 - 1
        assert isinstance(trial["best_arm"], int) and 0 <= trial["best_arm"] < 10
        assert isinstance(trial["correct"], bool)
        assert trial["stopped_by"] == "budget"
        assert isinstance(trial["eliminations"], list)

    summary = doc["summary"]
    for metric in ("sample_complexity", "messages"):
        assert isinstance(summary[metric]["mean"], float)
        assert isinstance(summary[metric]["std"], float)
    assert summary["sample_complexity"]["mean"] == 3000.0
    assert isinstance(summary["failure_rate"], float)
    assert 0.0 <= summary["failure_rate"] <= 1.0
    assert summary["stopped_by"] == {"budget": 2}


def test_json_for_a_finished_run() -> None:
    doc = invoke_json(*EASY, "--trials", "2")
    assert doc["threshold"] == 29
    assert doc["config"]["problem"] is None and doc["config"]["means"] == [0.9, 0.1]
    for trial in doc["trials"]:
        assert trial["stopped_by"] == "all-agents"
        assert trial["messages"] == 29  # K = 2: one arm out, M votes against it
        assert trial["best_arm"] == 0 and trial["correct"] is True
        assert trial["eliminations"][0]["arm"] == 1
    assert doc["summary"]["failure_rate"] == 0.0


def test_json_for_every_arm_and_global_stop() -> None:
    doc = invoke_json(
        *EASY, "--algorithm", "ce", "--xi", "0.1", "--pulls", "every-arm", "--stop", "global",
        "--trials", "2",
    )  # fmt: skip
    # K = 2: eta_xi = 1 - 0.1 / 0.9 = 0.889, M = ceil(log 0.05 / log 0.889) = 26
    assert doc["threshold"] == 26
    assert doc["config"]["every_arm"] is True
    assert doc["config"]["stop"] == "global"
    assert len(doc["trials"]) == 2
    assert all(t["stopped_by"] == "global" for t in doc["trials"])


def test_same_seed_same_json_other_seed_other_trials() -> None:
    args = [*EASY, "--trials", "3", "--seed", "7"]
    first = run_dexp("simulate", *args, "--json")
    second = run_dexp("simulate", *args, "--json")
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout
    other = invoke_json(*EASY, "--trials", "3", "--seed", "8")
    assert other["trials"] != json.loads(first.stdout)["trials"]

    # In-process (CliRunner) and with two worker processes: the same trials.
    result = CliRunner().invoke(app, ["simulate", *args, "--workers", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["trials"] == json.loads(first.stdout)["trials"]


def test_readable_output() -> None:
    result = CliRunner().invoke(app, ["simulate", *EASY, "--trials", "2"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    for needle in ("threshold M", "29", "stop rule", "all-agents", "summary of 2 trials"):
        assert needle in text
    for needle in ("sample complexity", "messages", "failure rate", "stopped by"):
        assert needle in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)

    result = CliRunner().invoke(
        app, ["simulate", *EASY, "--trials", "1", "--algorithm", "independent", "--stop", "global"]
    )
    assert result.exit_code == 0, result.output
    assert "none (no votes)" in result.stdout
    assert "global" in result.stdout


# ----------------------------------------------------------------------------- errors

BAD_SIMULATE = [
    (["--agents", "10"], "agents=10 is invalid: must be >= the vote threshold M=29"),
    (["--means", "0.5"], "arms=1 is invalid"),
    (["--activation", "bogus"], "activation='bogus' is invalid"),
    (["--rewards", "foo"], "rewards='foo' is invalid"),
    (["--means", "0.5,x"], "means='0.5,x' is invalid"),
    (["--means", "0.5,0.4", "--rewards", "gaussian:-1"], "rewards='gaussian:-1' is invalid"),
    (["--xi", "0.3", "--algorithm", "ce"], "xi=0.3 is invalid"),
    (["--xi", "0.1"], "xi=0.1 is invalid: vote dropping is for --algorithm ce only"),
    (["--eta", "1.5"], "eta=1.5 is invalid: must be in (0, 1)"),
    (["--algorithm", "magic"], "algorithm='magic' is invalid"),
    (["--subroutine", "ser9"], "subroutine='ser9' is invalid"),
    (["--pulls", "some"], "pulls='some' is invalid"),
    (["--stop", "never"], "stop='never' is invalid"),
    (["--engine", "warp"], "engine='warp' is invalid"),
    (["--trials", "0"], "trials=0 is invalid"),
    (["--problem", "nope"], "problem='nope' is invalid"),
    (["--problem", "feraud-1", "--means", "0.5,0.4", "--drift", "0.1"], "drift=(0.1,) is invalid"),
    (["--agents", "x"], "--agents"),
    (["--bogus-option"], "No such option: --bogus-option"),
]


def _assert_one_line_error(code: int, stdout: str, stderr: str, needle: str) -> None:
    assert code == 2, (stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    assert needle in lines[0]
    assert "Traceback" not in stderr
    assert stdout == ""


@pytest.mark.parametrize(
    ("args", "needle"), BAD_SIMULATE, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_bad_simulate_arguments_in_process(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["simulate", *ENGINE, *args, "--json"])
    _assert_one_line_error(result.exit_code, result.stdout, result.stderr, needle)


@pytest.mark.parametrize(
    "args",
    [
        ["--agents", "10"],
        ["--means", "0.5"],
        ["--activation", "bogus"],
        ["--rewards", "foo"],
        ["--xi", "0.3", "--algorithm", "ce"],
        ["--agents", "x"],
    ],
    ids=" ".join,
)
def test_bad_simulate_arguments_in_a_subprocess(args: list[str]) -> None:
    proc = run_dexp("simulate", *ENGINE, *args)
    needle = dict((tuple(a), n) for a, n in BAD_SIMULATE)[tuple(args)]
    _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nope", "--out", "x"], "experiment='nope' is invalid"),
        ([], "missing experiment NAME"),
        (["feraud-fig1"], "missing option --out"),
        (["feraud-fig1", "--out", "x", "--agents", "16"], "agents=16 is invalid"),
        (["feraud-fig1", "--out", "x", "--agents", "a,b"], "agents='a,b' is invalid"),
        (["feraud-fig1", "--out", "x", "--series", "DE-ME"], "series='DE-ME' is invalid"),
        (["feraud-fig1", "--out", "x", "--trials", "0"], "trials=0 is invalid"),
    ],
)
def test_bad_reproduce_arguments(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["reproduce", *ENGINE, *args])
    _assert_one_line_error(result.exit_code, result.stdout, result.stderr, needle)
    assert not (tmp_path / "x").exists()


def test_bad_reproduce_argument_in_a_subprocess(tmp_path: Path) -> None:
    proc = run_dexp("reproduce", "feraud-fig1", "--out", "x", "--agents", "16", cwd=tmp_path)
    _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "agents=16 is invalid")
    assert not (tmp_path / "x").exists()


def test_bad_command() -> None:
    result = CliRunner().invoke(app, ["simulat"])
    _assert_one_line_error(result.exit_code, result.stdout, result.stderr, "No such command")


# ----------------------------------------------------------------------------- reproduce


def test_reproduce_list() -> None:
    result = CliRunner().invoke(app, ["reproduce", "--list"])
    assert result.exit_code == 0, result.output
    for name in ("feraud-fig1", "feraud-fig2a", "feraud-fig2b", "rio-fig1", "rio-powerlaw"):
        assert name in result.stdout


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_experiment_definitions_are_valid(name: str) -> None:
    exp = EXPERIMENTS[name]
    points = build_points(exp, exp.agents, exp.series)
    assert len(points) == len(exp.series) * len(exp.agents)
    labels = set(exp.labels)
    assert len(labels) == len(exp.series)
    for figure in exp.figures:
        for panel in figure.panels:
            assert set(panel.series) <= labels


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_reproduce_tiny_feraud(tmp_path: Path) -> None:
    # The central baselines are cheap; a voting series runs in the Rio test below.
    out = tmp_path / "results"
    proc = run_dexp(
        "reproduce", "feraud-fig1", "--out", str(out), "--agents", "32,64", "--trials", "2",
        "--series", "central-SER3", "--series", "central-LUCB", *ENGINE,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "central-SER3" in proc.stdout and "central-LUCB" in proc.stdout

    rows = _read_csv(out / "feraud-fig1.csv")
    assert list(rows[0]) == list(TRIAL_COLUMNS)
    assert len(rows) == 2 * 2 * 2  # series x N x trials
    assert [(r["series"], r["n_agents"], r["trial"]) for r in rows] == [
        (s, n, t) for s in ("central-SER3", "central-LUCB") for n in ("32", "64") for t in "01"
    ]
    assert {r["experiment"] for r in rows} == {"feraud-fig1"}
    assert {r["seed"] for r in rows} == {"0"}
    assert {r["threshold"] for r in rows} == {""}  # the baselines do not vote
    assert {r["correct"] for r in rows} <= {"True", "False"}
    for r in rows:  # 0-privacy: N - 1 broadcasts per activation
        assert int(r["messages"]) == int(r["sample_complexity"]) * (int(r["n_agents"]) - 1)

    summary = _read_csv(out / "feraud-fig1_summary.csv")
    assert list(summary[0]) == list(SUMMARY_COLUMNS)
    assert [(r["series"], r["n_agents"]) for r in summary] == [
        ("central-SER3", "32"),
        ("central-SER3", "64"),
        ("central-LUCB", "32"),
        ("central-LUCB", "64"),
    ]
    for r in summary:
        low = float(r["sample_complexity_ci95_low"])
        high = float(r["sample_complexity_ci95_high"])
        assert low <= float(r["sample_complexity_mean"]) <= high
        assert 0.0 <= float(r["failure_rate"]) <= 1.0
        assert int(r["failures"]) == round(float(r["failure_rate"]) * int(r["trials"]))
        failure_low, failure_high = float(r["failure_ci95_low"]), float(r["failure_ci95_high"])
        assert 0.0 <= failure_low <= float(r["failure_rate"]) <= failure_high <= 1.0
        assert failure_high > 0.0  # two trials cannot show a failure rate of 0
        # one central run at delta = 0.05: the subroutine's constant times delta
        factor = LOCAL_ERROR_FACTORS["ser3" if r["series"] == "central-SER3" else "lucb"]
        assert float(r["certified_failure"]) == pytest.approx(factor * 0.05)

    for png in ("feraud-fig1_sample_complexity.png", "feraud-fig1_messages.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    meta = json.loads((out / "feraud-fig1.json").read_text())
    assert meta["engine"] == "reference" and meta["trials"] == 2 and meta["agents"] == [32, 64]

    # A row's trial is `dexp simulate` with the same parameters, seed and trial index.
    doc = invoke_json(*ENGINE, "--algorithm", "central", "--agents", "64", "--trials", "2")
    assert [t["sample_complexity"] for t in doc["trials"]] == [
        int(r["sample_complexity"]) for r in rows if r["series"] == "central-SER3"
    ][2:]


def test_reproduce_tiny_rio_in_process(tmp_path: Path) -> None:
    out = tmp_path / "rio"
    result = CliRunner().invoke(
        app,
        [
            "reproduce", "rio-fig1", "--out", str(out), "--agents", "32", "--trials", "2",
            "--series", "DP-MASE eps=0.25", "--series", "central-SE", "--workers", "2", *ENGINE,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = _read_csv(out / "rio-fig1.csv")
    assert len(rows) == 4
    dp = [r for r in rows if r["series"] == "DP-MASE eps=0.25"]
    assert {r["threshold"] for r in dp} == {"5"}  # ceil(log 0.05 / log 0.5)
    assert {r["every_arm"] for r in rows} == {"True"}
    assert {r["stop"] for r in rows} == {"global"}
    assert {r["dp_epsilon"] for r in dp} == {"0.25"}
    assert all(int(r["messages"]) >= 5 for r in dp)
    assert (out / "rio-fig1_sample_complexity.png").exists()


def test_reproduce_without_plots(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "reproduce", "rio-powerlaw", "--out", str(tmp_path), "--agents", "32", "--trials", "1",
            "--series", "DP-MASE eps=0.1 power", "--no-plots", "--budget", "500", *ENGINE,
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = _read_csv(tmp_path / "rio-powerlaw.csv")
    assert row["activation"] == "power:0:0.8"
    assert row["stopped_by"] == "budget" and row["sample_complexity"] == "500"
    (summary,) = _read_csv(tmp_path / "rio-powerlaw_summary.csv")
    assert summary["sample_complexity_ci95_low"] == "nan"  # one trial: no interval
    assert not list(tmp_path.glob("*.png"))


# ----------------------------------------------------------------------------- Byzantine agents

# M = ceil(log 0.05 / log 0.5) = 5 votes; two arms, so the attacked arm is arm 0.
SMALL_M = [*EASY, "--eta", "0.5", "--epsilon", "0.5", "--agents", "12"]


def test_json_defaults_have_no_tolerance_and_no_attackers() -> None:
    doc = invoke_json(*EASY, "--trials", "1")
    assert doc["config"]["tolerance"] == 0 and doc["config"]["attackers"] == 0
    assert doc["threshold"] == 29
    assert doc["trials"][0]["suspects"] == 0  # a count; nobody voted against the winner


def test_attackers_without_tolerance_remove_the_best_arm() -> None:
    doc = invoke_json(*SMALL_M, "--attackers", "5", "--trials", "3")
    assert doc["config"]["attackers"] == 5 and doc["config"]["tolerance"] == 0
    assert doc["threshold"] == 5
    for trial in doc["trials"]:
        assert trial["eliminations"][0]["arm"] == 0  # the five attackers' votes suffice
        assert trial["best_arm"] == 1 and trial["correct"] is False
        assert trial["suspects"] == 0  # nobody voted against the arm that won
    assert doc["summary"]["failure_rate"] == 1.0
    # the 5 attackers alone reach the threshold: nothing is certified, and it says so
    assert doc["certified_failure"] == 1.0 and doc["summary"]["best_arm_voted_out"] == 3
    assert "voted out by the 5 lying agents alone" in doc["certificate"]
    assert any(w.startswith("certified failure 1 is above delta") for w in doc["warnings"])


def test_tolerance_f_withstands_f_attackers() -> None:
    # 15 agents: the 10 honest ones reach the threshold 10 (with 12, no arm could ever leave and
    # every trial would end tied)
    doc = invoke_json(
        *SMALL_M, "--agents", "15", "--attackers", "5", "--tolerance", "5", "--trials", "3"
    )
    assert doc["config"]["tolerance"] == 5
    assert doc["threshold"] == 10  # M + f
    for trial in doc["trials"]:
        assert trial["best_arm"] == 0 and trial["correct"] is True
        assert trial["suspects"] >= 5  # every attacker voted against the returned arm
    assert doc["summary"]["failure_rate"] == 0.0
    # 5 of the 10 honest agents must err: P(Bin(10, (pi^2 / 24) 0.5) >= 5)
    assert doc["certified_failure"] == pytest.approx(0.036649, rel=1e-4)


def test_readable_output_shows_tolerance_attackers_and_suspects() -> None:
    args = [*SMALL_M, "--attackers", "2", "--tolerance", "2", "--trials", "2"]
    result = CliRunner().invoke(app, ["simulate", *args])
    assert result.exit_code == 0, result.output
    text = result.stdout
    for needle in (
        "7 (M=5 + tolerance f=2)",
        "tolerance f=2; attackers 2 (agents 0-1 vote against arm 0 only)",
        "suspects",
        "every attacker a suspect in 2/2",
    ):
        assert needle in text, text
    result = CliRunner().invoke(app, ["simulate", *EASY, "--trials", "1"])
    assert result.exit_code == 0, result.output
    assert "tolerance f=0; attackers 0" in result.stdout


BAD_BYZANTINE = [
    (["--tolerance", "-1"], "tolerance=-1 is invalid: must be an integer >= 0"),
    (["--tolerance", "1.5"], "--tolerance"),
    (["--tolerance", "1", "--algorithm", "central"], "tolerance=1 is invalid"),
    (["--tolerance", "4"], "agents=32 is invalid: must be >= the vote threshold M + f = 29 + 4"),
    (["--attackers", "-1"], "attackers=-1 is invalid"),
    (["--attackers", "32"], "attackers=32 is invalid: must be an integer in [0, agents - 1 = 31]"),
    (["--attackers", "1", "--algorithm", "independent"], "attackers=1 is invalid"),
    (["--attackers", "x"], "--attackers"),
]


@pytest.mark.parametrize(
    ("args", "needle"), BAD_BYZANTINE, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_bad_byzantine_arguments_in_process(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["simulate", *ENGINE, *args, "--json"])
    _assert_one_line_error(result.exit_code, result.stdout, result.stderr, needle)


def test_bad_byzantine_argument_in_a_subprocess() -> None:
    proc = run_dexp("simulate", *ENGINE, "--attackers", "32")
    _assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "attackers=32 is invalid")


def test_subroutines_lists_every_selectable_one_as_the_api_accepts_them() -> None:
    from common.subroutines import SUBROUTINES
    from coordinator.api.models import ExperimentCreate

    result = CliRunner().invoke(app, ["subroutines", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    names = [entry["name"] for entry in listed]
    enum = ExperimentCreate.model_json_schema()["properties"]["subroutine"]["enum"]
    assert names == enum and len(set(names)) == len(names)
    assert {"se", "ser3", "ser4", "me", "lucb"} <= set(names) and "dp-se" not in names
    for entry in listed:
        assert set(entry) == {"name", "rewards", "description", "reference"}
        assert entry["rewards"] and set(entry["rewards"]) <= {"bounded", "sub-gaussian"}
        assert entry["description"] and "\n" not in entry["description"]
        assert entry["reference"]
        assert SUBROUTINES[entry["name"]].selectable
    table = CliRunner().invoke(app, ["subroutines"])
    assert table.exit_code == 0 and all(name in table.output for name in names)


def test_subroutines_widths_compares_the_bounds_and_refuses_bad_arguments() -> None:
    """The table docs/SUBROUTINES.md quotes: at K = 10, eta = 0.9 and 200 samples the stitched
    radius is 0.137 against SE's 0.190; KL is asymmetric near 0 (below / above the mean)."""
    result = CliRunner().invoke(app, ["subroutines", "--widths"])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line}
    assert "0.190" in rows["se (Hoeffding, union over rounds)"]
    assert "0.137" in rows["stitched (anytime)"]
    assert "0.077 / 0.149" in rows["kl-se (KL, union over rounds)"]
    for args, needle in ((["--eta", "1.5"], "eta=1.5 is invalid"), (["--arms", "1"], "arms=1")):
        bad = CliRunner().invoke(app, ["subroutines", "--widths", *args])
        _assert_one_line_error(bad.exit_code, bad.stdout, bad.stderr, needle)


# ----------------------------------------------------------------------------- simulate ldp


def test_ldp_json_has_activations_reports_and_the_first_trials_estimates() -> None:
    doc = invoke_json(
        "--algorithm", "ldp", "--agents", "2000", "--trials", "3", "--means", "0.9,0.1"
    )
    config, summary = doc["config"], doc["summary"]
    assert config["dp_epsilon"] == 1.0 and config["reports_per_agent"] == 1  # LDP's defaults
    assert config["user_privacy"] == 1.0 and config["reward_range"] == [0.0, 1.0]
    assert doc["threshold"] is None and doc["certified_failure"] == 0.05
    assert summary["activations"] == summary["sample_complexity"]
    assert summary["reports"] == summary["messages"] and summary["failures"] == 0
    for trial in doc["trials"]:  # two arms 0.8 apart: identified well before 2,000 reports
        assert trial["stopped_by"] == "global" and trial["best_arm"] == 0
        assert trial["messages"] <= trial["sample_complexity"]
        assert [e["index"] for e in trial["estimates"]] == [0, 1]
        assert [d["vs"] for d in trial["lift"]] == [1]
    first = summary["first_trial"]
    assert first["estimates"] == doc["trials"][0]["estimates"]
    for e in first["estimates"]:  # the means are in their intervals
        assert e["ci"][0] <= e["mean"] <= e["ci"][1]
    lift = first["lift"][0]
    # the lift's interval holds the difference of the means; identified on the decision's narrower
    # intervals (docs/LDP.md, section 5), the leader is ahead
    assert lift["ci"][0] <= lift["mean"] <= lift["ci"][1] and lift["mean"] > 0.25


def test_ldp_readable_output_names_the_reports_and_the_estimates() -> None:
    args = [
        "simulate",
        "--algorithm",
        "ldp",
        "--agents",
        "500",
        "--trials",
        "2",
        "--dp-epsilon",
        "2",
    ]
    result = CliRunner().invoke(app, [*args, "--reports-per-agent", "3", "--means", "0.9,0.1"])
    assert result.exit_code == 0, result.output
    assert "B=3 per agent, each eps=2-locally private (an agent's history: 6)" in result.stdout
    assert "trial 0: estimates (leader arm 0, global)" in result.stdout


BAD_LDP = [
    (["--reports-per-agent", "2"], "reports_per_agent=2 is invalid: reports per agent are for"),
    (["--reports-per-agent", "1", "--algorithm", "de"], "reports_per_agent=1 is invalid"),
    (["--algorithm", "ldp", "--reports-per-agent", "0"], "reports_per_agent=0 is invalid"),
    (["--algorithm", "ldp", "--dp-epsilon", "0"], "dp_epsilon=0.0 is invalid: must be in (0, 10]"),
    (["--algorithm", "ldp", "--subroutine", "se"], "subroutine='se' is invalid: LDP has no local"),
    (["--algorithm", "ldp", "--means", "0.6,0.4", "--drift", "0,0.1"], "drift=(0.0, 0.1) is"),
]


@pytest.mark.parametrize(
    ("args", "needle"), BAD_LDP, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_bad_ldp_arguments(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["simulate", *args, "--json"])
    _assert_one_line_error(result.exit_code, result.stdout, result.stderr, needle)


def test_ldp_attackers_beyond_the_tolerance_certify_nothing() -> None:
    args = ["--algorithm", "ldp", "--agents", "200", "--attackers", "1", "--trials", "1"]
    doc = invoke_json(*args, "--means", "0.9,0.1")
    assert doc["certified_failure"] == 1.0
    assert any("a tolerance f >= 1 (the liars) would certify it" in w for w in doc["warnings"])
