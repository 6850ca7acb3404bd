"""CDE's promises, measured (issue 24, points 2 and 4; issue 33, point 3): its randomized response,
its certified epsilon against the exact Bayes posterior of every prior (Dirichlet draws) and its
hit rate under a uniform prior against the exact Bayes adversary (and the skewed prior that beats
it), its certificate against a Monte Carlo of the bound's own
model and against the simulators (Problem 1, and the stress mode where the local runs fail at
exactly their nominal rate), the audit of one agent's messages, and `dexp simulate` / `dexp audit
votes` with --algorithm cde.

Seeds are fixed, so every outcome is deterministic; the trial counts give each statistical
assertion its power (said beside it). Rates are compared through exact (Clopper-Pearson) 99.9%
intervals, or the one-sided acceptance rule of tests/stats.py at alpha = 1e-3.
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from common import cde
from common.algorithms import AlgorithmConfig
from common.environments import Environment, problem
from common.privacy import audit_votes, certified_epsilon, hit_rate_uniform_prior
from common.simulation import SimulationConfig, run_trials
from common.simulation.cde_fast import randomized
from common.simulation.runner import simulation_warnings
from common.stats import clopper_pearson
from common.subroutines import FixedBudget, LocalParams
from common.subroutines.fixed_budget import samples_per_arm, wrong_arm_bound
from dexp.cli import app
from tests.stats import ALPHA

LEVEL = 0.999  # the intervals' level
FERAUD_1 = problem("feraud-1").environment


def interval(failures: int, trials: int) -> tuple[float, float]:
    return clopper_pearson(failures, trials, LEVEL)


# -- randomized response, certified epsilon, hit rate under a uniform prior -----------------------
@pytest.mark.parametrize(("n_arms", "privacy"), [(2, 0.75), (10, 0.3), (10, 0.9)])
def test_randomized_response_frequencies(n_arms: int, privacy: float) -> None:
    """Both implementations (common.cde.randomize, one draw; cde_fast.randomized, vectorized)
    name the answer with probability p = P and each other arm with r = (1 - P) / (K - 1): a
    chi-square test on 20,000 draws each (it rejects p off by 0.02 at K = 10 almost surely)."""
    p, r = cde.report_probabilities(privacy, n_arms)
    assert p == pytest.approx(privacy) and r == pytest.approx((1 - privacy) / (n_arms - 1))
    expected = np.full(n_arms, r)
    expected[3 % n_arms] = p
    rng = np.random.default_rng(24)
    one = [cde.randomize(3 % n_arms, n_arms, privacy, rng) for _ in range(20_000)]
    many = randomized(np.full(20_000, 3 % n_arms), n_arms, privacy, rng)
    for draws in (np.array(one), many):
        counts = np.bincount(draws, minlength=n_arms)
        assert stats.chisquare(counts, expected * draws.size).pvalue > ALPHA


def exact_bayes_hit(privacy: float, n_arms: int, optimal: int) -> float:
    """The hit rate of the best adversary seeing one report, under a uniform prior over which s
    arms are eps-optimal and which of them is the best (the perfect local run's answer): the sum
    over reports j of max over guesses g of P(j, g eps-optimal)."""
    p, r = cde.report_probabilities(privacy, n_arms)
    sets = list(itertools.combinations(range(n_arms), optimal))
    total = 0.0
    for j in range(n_arms):
        joint = np.zeros(n_arms)  # P(report j, guess g eps-optimal), per g
        for s in sets:
            for best in s:
                weight = (p if j == best else r) / (len(sets) * optimal)
                joint[list(s)] += weight
        total += joint.max()
    return total


@pytest.mark.parametrize("n_arms", [2, 3, 5, 6])
def test_the_hit_rate_under_a_uniform_prior_is_the_exact_bayes_hit(n_arms: int) -> None:
    """With perfect local runs and one eps-optimal arm, the best adversary holding a report, with
    a uniform prior, hits exactly the bound (it is tight); with s > 1 eps-optimal arms it stays
    within the bound for s. The likelihood ratio of the report is e^e0, as certified."""
    for privacy in np.linspace(1 / n_arms + 0.01, 0.99, 7):
        assert exact_bayes_hit(privacy, n_arms, 1) == pytest.approx(
            cde.hit_rate_uniform_prior(privacy, n_arms), abs=1e-12
        )
        for s in range(2, n_arms):
            assert (
                exact_bayes_hit(privacy, n_arms, s)
                <= cde.hit_rate_uniform_prior(privacy, n_arms, s) + 1e-12
            )
        p, r = cde.report_probabilities(privacy, n_arms)
        assert math.log(p / r) == pytest.approx(cde.report_epsilon(privacy, n_arms))


def joint_of(prior: np.ndarray, privacy: float) -> np.ndarray:
    """P(report = y, answer = a), y the rows, a the columns, exactly, for a prior over the
    agent's local answer a (everything its rewards reach the report through)."""
    p, r = cde.report_probabilities(privacy, prior.size)
    likelihood = np.full((prior.size, prior.size), r) + np.eye(prior.size) * (p - r)
    return likelihood * prior[np.newaxis, :]


def best_bayes_hit(prior: np.ndarray, privacy: float) -> float:
    """The hit rate of the best adversary holding the report, with this prior over the answer:
    the sum over reports y of max over guesses g of P(y, g)."""
    return float(joint_of(prior, privacy).max(axis=1).sum())


@pytest.mark.parametrize("n_arms", [2, 3, 5, 10])
def test_every_prior_has_its_odds_multiplied_by_at_most_e_to_the_e0(n_arms: int) -> None:
    """The theorem of docs/CDE.md, section 2, for priors that are not uniform: for Dirichlet
    draws of the prior over the agent's answer (skewed ones at alpha = 0.3, fixed seed), after
    every report the exact posterior odds of every event about the answer (every set of arms)
    are within a factor e^e0 of its prior odds, and the factor is reached (the event "the answer
    is the reported arm"). So the best adversary's hit rate is at most `posterior_bound` of its
    best blind guess, whatever the prior."""
    rng = np.random.default_rng(33)
    events = np.array(list(itertools.product([False, True], repeat=n_arms)))[1:-1]  # proper
    for privacy in (1 / n_arms + 0.01, (1 / n_arms + 1) / 2, 0.95):
        odds = math.exp(cde.report_epsilon(privacy, n_arms))
        for alpha in (0.3, 1.0, 5.0):
            for prior in rng.dirichlet(np.full(n_arms, alpha), size=40):
                joint = joint_of(prior, privacy)
                posterior = joint / joint.sum(axis=1, keepdims=True)  # P(a | y), y the rows
                before, before_not = events @ prior, ~events @ prior
                after, after_not = posterior @ events.T, posterior @ ~events.T
                seen = (before > 0) & (before_not > 0)
                factor = (after * before_not)[:, seen] / (after_not * before)[:, seen]
                assert factor.max() <= odds * (1 + 1e-9)
                assert factor.min() >= (1 - 1e-9) / odds
                assert factor.max() == pytest.approx(odds, rel=1e-9)  # tight
                bound = cde.posterior_bound(float(prior.max()), privacy, n_arms)
                assert best_bayes_hit(prior, privacy) <= bound + 1e-12


def test_the_uniform_prior_hit_rate_is_no_bound_for_a_skewed_prior() -> None:
    """The counterexample of docs/CDE.md, section 2: ten arms at P = 0.148 (the strongest privacy
    that certifies delta = 0.05 with 1,024 agents, eta = 0.1), hit rate 0.148 under a uniform
    prior. An adversary whose prior puts 0.5 on one arm (the rest spread evenly) hits 0.5, with
    or without the report (its best guess is that arm whatever the report says): the hit rate
    under a uniform prior bounds nothing here, while e0 still does (odds 1 become at most
    e^e0)."""
    k, privacy = 10, 0.148
    prior = np.full(k, 0.5 / (k - 1))
    prior[0] = 0.5
    assert cde.hit_rate_uniform_prior(privacy, k) == pytest.approx(0.148)
    joint = joint_of(prior, privacy)
    assert (joint.argmax(axis=1) == 0).all()  # the report never changes the best guess
    assert best_bayes_hit(prior, privacy) == pytest.approx(0.5)
    assert best_bayes_hit(prior, privacy) > cde.hit_rate_uniform_prior(privacy, k) + 0.35
    odds = math.exp(cde.report_epsilon(privacy, k))
    assert cde.posterior_bound(0.5, privacy, k) == pytest.approx(odds / (odds + 1))
    assert best_bayes_hit(prior, privacy) <= cde.posterior_bound(0.5, privacy, k)


def test_the_fixed_budget_run_errs_at_its_exact_rate_within_eta() -> None:
    """FixedBudget itself (the agents' and the reference's local run) on two Bernoulli arms 0.5
    and 0.19 (gap 0.31 > eps = 0.3), eta = 0.2: T = 18 pulls each, and its answer is arm 1 with
    probability P(S_1 > S_0) + P(S_1 = S_0) / 2 exactly (ties broken uniformly), which is below
    Hoeffding's bound and eta. 3,000 runs: a two-sided binomial test against the exact rate (it
    rejects a run that breaks ties towards arm 1, or that pulls one arm less)."""
    eps, eta, means = 0.3, 0.2, (0.5, 0.19)
    pulls = samples_per_arm(eps, eta, 2, None)
    assert pulls == 18
    s = np.arange(pulls + 1)
    f0, f1 = stats.binom.pmf(s, pulls, means[0]), stats.binom.pmf(s, pulls, means[1])
    exact = float(sum(f0[a] * (f1[a + 1 :].sum() + f1[a] / 2) for a in s))
    assert exact <= wrong_arm_bound(eps, pulls, None) <= eta
    rng = np.random.default_rng(7)
    params = LocalParams(epsilon=eps, confidence=eta, every_arm=True)
    runs, wrong = 3_000, 0
    for _ in range(runs):
        run = FixedBudget(2, params, rng)
        while not run.done:
            arms = run.select()
            run.observe(arms, (rng.random(len(arms)) < np.take(means, arms)).astype(float))
        assert sum(run.counts) == 2 * pulls
        wrong += run.active == [1]
    assert stats.binomtest(wrong, runs, exact).pvalue > ALPHA, (wrong / runs, exact)


# -- the audit ------------------------------------------------------------------------------------
def test_audited_hit_rate_stays_within_its_bound_under_a_uniform_prior() -> None:
    """K = 10 with one eps-optimal arm (eps = 0.15), P = 0.3, N = 30: the local runs are almost
    perfect, so a reporter's report names its arm with probability about 0.3, the bound. Over
    400 audited trials (posteriors learned on 400 others) the strongest adversary reading one
    agent's report and its time (with a uniform prior) is not above hit_rate_uniform_prior; its
    time adds nothing to the
    report (the Bayes adversary does no better than guessing the report). Reading the published
    answer names the arm almost always: the shared-answer caveat, outside what is certified."""
    env = Environment(FERAUD_1.means)
    config = SimulationConfig(
        env, AlgorithmConfig("cde", epsilon=0.15, eta=0.1, privacy=0.3), n_agents=30
    )
    assert hit_rate_uniform_prior(config) == pytest.approx(0.3)
    assert certified_epsilon(config) == pytest.approx(math.log(0.3 * 9 / 0.7))
    results = run_trials(config, 800, seed=3)
    audit = audit_votes(config, results[:400], results[400:])
    bound = audit.hit_rate_uniform_prior
    assert bound == pytest.approx(0.3) and audit.certified_epsilon == certified_epsilon(config)
    assert audit.papers_privacy is None
    name, rate = audit.strongest(with_outcome=False)
    assert rate.low <= bound, (name, rate)
    reporters = audit.voters.mean
    assert 0.5 < reporters < 1.0
    expected = reporters * 0.3 + (1 - reporters) * 0.1  # reporters at P, the others at s / K
    assert rate.low <= expected <= rate.high
    # among the agents that reported, the guess attains the bound: it is not loose either
    assert audit.senders is not None
    assert audit.senders.low <= bound <= audit.senders.high + 0.01, audit.senders
    bayes, guess = audit.adversaries["bayes-posterior"], audit.adversaries["reported-arm"]
    assert bayes.mean <= guess.high
    assert audit.adversaries["outcome+bayes-posterior"].mean > 0.8


# -- the command line -----------------------------------------------------------------------------
def test_simulate_cde_json_and_text() -> None:
    args = ["simulate", "--algorithm", "cde", "--agents", "40", "--trials", "3"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["config"]["eta"] == 0.1 and doc["config"]["privacy"] == 0.6  # cde's defaults
    # e^e0 = P (K - 1) / (1 - P) = 13.5 for every prior; under a uniform prior on Problem 1 at
    # eps = 0.25, two eps-optimal arms: s e^e0 / (s e^e0 + K - s)
    assert doc["certified_epsilon"] == pytest.approx(math.log(13.5))
    assert doc["hit_rate_uniform_prior"] == pytest.approx(27 / 35)
    assert doc["certified_failure"] <= 0.05 and doc["threshold"] == 4
    assert "arm 1 is within epsilon of the best arm 0" in doc["certificate"]
    assert doc["privacy_certificate"].startswith("e0 = 2.61: whatever it believed before")
    assert "e^e0 = 13.5 by its report" in doc["privacy_certificate"]
    assert "at most 0.772 (here 2 arms are eps-optimal of 10)" in doc["privacy_certificate"]
    assert all(t["messages"] >= 4 for t in doc["trials"])
    text = CliRunner().invoke(app, args)
    assert text.exit_code == 0, text.output
    for needle in ("certified failure", "4 reports accept an arm"):
        assert needle in text.stdout
    rows = text.stdout.splitlines()
    assert any("certified epsilon e0" in row and "2.61" in row for row in rows)
    assert any("hit rate, uniform prior" in row and "0.772" in row for row in rows)
    assert "certified epsilon: e0 = 2.61: whatever it believed before" in " ".join(rows)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--privacy", "0.6"], "privacy=0.6 is invalid: a privacy bound is for --algorithm cde"),
        (["--exact-local-error"], "exact_local_error=True is invalid"),
        (["--algorithm", "cde", "--privacy", "0.05"], "privacy=0.05 is invalid: must be in (1/K"),
        (["--algorithm", "cde", "--subroutine", "lucb"], "subroutine='lucb' is invalid"),
        (["--algorithm", "cde", "--means", "0.5,0.4", "--drift", "0,-1e-5"], "drift=(0.0, -1e-05)"),
        (["--algorithm", "hillel-one-round", "--privacy", "0.7"], "privacy=0.7 is invalid"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_simulate_cde_refuses_what_does_not_apply(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["simulate", *args, "--json"])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_liars_alone_warning() -> None:
    """Fewer honest agents than the threshold: only the liars' arm can be accepted, and the
    warning says so (it names the arm they report: the best one that is not eps-optimal)."""
    config = SimulationConfig(
        Environment((0.9, 0.2, 0.1)), AlgorithmConfig("cde", eta=0.1), n_agents=20, attackers=15
    )
    assert config.lie_arm == 1 and config.threshold is not None and config.threshold > 5
    (warning,) = [w for w in simulation_warnings(config, 0) if "liars' arm" in w]
    assert warning.startswith(f"5 honest agents (N - attackers) < threshold {config.threshold}")
    results = run_trials(config, 50, seed=1)
    assert {r.best_arm for r in results if r.stopped_by == "global"} == {1}


def test_simulate_cde_stress_in_a_subprocess() -> None:
    """The installed command, stress mode, liars and the reference engine together."""
    proc = subprocess.run(
        [sys.executable, "-m", "dexp.cli", "simulate", "--algorithm", "cde", "--means",
         "0.9,0.3,0.2", "--agents", "12", "--tolerance", "1", "--attackers", "1", "--trials",
         "2", "--exact-local-error", "--engine", "reference", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["config"]["exact_local_error"] and doc["config"]["attackers"] == 1
    assert doc["hit_rate_uniform_prior"] == pytest.approx(0.6)  # one eps-optimal arm: P
    assert doc["certified_epsilon"] == pytest.approx(math.log(0.6 * 2 / 0.4))


def test_audit_votes_cde_json() -> None:
    result = CliRunner().invoke(
        app,
        ["audit", "votes", "--algorithm", "cde,de", "--privacy", "0.3,0.5", "--agents", "30",
         "--trials", "3", "--training-trials", "3", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    points = {p["label"]: p for p in json.loads(result.stdout)["points"]}
    assert set(points) == {
        "cde privacy=0.3 eta=0.1 N=30", "cde privacy=0.5 eta=0.1 N=30", "de-ser3 eta=0.9 N=30"
    }  # fmt: skip
    cde_point = points["cde privacy=0.3 eta=0.1 N=30"]
    assert cde_point["privacy"] == 0.3
    assert cde_point["certified_epsilon"] == pytest.approx(cde.report_epsilon(0.3, 10))
    assert cde_point["hit_rate_uniform_prior"] == pytest.approx(
        cde.hit_rate_uniform_prior(0.3, 10, 2)
    )
    assert cde_point["papers_privacy"] is None and "certified" not in cde_point
    de_point = points["de-ser3 eta=0.9 N=30"]
    assert de_point["certified_epsilon"] is None and de_point["hit_rate_uniform_prior"] is None
    assert de_point["papers_privacy"] == pytest.approx(0.1)
    assert set(cde_point["adversaries"]) == {
        "reported-arm", "bayes-posterior", "outcome+bayes-posterior"
    }  # fmt: skip
    assert points["de-ser3 eta=0.9 N=30"]["privacy"] is None


def test_audit_votes_attacks_and_failure_rate() -> None:
    """`--attack` takes a list like the other options: each point names its attackers and how
    they lie, and measures its failure rate (every trial, audited and training) beside the
    certified failure; in the stress mode at K = 2 adaptive liars fail about as often as
    certified (200 trials: the 95% interval holds the certificate)."""
    result = CliRunner().invoke(
        app,
        ["audit", "votes", "--algorithm", "cde", "--means", "0.7,0.3", "--eta", "0.1",
         "--privacy", "0.75", "--agents", "40", "--tolerance", "2", "--attackers", "2",
         "--attack", "adaptive,fixed", "--exact-local-error", "--trials", "100",
         "--training-trials", "100", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    points = {p["attack"]: p for p in json.loads(result.stdout)["points"]}
    assert set(points) == {"adaptive", "fixed"}
    adaptive = points["adaptive"]
    assert adaptive["label"] == "cde privacy=0.75 eta=0.1 N=40 attackers=2 adaptive"
    assert adaptive["attackers"] == 2 and adaptive["failure_rate"]["trials"] == 200
    low, high = adaptive["failure_rate"]["ci95"]
    assert low <= adaptive["certified_failure"] <= high


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--attack", "sneaky"], "attack='sneaky' is invalid: must be one of fixed, adaptive"),
        (["--attack", "adaptive", "--attackers", "1"], "adaptive liars wait for a wrong arm"),
    ],
)
def test_simulate_refuses_an_attack_that_does_not_apply(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(app, ["simulate", "--algorithm", "de", *args, "--json"])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and needle in lines[0], lines
