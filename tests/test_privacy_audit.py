"""The vote audit: its adversaries on hand-made records, its intervals on known rates, and the
measured facts the documentation states (Problem 1, N = 64, fixed seeds)."""

from __future__ import annotations

import csv
import functools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from common.algorithms import AlgorithmConfig
from common.certificate import certified_failure
from common.environments import Environment, problem
from common.errors import ParameterError
from common.params import corrupted_local_confidence
from common.privacy import (
    ADVERSARIES,
    Posterior,
    audit_votes,
    best_guess_hits,
    hit_probabilities,
    method_label,
    papers_privacy,
    records,
)
from common.simulation import SimulationConfig, TrialResult
from common.stats import clopper_pearson, clustered_rate_interval, proportion_interval
from dexp.audit_votes import run_point
from dexp.cli import app

FERAUD_1 = problem("feraud-1").environment
OPTIMAL = np.array([True, True] + [False] * 8)  # feraud-1, eps = 0.25: arms 0 (0.7) and 1 (0.5)


# -- the adversaries on hand-made records ------------------------------------------------------
def test_hit_probability_of_the_guess_among_arms_never_voted_against() -> None:
    votes = np.zeros((5, 10), dtype=bool)
    votes[1, 2:] = True  # left {0, 1}: both eps-optimal
    votes[2, [0, *range(2, 10)]] = True  # left {1}
    votes[3, :2] = True  # voted against both eps-optimal arms
    votes[4, :] = True  # voted against every arm: the guess is uniform over all
    assert hit_probabilities(votes, OPTIMAL) == pytest.approx([0.2, 1.0, 1.0, 0.0, 0.2])
    with pytest.raises(ParameterError):
        hit_probabilities(np.zeros((3, 4), dtype=bool), OPTIMAL)


def test_best_guess_draws_uniformly_among_equal_scores() -> None:
    scores = np.array([[0.9, 0.9, 0.1], [0.2, 0.8, 0.8], [0.5, 0.5, 0.5]])
    optimal = np.array([True, False, False])
    assert best_guess_hits(scores, optimal) == pytest.approx([0.5, 0.0, 1 / 3])


def test_papers_privacy() -> None:
    assert papers_privacy(AlgorithmConfig(), 10) == pytest.approx(0.1)
    for xi in (0.05, 0.1, 0.2):
        # CE keeps the apparent privacy: (1 - eta_xi)(1 - xi)^(K-1) = 1 - eta
        assert papers_privacy(AlgorithmConfig("ce", xi=xi), 10) == pytest.approx(0.1)
    assert papers_privacy(AlgorithmConfig("dp-mase", beta=0.3), 10) == pytest.approx(0.7)
    assert papers_privacy(AlgorithmConfig("independent"), 10) == 0.0
    assert papers_privacy(AlgorithmConfig("cde", eta=0.1), 10) is None  # its figure is e0
    with pytest.raises(ParameterError):
        papers_privacy(AlgorithmConfig("central"), 10)
    assert method_label(AlgorithmConfig("ce", xi=0.1)) == "CE xi=0.1 (ser3)"


def trial(votes: np.ndarray, times: np.ndarray, t: int = 100, best: int = 0) -> TrialResult:
    return TrialResult(
        sample_complexity=t,
        messages=int(votes.sum()),
        best_arm=best,
        correct=True,
        stopped_by="all-agents",
        agent_votes=votes,
        agent_vote_times=np.where(votes, times, 0),
        agent_arms=np.zeros(votes.shape[0], dtype=np.int64),
    )


def test_records_order_the_votes_from_the_last_and_place_them_in_the_run() -> None:
    config = SimulationConfig(Environment((0.9, 0.5, 0.4, 0.1)), AlgorithmConfig(delta=0.5))
    votes = np.zeros((config.n_agents, 4), dtype=bool)
    times = np.zeros((config.n_agents, 4), dtype=np.int64)
    votes[0, [1, 2, 3]] = True
    times[0, [1, 2, 3]] = [90, 10, 10]  # arms 2 and 3 in one batch, then arm 1 last
    rec = records(config, trial(votes, times))
    assert rec.after[0].tolist() == [-1, 0, 1, 1]
    assert rec.when[0].tolist() == [-1, 8, 0, 0]
    assert rec.sent[0].tolist() == [3, 3, 3, 3]
    assert rec.after[1].tolist() == [-1, -1, -1, -1]  # agent 1 sent nothing
    assert rec.named[0].tolist() == [True, False, False, False]
    assert rec.optimal.tolist() == [True, False, False, False]


def test_the_posterior_learns_what_the_order_of_the_votes_says() -> None:
    """Training records where the arm voted against LAST is always the eps-optimal one (the
    agents were about to settle on it after a wrong vote): the Bayes adversary learns it, the
    never-voted-against guess cannot."""
    env = Environment((0.8, 0.3, 0.2, 0.1))  # eps = 0.25: arm 0 alone is eps-optimal
    config = SimulationConfig(env, AlgorithmConfig(delta=0.5), n_agents=30)
    rng = np.random.default_rng(0)

    def make() -> TrialResult:
        votes = np.zeros((30, 4), dtype=bool)
        times = np.zeros((30, 4), dtype=np.int64)
        for n in range(30):
            others = rng.permutation([1, 2, 3])[:2]
            votes[n, [*others, 0]] = True
            times[n, others] = [5, 6]
            times[n, 0] = 50  # arm 0 last
        return trial(votes, times)

    audit = audit_votes(config, [make() for _ in range(5)], [make() for _ in range(5)])
    assert audit.adversaries["bayes-posterior"].mean == pytest.approx(1.0)
    assert audit.adversaries["never-voted-against"].mean == pytest.approx(0.0)
    assert audit.strongest(with_outcome=False)[0] == "bayes-posterior"
    assert audit.baseline["identified-arm"].mean == pytest.approx(1.0)
    assert audit.baseline["uniform"].mean == pytest.approx(0.25)
    assert set(audit.adversaries) == set(ADVERSARIES)


def test_the_posterior_backs_off_to_coarser_cells_and_then_to_the_prior() -> None:
    config = SimulationConfig(Environment((0.9, 0.5, 0.1)), AlgorithmConfig(delta=0.5), 7)
    votes = np.zeros((7, 3), dtype=bool)
    votes[0, 2] = True
    rec = records(config, trial(votes, np.full((7, 3), 3, dtype=np.int64)))
    empty = Posterior.fit([rec])  # 21 pairs in 3 cells: none reaches MIN_CELL
    assert np.allclose(empty.scores(rec), empty.prior)
    assert empty.prior == pytest.approx(1 / 3)
    ten = Posterior.fit([rec] * 10)  # agent 0's voted arm: 10 pairs, still the prior
    scores = ten.scores(rec)
    assert scores[0].tolist() == pytest.approx([10.5 / 21, 10.5 / 21, 1 / 3])  # 20 pairs, 10 hits
    assert scores[1].tolist() == pytest.approx([60.5 / 181] * 3)  # 180 pairs, 60 hits
    with pytest.raises(ParameterError):
        Posterior.fit([])


def test_the_audit_leaves_the_byzantine_agents_out_and_uses_the_means_at_the_stop() -> None:
    env = Environment((0.7, 0.5, 0.3), drift=(0.0, -1e-3, 0.0))  # arm 1 at 0.2 after t = 300
    config = SimulationConfig(env, AlgorithmConfig(delta=0.5, eta=0.9), n_agents=7, attackers=1)
    votes = np.zeros((7, 3), dtype=bool)
    votes[:, 2] = True  # left {0, 1}
    times = np.full((7, 3), 5, dtype=np.int64)
    early = audit_votes(config, [trial(votes, times, t=10)], [trial(votes, times, t=10)])
    late = audit_votes(config, [trial(votes, times, t=300)], [trial(votes, times, t=300)])
    assert early.agents == late.agents == 6
    assert early.adversaries["never-voted-against"].mean == pytest.approx(1.0)
    assert late.adversaries["never-voted-against"].mean == pytest.approx(0.5)


def test_the_audit_rejects_what_it_cannot_audit() -> None:
    config = SimulationConfig(FERAUD_1, AlgorithmConfig(), n_agents=29)
    votes = np.zeros((29, 10), dtype=bool)
    good = trial(votes, np.zeros((29, 10), dtype=np.int64))
    with pytest.raises(ParameterError):
        audit_votes(config, [], [good])
    with pytest.raises(ParameterError):
        audit_votes(config, [good], [])
    no_times = trial(votes, np.zeros((29, 10), dtype=np.int64))
    no_times.agent_vote_times = None
    with pytest.raises(ParameterError):
        audit_votes(config, [no_times], [good])
    wrong = trial(np.zeros((30, 10), dtype=bool), np.zeros((30, 10), dtype=np.int64))
    with pytest.raises(ParameterError):
        audit_votes(config, [wrong], [good])


# -- the intervals on known rates --------------------------------------------------------------
@pytest.mark.parametrize("kind", ["independent", "shared", "beta-binomial"])
def test_clustered_interval_covers_a_known_rate(kind: str) -> None:
    """Clusters of 64 draws of a rate p = 0.3: independent members, members sharing one draw, and
    a Beta(3, 7) rate per cluster (mean 0.3). 20 clusters, 1,000 repetitions: the 95% interval
    holds about 95% of the time (binomial sd of the coverage 0.7%)."""
    rng = np.random.default_rng(2026)
    p, clusters, size, reps = 0.3, 20, 64, 1000
    covered = 0
    for _ in range(reps):
        if kind == "independent":
            x = rng.random((clusters, size)) < p
        elif kind == "shared":
            x = np.repeat(rng.random((clusters, 1)) < p, size, axis=1)
        else:
            x = rng.random((clusters, size)) < rng.beta(3, 7, size=(clusters, 1))
        _, low, high = clustered_rate_interval(x.mean(axis=1), [size] * clusters)
        covered += low <= p <= high
    assert 0.93 <= covered / reps <= 0.99


def test_clustered_interval_at_the_edges() -> None:
    # every cluster at 1: nothing says how the members correlate, so n_eff = clusters
    mean, low, high = clustered_rate_interval([1.0] * 20, [64] * 20)
    assert mean == 1.0 and high == 1.0
    assert low == pytest.approx(proportion_interval(20, 20)[0], abs=0.03)
    with pytest.raises(ValueError):
        clustered_rate_interval([], [])
    with pytest.raises(ValueError):
        clustered_rate_interval([0.5], [0])


@pytest.mark.parametrize("p", [0.05, 0.5])
def test_clopper_pearson_covers_at_least_its_level(p: float) -> None:
    rng = np.random.default_rng(11)
    n, reps = 60, 2000
    hits = rng.binomial(n, p, size=reps)
    covered = sum(low <= p <= high for low, high in (clopper_pearson(int(k), n) for k in hits))
    assert covered / reps >= 0.94  # exact: >= 95% in truth; sd of the estimate 0.5%
    assert clopper_pearson(0, 10)[0] == 0.0 and clopper_pearson(10, 10)[1] == 1.0


# -- measured facts on Problem 1 (the numbers docs/RESULTS.md quotes) ----------------------------
N_AGENTS, TRIALS, SEED = 64, 20, 0
# The tests that read `measured` run on one xdist worker: its cache then computes each point once.
MEASURED = pytest.mark.xdist_group("privacy-audit-measured")


@functools.cache
def measured(algorithm: str, eta: float, xi: float = 0.0, subroutine: str = "ser3") -> dict:
    algo = AlgorithmConfig(algorithm, subroutine=subroutine, eta=eta, xi=xi)
    config = SimulationConfig(FERAUD_1, algo, n_agents=N_AGENTS)
    return run_point(config, TRIALS, TRIALS, SEED)


@MEASURED
def test_a_higher_eta_certifies_less_and_leaks_more() -> None:
    """DE's papers' figure falls with eta, the strongest votes-only adversary's hit rate rises:
    the intervals at eta = 0.5 and 0.95 are far apart."""
    low, mid, high = (measured("de", eta) for eta in (0.5, 0.9, 0.95))
    assert low["papers_privacy"] > mid["papers_privacy"] > high["papers_privacy"]
    assert low["votes_only"]["ci95"][1] < mid["votes_only"]["ci95"][0]
    assert mid["votes_only"]["ci95"][1] < high["votes_only"]["ci95"][0]
    assert mid["votes_only"]["ci95"][0] > mid["papers_privacy"]
    # and more agents name their arm exactly (voted against K - 1 arms)
    assert low["named_exactly"]["mean"] < mid["named_exactly"]["mean"]
    assert mid["named_exactly"]["mean"] < high["named_exactly"]["mean"]


@MEASURED
def test_the_bayes_adversary_beats_the_never_voted_guess() -> None:
    point = measured("de", 0.9)
    bayes = point["adversaries"]["bayes-posterior"]
    never = point["adversaries"]["never-voted-against"]
    assert bayes["ci95"][0] > never["ci95"][1]
    assert point["votes_only"]["adversary"] == "bayes-posterior"


@MEASURED
def test_the_published_answer_names_the_arm_of_every_agent() -> None:
    point = measured("de", 0.9)
    assert point["baseline"]["guess"] == "identified-arm"
    assert point["baseline"]["mean"] == pytest.approx(1.0)
    assert point["hit_rate"]["mean"] >= point["baseline"]["mean"]
    assert point["baselines"]["uniform"]["mean"] == pytest.approx(0.2)


@MEASURED
def test_ce_hides_what_de_at_the_same_threshold_hides() -> None:
    """CE's lower hit rate comes from its lower M: DE at eta = eta_xi (the same M) is within the
    intervals of CE, while DE at the same eta is far above."""
    k = FERAUD_1.n_arms
    for eta in (0.9, 0.95):
        ce = measured("ce", eta, xi=0.1)
        same_m = measured("de", corrupted_local_confidence(eta, 0.1, k))
        same_eta = measured("de", eta)
        assert ce["threshold"] == same_m["threshold"] < same_eta["threshold"]
        assert same_eta["votes_only"]["ci95"][0] > ce["votes_only"]["ci95"][1]
        ce_low, ce_high = ce["votes_only"]["ci95"]
        m_low, m_high = same_m["votes_only"]["ci95"]
        assert ce_low <= m_high and m_low <= ce_high  # the intervals overlap


# -- the commands --------------------------------------------------------------------------------
def dexp(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in-process (as `dexp` runs it: errors are one line and an exit status)."""
    result = CliRunner().invoke(app, list(args))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def test_audit_votes_runs_as_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dexp", "audit", "votes", "--eta", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2
    assert done.stderr == "error: eta=2.0 is invalid: must be in (0, 1)\n"


def test_audit_votes_json() -> None:
    done = dexp("audit", "votes", "--trials", "4", "--training-trials", "4", "--json")
    assert done.returncode == 0, done.stderr
    point = json.loads(done.stdout)
    assert point["papers_privacy"] == pytest.approx(0.1)
    assert point["certified_epsilon"] is None and point["hit_rate_uniform_prior"] is None
    assert "certified" not in point
    # 29 of the 64 agents erring, each at most (pi^2 / 24) 0.9
    assert point["certified_failure"] == certified_failure(64, 29, math.pi**2 / 24 * 0.9)
    assert set(point["hit_rate"]) == {"mean", "ci95", "adversary"}
    assert point["hit_rate"]["ci95"][0] <= point["hit_rate"]["mean"] <= point["hit_rate"]["ci95"][1]
    assert set(point["adversaries"]) == set(ADVERSARIES)
    assert point["baseline"]["guess"] == "identified-arm"
    assert point["agent_trials"] == 4 * 64
    assert point["threshold"] == 29


def test_audit_votes_sweeps() -> None:
    done = dexp(
        "audit", "votes", "--eta", "0.8,0.9", "--agents", "40", "--trials", "3",
        "--training-trials", "3", "--algorithm", "de,ce", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    labels = [p["label"] for p in json.loads(done.stdout)["points"]]
    assert labels == [
        "de-ser3 eta=0.8 N=40",
        "de-ser3 eta=0.9 N=40",
        "ce-ser3 eta=0.8 xi=0.1 N=40",
        "ce-ser3 eta=0.9 xi=0.1 N=40",
    ]


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("--eta", "1.5"), "eta"),
        (("--eta", "0.9,x"), "eta"),
        (("--agents", "0"), "agents"),
        (("--algorithm", "central"), "algorithm"),
        (("--trials", "0"), "trials"),
        (("--training-trials", "0"), "training_trials"),
        (("--agents", "10"), "agents"),  # M = 29 > N: no arm could ever leave
    ],
)
def test_audit_votes_refuses_bad_input(args: tuple[str, ...], name: str) -> None:
    done = dexp("audit", "votes", *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0], done.stderr
    assert done.stdout == ""


def test_reproduce_privacy_frontier(tmp_path: Path) -> None:
    done = dexp("reproduce", "privacy-frontier", "--out", str(tmp_path), "--trials", "2")
    assert done.returncode == 0, done.stderr
    with (tmp_path / "privacy-frontier.csv").open() as f:
        rows = list(csv.DictReader(f))
    series = {r["series"] for r in rows}
    assert series == {"DE", "CE xi=0.1", "DE at CE's M (at CE's eta)", "DP-MASE eps_dp=0.1"}
    assert len(rows) == 17
    assert "certified" not in rows[0]  # the papers' figure, named as such: it bounds no hit rate
    assert all(0.0 < float(r["papers_privacy"]) < 1.0 for r in rows)
    assert (tmp_path / "privacy-frontier.png").stat().st_size > 10_000
    document = json.loads((tmp_path / "privacy-frontier.json").read_text())
    assert document["parameters"]["trials"] == 2
    bad = dexp("reproduce", "privacy-frontier", "--out", str(tmp_path), "--agents", "32,64")
    assert bad.returncode == 2 and "agents" in bad.stderr


def test_audit_votes_leaves_the_attackers_out() -> None:
    done = dexp(
        "audit", "votes", "--attackers", "3", "--tolerance", "3", "--trials", "3",
        "--training-trials", "3", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    point = json.loads(done.stdout)
    assert point["threshold"] == 29 + 3
    assert point["agent_trials"] == 3 * (64 - 3)
