"""`dexp plan` (dexp/plan.py): every configuration it lists certifies delta as it says, each is the
best of its kind that does (smallest threshold, strongest privacy), --privacy keeps only certified
hit-rate bounds, and a request nothing certifies exits 2 with one line."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from common import cde
from common.algorithms import AlgorithmConfig
from common.certificate import certified_failure, certify
from common.environments import PROBLEMS
from dexp.cli import app
from dexp.plan import Plan, level_factor, make_plan, nothing_certifies

K = 10  # Problem 1's arms
SHARED = ["--delta", "0.05", "--trials", "0", "--json"]


def plan_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["plan", *args, *SHARED])
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def config_of(row: dict[str, Any], tolerance: int = 0) -> AlgorithmConfig:
    names = ("eta", "xi", "beta", "dp_epsilon", "privacy", "reports_per_agent")
    fields = {k: row[k] for k in names if k in row}
    sub = "ser3" if row["algorithm"] in ("cde", "ldp") else row["subroutine"].replace("dp-se", "se")
    return AlgorithmConfig(
        algorithm=row["algorithm"], subroutine=sub, tolerance=tolerance, **fields
    )


@pytest.mark.parametrize(("agents", "tolerance"), [(64, 0), (1024, 3)])
def test_every_configuration_certifies_and_its_threshold_is_the_smallest(
    agents: int, tolerance: int
) -> None:
    doc = plan_json("--agents", str(agents), "--tolerance", str(tolerance))
    rows = doc["configurations"]
    # LDP needs about 600 reports at dp_epsilon 2 on Problem 1: one per device (B = 1)
    ldp = {"ldp"} if agents >= 1024 else set()
    assert {r["algorithm"] for r in rows} == {"cde", "de", "ce", "dp-mase"} | ldp
    for row in rows:
        algo = config_of(row, tolerance)
        cert = certify(algo, K, agents)
        assert cert.failure == row["certified_failure"] <= 0.05
        assert cert.threshold == row["threshold"]
        if row["algorithm"] in ("cde", "ldp"):
            continue
        # No smaller threshold certifies with any confidence b of its interval: the smallest error
        # bound of M's interval is c b at b just above delta^(1/(M-1)).
        c = level_factor(row["algorithm"], algo.subroutine)
        for m in range(2, row["threshold"] - tolerance):
            lowest = c * 0.05 ** (1.0 / (m - 1))
            assert certified_failure(agents, m + tolerance, lowest, tolerance) > 0.05, m


def test_cde_rows_have_the_strongest_privacy_that_certifies() -> None:
    doc = plan_json("--agents", "1024")
    for row in (r for r in doc["configurations"] if r["algorithm"] == "cde"):
        weaker = round(row["privacy"] - 0.001, 3)
        m = cde.threshold_for(1024, 0.05, row["eta"], weaker, K)
        assert cde.failure(1024, m, row["eta"], weaker, K).total > 0.05
        # Problem 1 has two eps-optimal arms (0.7 and 0.5 at eps = 0.25): hitting either counts
        assert row["hit_rate_uniform_prior"] == cde.hit_rate_uniform_prior(row["privacy"], K, 2)
        assert row["hit_rate_uniform_prior"] > row["privacy"]
        # e0 does not depend on the instance: e^e0 = P (K - 1) / (1 - P)
        assert row["certified_epsilon"] == cde.report_epsilon(row["privacy"], K)
        assert math.exp(row["certified_epsilon"]) == pytest.approx(
            row["privacy"] * (K - 1) / (1 - row["privacy"])
        )
        assert row["papers_privacy"] is None
    for r in (r for r in doc["configurations"] if r["algorithm"] == "ldp"):
        assert r["certified_epsilon"] == r["dp_epsilon"] * r["reports_per_agent"]
        assert r["hit_rate_uniform_prior"] is None and r["papers_privacy"] is None
    voting = [r for r in doc["configurations"] if r["algorithm"] not in ("cde", "ldp")]
    for r in voting:
        assert r["certified_epsilon"] is None and r["hit_rate_uniform_prior"] is None
        assert 0 < r["papers_privacy"] < 1
    assert doc["lower_bound"]["eps_optimal_arms"] == [0, 1]


def test_a_privacy_request_keeps_hit_rate_bounds_under_a_uniform_prior_at_most_it() -> None:
    doc = plan_json("--agents", "1024", "--privacy", "0.35")
    rows = doc["configurations"]
    assert rows and all(r["algorithm"] == "cde" for r in rows)
    for row in rows:
        assert row["hit_rate_uniform_prior"] <= 0.35
        # the most faithful report that keeps the bound: one step more breaks it
        assert cde.hit_rate_uniform_prior(row["privacy"] + 1e-4, K, 2) > 0.35
    assert any("no e0 and no bound on the hit rate" in e["reason"] for e in doc["excluded"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--agents", "1"], "nothing certifies delta = 0.05 with 1 agent: "),
        (["--agents", "64", "--privacy", "0.2"], "not above 2/10"),
        (["--agents", "64", "--problem", "feraud-3"], "drift"),
        (["--agents", "64", "--delta", "0.6"], "delta"),
        (["--agents", "0"], "agents"),
    ],
)
def test_what_cannot_be_certified_exits_2_with_one_line(args: list[str], says: str) -> None:
    result = CliRunner().invoke(app, ["plan", "--delta", "0.05", "--trials", "0", *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]


@pytest.mark.parametrize(("privacy", "family"), [(None, "DE-SER3"), (0.5, "CDE"), (None, "LDP")])
def test_the_fewest_agents_the_error_names_are_the_fewest(
    privacy: float | None, family: str
) -> None:
    """The exit-2 line says with how many agents the closest candidate would certify: with that
    many it is listed, with one fewer it is not."""
    problem = PROBLEMS["feraud-1"]

    def plan(n: int) -> Plan:
        return make_plan(
            problem.environment, problem.activation, n, 0.05, hit_rate=privacy, trials=0
        )

    line = nothing_certifies(plan(1), privacy)
    match = re.search(rf"({family}[^;]*) would certify it with ([0-9,]+) agents", line)
    assert match, line
    label, needed = match[1], int(match[2].replace(",", ""))
    listed = plan(needed)
    assert [c for c in listed.candidates if c.label == family.split(" at")[0]]
    assert not [c for c in plan(needed - 1).candidates if c.label == family.split(" at")[0]]
    assert label.startswith(family)


def test_the_short_run_measures_each_configuration_in_bounded_time() -> None:
    """seconds = 0: two trials each, whatever --trials says; they are dexp simulate's first two."""
    problem = PROBLEMS["feraud-1"]
    plan = make_plan(problem.environment, problem.activation, 64, 0.05, trials=5, seconds=0.0)
    assert plan.candidates
    for c in plan.candidates:
        assert c.measured is not None and c.measured.trials == 2
        assert c.measured.activations.mean >= plan.bound.activations
    means = [c.measured.activations.mean for c in plan.candidates if c.measured]
    assert means == sorted(means)


def test_plan_in_a_subprocess_prints_the_table_and_the_bound() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dexp.cli", "plan", "--agents", "64", "--delta", "0.05",
         "--means", "0.9,0.5,0.1", "--trials", "2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "lower bound:" in proc.stdout and "DE-SER3" in proc.stdout and "CDE" in proc.stdout
