"""CDE in `dexp reproduce` (the cde-* experiments of dexp/experiments.py) and the point-3
measurement script (scripts/cde_measurements.py): each series is the configuration it says, its
rows are `dexp simulate`'s trials, and the script's tables carry the certificates it compares."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from common import cde
from common.algorithms import AlgorithmConfig
from common.certificate import upper
from dexp.cli import app
from dexp.plan import Candidate, voting_candidate

ROOT = Path(__file__).resolve().parents[1]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_reproduce_cde_runs_the_configurations_that_certify(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["reproduce", "cde-p1", "--agents", "64", "--trials", "3", "--series", "CDE",
         "--series", "DE-SER3 certified", "--no-plots", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "e0" in result.stdout and "hit rate" in result.stdout  # columns of the table
    summary = {r["series"]: r for r in read_csv(tmp_path / "cde-p1_summary.csv")}
    strongest = cde.strongest_privacy(64, 0.05, 0.1, 10)
    assert strongest is not None
    row = summary["CDE"]
    assert int(row["threshold"]) == cde.threshold_for(64, 0.05, 0.1, strongest, 10)
    assert float(row["certified_failure"]) <= 0.05
    # Problem 1: arms 0.7 and 0.5 are both eps-optimal at eps = 0.25
    assert float(row["certified_epsilon"]) == cde.report_epsilon(strongest, 10)
    assert float(row["hit_rate_uniform_prior"]) == cde.hit_rate_uniform_prior(strongest, 10, 2)
    found = voting_candidate("DE-SER3 certified", "de", "ser3", AlgorithmConfig(), 10, 64)
    assert isinstance(found, Candidate)
    row = summary["DE-SER3 certified"]
    assert int(row["threshold"]) == found.algo.threshold(10) == 31
    assert float(row["certified_failure"]) <= 0.05
    assert row["certified_epsilon"] == row["hit_rate_uniform_prior"] == ""

    trials = read_csv(tmp_path / "cde-p1.csv")
    cde_rows = [r for r in trials if r["series"] == "CDE"]
    assert {float(r["privacy"]) for r in cde_rows} == {strongest}
    assert {float(r["eta"]) for r in cde_rows} == {0.1}
    assert {float(r["eta"]) for r in trials if r["series"] != "CDE"} == {found.algo.eta}
    # trial i of a row is dexp simulate's trial i with the same parameters and seed
    sim = CliRunner().invoke(
        app,
        ["simulate", "--algorithm", "cde", "--eta", "0.1", "--privacy", str(strongest),
         "--agents", "64", "--trials", "3", "--json"],
    )  # fmt: skip
    assert sim.exit_code == 0, sim.output
    doc = json.loads(sim.stdout)
    assert [t["sample_complexity"] for t in doc["trials"]] == [
        int(r["sample_complexity"]) for r in cde_rows
    ]


def test_the_measurement_script_prints_what_point_3_compares() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cde_measurements.py"), "--trials", "60",
         "--audit-trials", "10", "--de-trials", "2", "--agents", "64",
         "--experiments", "cde-gauss"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith("| 64 |")]
    assert len(rows) == 1
    cells = [c.strip(" |") for c in rows[0]]
    certified_failure, failure, split, e0, hit_bound, audited = cells[3:9]
    assert 0.0 < float(cells[9]) <= 1.0  # the share of agents that reported
    assert float(e0) == float(upper(cde.report_epsilon(float(cells[2]), 8)))  # gauss-8: K = 8
    wrong, unanswered = split.split(" (<= ")[0], split.split(" / ")[1]
    assert f"({int(wrong) + int(unanswered)}/60)" in failure
    assert float(certified_failure) <= 0.05
    assert failure.endswith("/60)")
    # the audited hit rate's 95% interval is not above the bound under a uniform prior
    low = float(audited.split("[")[1].split(",")[0])
    assert low <= float(hit_bound)
    for series in ("CDE (eta 0.1)", "DE-SER3 (eta 0.9)", "DE-stitched-LUCB certified"):
        assert f"| {series}" in proc.stdout
    assert "lower bound 31.7 activations" in proc.stdout
