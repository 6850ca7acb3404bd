"""Privacy audit of the votes: what adversaries learn from what the coordinator sees of one agent,
beside what the method certifies.

The secret is the paper's: an eps-optimal arm of the agent. The adversary sees one agent's record
as the coordinator holds it (which arms it voted against, when, hence in which order) and, for
some adversaries, the public outcome of the experiment. It knows the algorithm and the problem up
to the labels of the arms: its prior over which label is the best arm is uniform, so everything it
guesses comes from the record. Every adversary guesses one arm per agent; its hit probability for
that agent is computed exactly (a uniform draw among equally good guesses), then averaged over the
honest agents of each trial, and over trials. The agents of one trial share its run, so the 95%
interval treats trials as clusters (`common.stats.clustered_rate_interval`).

Adversaries (ADVERSARIES):
- never-voted-against: uniform among the arms the agent never voted against. An agent that voted
  against K - 1 arms names its arm exactly.
- bayes-posterior: the arm with the highest posterior probability of being eps-optimal given
  where it stands in the record: how many votes the agent sent, how many of its vote times came
  after the vote against that arm (0: in the last batch; never voted against is its own class),
  and the vote's time as a tenth of the run. The posterior is learned on TRAINING trials of the
  same configuration with other seeds (the adversary may simulate the algorithm), evaluated on
  the audited trials.
- outcome+bayes-posterior: the public outcome first (the identified arm, or the candidates of
  a tie), the posterior to choose among the candidates of a tie. Equal to the identified-arm
  baseline but at ties: what the votes add once the answer is published.
Baselines (public information alone): "identified-arm", the published answer (a uniform draw
among the candidates at a tie); "uniform", |eps-optimal arms| / K.

CDE (REPORT_ADVERSARIES): the record is one agent's report and the activation at which it was sent
(none if the run ended first). reported-arm guesses the report (a uniform guess without one);
bayes-posterior keys each arm on (the agent reported, this arm is its report, its time in tenths
of the training trials' report times: absolute, since the time at which the answer came is part
of the outcome, and the report that brought an arm to M is the published answer);
outcome+bayes-posterior reads the published answer as above. What CDE certifies for every prior
is `certified_epsilon`, e0: the report multiplies any adversary's odds by at most e^e0. Its
corollary for this audit's adversaries, whose prior is uniform, is `hit_rate_uniform_prior`
(common.cde.hit_rate_uniform_prior with the instance's s eps-optimal arms), which the audited
rates must not exceed.

The papers' figures (`papers_privacy`, what the definition promises: no adversary can be more
than that sure of one agent's eps-optimal arm from its votes): DE 1 - eta; CE
(1 - eta_xi)(1 - xi)^(K-1) = 1 - eta by the choice of eta_xi; DP-MASE 1 - beta, beside the
eps_dp-differential privacy of each reward (not of the agent's answer: its votes reveal that as
DE's do); independent agents 0 (no message). Neither is a bound on how often a guess hits; CDE's
e0 bounds it for every prior.
Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common import cde
from common.algorithms import AlgorithmConfig
from common.errors import ParameterError
from common.params import corrupted_local_confidence
from common.rounding import upper
from common.simulation.config import SimulationConfig, TrialResult
from common.stats import clustered_rate_interval, describe

ADVERSARIES: dict[str, str] = {
    "never-voted-against": "a uniform guess among the arms the agent never voted against",
    "bayes-posterior": (
        "the arm most likely eps-optimal given its place in the agent's record (votes sent, "
        "vote times after it, the vote's time in the run), posterior learned on training trials"
    ),
    "outcome+bayes-posterior": (
        "the arm the public outcome names; at a tie, the candidate the posterior ranks first"
    ),
}
REPORT_ADVERSARIES: dict[str, str] = {
    "reported-arm": "the arm the agent reported (a uniform guess if it sent none)",
    "bayes-posterior": (
        "the arm most likely eps-optimal given the agent's report and its time, posterior "
        "learned on training trials"
    ),
    "outcome+bayes-posterior": ADVERSARIES["outcome+bayes-posterior"],
}
READS_OUTCOME = frozenset({"outcome+bayes-posterior"})
BASELINES: dict[str, str] = {
    "identified-arm": "the published answer (a uniform draw among the candidates of a tie)",
    "uniform": "a uniform guess over the K arms",
}
MIN_CELL = 20  # training (agent, arm) pairs a posterior cell needs before it is trusted
TIME_BINS = 10


def method_label(algo: AlgorithmConfig) -> str:
    if algo.algorithm == "de":
        return f"DE ({algo.subroutine})"
    if algo.algorithm == "ce":
        return f"CE xi={algo.xi:g} ({algo.subroutine})"
    if algo.algorithm == "dp-mase":
        return f"DP-MASE eps_dp={algo.dp_epsilon:g} beta={algo.beta:g}"
    return f"{algo.algorithm} ({algo.subroutine})"


def papers_privacy(algo: AlgorithmConfig, n_arms: int) -> float | None:
    """The papers' (eps, eta)-privacy figure: the probability above which no adversary can be
    sure of one agent's eps-optimal arm from its votes, as each voting method certifies it (no
    bound on how often a guess hits); None for CDE, which certifies `certified_epsilon`."""
    if algo.algorithm == "de":
        return 1.0 - algo.eta
    if algo.algorithm == "ce":
        eta_xi = corrupted_local_confidence(algo.eta, algo.xi, n_arms)
        return (1.0 - eta_xi) * (1.0 - algo.xi) ** (n_arms - 1)
    if algo.algorithm == "dp-mase":
        return 1.0 - algo.beta
    if algo.algorithm == "independent":
        return 0.0  # 1-privacy: no message at all
    if algo.reports:
        return None
    raise ParameterError(
        "algorithm",
        algo.algorithm,
        "the audit covers de, ce, dp-mase and independent (the central baseline sends every "
        "reward, there is no per-agent vote to audit)",
    )


def certifies(algo: AlgorithmConfig) -> str:
    """What the certified figure means, in words."""
    if algo.algorithm == "dp-mase":
        return (
            f"no adversary holding one agent's votes can be more than 1 - beta sure of its "
            f"eps-optimal arm; each of its rewards is eps_dp = {algo.dp_epsilon:g} differentially "
            "private (one reward, not its answer: no certified_epsilon)"
        )
    if algo.algorithm == "independent":
        return "no message is sent"
    if algo.reports:
        return (
            "certified_epsilon: any adversary's odds about one agent's answer, hence its rewards, "
            "are multiplied by at most e^e0 by its report, whatever its prior; "
            "hit_rate_uniform_prior: its corollary for an adversary with a uniform prior over "
            "which arm is best, no more often than this"
        )
    return (
        "no adversary holding one agent's votes can be more than 1 - eta sure of its eps-optimal "
        "arm; it does not bound how often a guess hits"
    )


def optimal_arms(config: SimulationConfig) -> int:
    """s: how many arms of the simulated instance are eps-optimal."""
    return int(config.environment.eps_optimal_arms(config.algorithm.epsilon).size)


def certified_epsilon(config: SimulationConfig) -> float | None:
    """CDE: e0, what the report certifies for every prior (common.cde.report_epsilon); None for
    the methods that certify none."""
    algo = config.algorithm
    return cde.report_epsilon(algo.privacy, config.environment.n_arms) if algo.reports else None


def hit_rate_uniform_prior(config: SimulationConfig) -> float | None:
    """CDE: the bound on any messages-only adversary's hit rate under a uniform prior over which
    arms are eps-optimal, on this instance (its s eps-optimal arms); None for the others."""
    algo = config.algorithm
    if not algo.reports:
        return None
    return cde.hit_rate_uniform_prior(algo.privacy, config.environment.n_arms, optimal_arms(config))


def privacy_statement(config: SimulationConfig) -> str | None:
    """The sentence beside `certified_epsilon`: what it means for every prior, the hit rate under
    a uniform prior on this instance, and what neither covers (the published answer)."""
    algo = config.algorithm
    hit = hit_rate_uniform_prior(config)
    if hit is None:
        return None
    s, k = optimal_arms(config), config.environment.n_arms
    odds = cde.report_odds(algo.privacy, k)
    arms = "1 arm is" if s == 1 else f"{s} arms are"
    return (
        f"e0 = {upper(math.log(odds))}: whatever it believed before, any adversary's odds about "
        f"one agent's answer, hence its rewards, are multiplied by at most e^e0 = {upper(odds)} by "
        f"its report and its time. Hit rate under a uniform prior over which arm is best: at most "
        f"{upper(hit)} (here {arms} eps-optimal of {k}); another prior gives another hit rate. "
        "Both bound what the messages add: the published answer names the best arm to everyone."
    )


# -- the adversaries ---------------------------------------------------------------------------
def hit_probabilities(votes: np.ndarray, optimal: np.ndarray) -> np.ndarray:
    """Per agent (row of `votes`, (N, K) bool): the probability that a uniform guess among the
    arms it never voted against is eps-optimal (`optimal`, (K,) bool)."""
    votes = np.asarray(votes, dtype=bool)
    optimal = np.asarray(optimal, dtype=bool)
    if votes.ndim != 2 or optimal.shape != (votes.shape[1],):
        raise ParameterError(
            "agent_votes", votes.shape, f"must be (agents, K) with K = {optimal.shape[0]}"
        )
    candidates = ~votes
    candidates[~candidates.any(axis=1)] = True  # voted against every arm: guess among all
    return (candidates & optimal).sum(axis=1) / candidates.sum(axis=1)


def best_guess_hits(scores: np.ndarray, optimal: np.ndarray) -> np.ndarray:
    """Per agent: the probability that a uniform draw among its highest-scored arms is
    eps-optimal."""
    top = scores >= scores.max(axis=1, keepdims=True) - 1e-12
    return (top & optimal).sum(axis=1) / top.sum(axis=1)


@dataclass(frozen=True)
class Records:
    """What the coordinator sees of the honest agents of one trial, as the adversaries read it.

    Per (agent, arm): `sent` votes counted per agent, `after` the number of the agent's distinct
    vote times later than the vote against the arm (-1: never voted against it), `when` the
    vote's time in tenths of the run (-1: never), `named` whether the public outcome names it."""

    sent: np.ndarray  # (N, K) int
    after: np.ndarray  # (N, K) int
    when: np.ndarray  # (N, K) int
    named: np.ndarray  # (N, K) bool
    optimal: np.ndarray  # (K,) bool: eps-optimal at the stop (the secret)
    votes: np.ndarray  # (N, K) bool

    @property
    def shape(self) -> tuple[int, ...]:
        return self.votes.shape

    def keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cell keys from finest to coarsest: (sent, after, when), (sent, after), (sent, voted)."""
        k = self.votes.shape[1]
        base = self.sent
        coarse = base * (k + 1) + (self.after + 1)
        fine = coarse * (TIME_BINS + 1) + (self.when + 1)
        coarsest = base * 2 + self.votes
        return fine, coarse, coarsest


def records(config: SimulationConfig, result: TrialResult) -> Records:
    """The honest agents' records of one trial (agents 0 .. attackers-1 lie: left out)."""
    env = config.environment
    shape = (config.n_agents, env.n_arms)
    if result.agent_votes is None or result.agent_vote_times is None:
        raise ParameterError("agent_votes", None, "each trial must report its votes and times")
    if result.agent_votes.shape != shape or result.agent_vote_times.shape != shape:
        raise ParameterError(
            "agent_votes", result.agent_votes.shape, f"must be (agents, K) = {shape}"
        )
    votes = np.asarray(result.agent_votes, dtype=bool)[config.attackers :]
    times = np.asarray(result.agent_vote_times, dtype=np.int64)[config.attackers :]
    times = np.where(votes, times, 0)
    after = np.full(votes.shape, -1, dtype=np.int64)
    for n in np.flatnonzero(votes.any(axis=1)):
        distinct = np.unique(times[n][votes[n]])  # ascending
        later = distinct.size - 1 - np.searchsorted(distinct, times[n][votes[n]])
        after[n, votes[n]] = later
    run = max(result.sample_complexity, 1)
    when = np.where(votes, np.minimum(TIME_BINS - 1, (TIME_BINS * (times - 1)) // run), -1).astype(
        np.int64
    )
    named_arms = np.zeros(env.n_arms, dtype=bool)
    named_arms[list(result.candidates)] = True
    mu = env.means_at(result.sample_complexity)
    return Records(
        sent=np.repeat(votes.sum(axis=1, keepdims=True), env.n_arms, axis=1).astype(np.int64),
        after=after,
        when=when,
        named=np.broadcast_to(named_arms, votes.shape).copy(),
        optimal=mu >= mu.max() - config.algorithm.epsilon,
        votes=votes,
    )


@dataclass(frozen=True)
class ReportRecords:
    """What the coordinator sees of the honest agents of one CDE trial: per (agent, arm) whether
    it is the agent's report (`reported`), the report's time bin, the same for each arm of the
    agent (-1: no report), and whether the public outcome names the arm."""

    reported: np.ndarray  # (N, K) bool
    when: np.ndarray  # (N, K) int
    named: np.ndarray  # (N, K) bool
    optimal: np.ndarray  # (K,) bool

    @property
    def shape(self) -> tuple[int, ...]:
        return self.reported.shape

    @property
    def sent(self) -> np.ndarray:
        """(N,) whether each agent reported."""
        return np.asarray(self.reported.any(axis=1))

    def keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cell keys from finest to coarsest: (sent, this arm, when), (sent, this arm), this arm."""
        coarse = (self.when >= 0) * 2 + self.reported
        return coarse * (TIME_BINS + 1) + (self.when + 1), coarse, self.reported.astype(np.int64)


def report_time_edges(config: SimulationConfig, training: Sequence[TrialResult]) -> np.ndarray:
    """The TIME_BINS - 1 inner deciles of the honest agents' report times over `training`: the
    adversary's scale for one report's time (it may simulate the algorithm)."""
    times = [
        r.agent_report_times[config.attackers :][r.agent_report_times[config.attackers :] > 0]
        for r in training
        if r.agent_report_times is not None
    ]
    pooled = np.concatenate(times) if times else np.empty(0)
    if pooled.size == 0:
        return np.empty(0)
    return np.quantile(pooled, np.arange(1, TIME_BINS) / TIME_BINS)


def report_records(
    config: SimulationConfig, result: TrialResult, edges: np.ndarray
) -> ReportRecords:
    """The honest agents' records of one CDE trial (agents 0 .. attackers-1 lie: left out)."""
    env = config.environment
    if result.agent_reports is None or result.agent_report_times is None:
        raise ParameterError("agent_reports", None, "each trial must report its reports and times")
    if result.agent_reports.shape != (config.n_agents,):
        raise ParameterError(
            "agent_reports", result.agent_reports.shape, f"must be (agents,) = ({config.n_agents},)"
        )
    reports = np.asarray(result.agent_reports, dtype=np.int64)[config.attackers :]
    times = np.asarray(result.agent_report_times, dtype=np.int64)[config.attackers :]
    reported = reports[:, None] == np.arange(env.n_arms)[None, :]
    when = np.where(reports >= 0, np.searchsorted(edges, times, side="right"), -1)
    named_arms = np.zeros(env.n_arms, dtype=bool)
    named_arms[list(result.candidates)] = True
    mu = env.means_at(result.sample_complexity)
    return ReportRecords(
        reported=reported,
        when=np.repeat(when[:, None], env.n_arms, axis=1).astype(np.int64),
        named=np.broadcast_to(named_arms, reported.shape).copy(),
        optimal=mu >= mu.max() - config.algorithm.epsilon,
    )


@dataclass
class Posterior:
    """P(arm eps-optimal | its cell), counted on training records, at three granularities."""

    cells: list[dict[int, tuple[int, int]]] = field(default_factory=list)  # key -> (hits, total)
    prior: float = 0.5

    @classmethod
    def fit(cls, training: Sequence[Records | ReportRecords]) -> Posterior:
        if not training:
            raise ParameterError("training_trials", 0, "the posterior needs training trials")
        levels: list[list[np.ndarray]] = [[], [], []]
        labels: list[np.ndarray] = []
        for rec in training:
            for level, keys in zip(levels, rec.keys(), strict=True):
                level.append(keys.ravel())
            labels.append(np.broadcast_to(rec.optimal, rec.shape).ravel())
        y = np.concatenate(labels).astype(np.int64)
        cells = []
        for level in levels:
            keys = np.concatenate(level)
            unique, inverse = np.unique(keys, return_inverse=True)
            hits = np.bincount(inverse, weights=y, minlength=unique.size)
            total = np.bincount(inverse, minlength=unique.size)
            cells.append(
                {
                    int(k): (int(h), int(t))
                    for k, h, t in zip(unique, hits.astype(np.int64), total, strict=True)
                }
            )
        return cls(cells, float(y.mean()) if y.size else 0.5)

    def scores(self, rec: Records | ReportRecords) -> np.ndarray:
        """The posterior of each (agent, arm): the finest cell with MIN_CELL training pairs."""
        out = np.full(rec.shape, np.nan)
        for level, keys in zip(self.cells, rec.keys(), strict=True):
            todo = np.isnan(out)
            if not todo.any():
                break
            for idx in zip(*np.nonzero(todo), strict=True):
                hits, total = level.get(int(keys[idx]), (0, 0))
                if total >= MIN_CELL:
                    out[idx] = (hits + 0.5) / (total + 1.0)
        return np.where(np.isnan(out), self.prior, out)


# -- the audit ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rate:
    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, per_trial: Sequence[np.ndarray]) -> Rate:
        """Mean over every value, 95% interval with the trials as clusters."""
        sizes = [len(x) for x in per_trial if len(x)]
        means = [float(np.mean(x)) for x in per_trial if len(x)]
        if not sizes:
            return cls(float("nan"), float("nan"), float("nan"))
        mean, low, high = clustered_rate_interval(means, sizes)
        return cls(mean, low, high)

    def to_json(self) -> dict[str, Any]:
        return {"mean": self.mean, "ci95": [self.low, self.high]}


@dataclass(frozen=True)
class VoteAudit:
    method: str
    certified_epsilon: float | None  # CDE: e0, for every prior
    hit_rate_uniform_prior: float | None  # CDE: its corollary under a uniform prior
    papers_privacy: float | None  # DE, CE, DP-MASE: the papers' figure, no bound on a hit rate
    certifies: str
    adversaries: dict[str, Rate]
    baseline: dict[str, Rate]
    named_exactly: Rate  # agents that voted against K - 1 arms: their arm is named exactly
    voters: Rate  # agents that sent at least one vote (CDE: their report)
    agents: int  # (agent, trial) pairs audited
    trials: int
    training_trials: int
    sample_complexity: tuple[float, float, float]  # mean, 95% CI
    messages: float
    threshold: int | None
    # CDE: the reported-arm guess among the agents that sent a report (the others sent nothing);
    # the hit-rate bound holds for each agent, so for these too
    senders: Rate | None = None

    def strongest(self, with_outcome: bool = True) -> tuple[str, Rate]:
        names = [a for a in self.adversaries if with_outcome or a not in READS_OUTCOME]
        name = max(names, key=lambda a: self.adversaries[a].mean)
        return name, self.adversaries[name]

    def to_json(self) -> dict[str, Any]:
        name, rate = self.strongest()
        votes_name, votes_rate = self.strongest(with_outcome=False)
        best_public = max(self.baseline, key=lambda b: self.baseline[b].mean)
        sc_mean, sc_low, sc_high = self.sample_complexity
        return {
            "method": self.method,
            "certified_epsilon": _rounded(self.certified_epsilon),
            "hit_rate_uniform_prior": _rounded(self.hit_rate_uniform_prior),
            "papers_privacy": _rounded(self.papers_privacy),
            "certifies": self.certifies,
            "hit_rate": {**rate.to_json(), "adversary": name},
            "votes_only": {**votes_rate.to_json(), "adversary": votes_name},
            "baseline": {**self.baseline[best_public].to_json(), "guess": best_public},
            "adversaries": {
                a: {**r.to_json(), "guess": {**ADVERSARIES, **REPORT_ADVERSARIES}[a]}
                for a, r in self.adversaries.items()
            },
            "baselines": {
                b: {**r.to_json(), "guess": BASELINES[b]} for b, r in self.baseline.items()
            },
            "named_exactly": self.named_exactly.to_json(),
            "voters": self.voters.to_json(),
            "agent_trials": self.agents,
            "trials": self.trials,
            "training_trials": self.training_trials,
            "threshold": self.threshold,
            "sample_complexity": {"mean": sc_mean, "ci95": [sc_low, sc_high]},
            "messages": self.messages,
            "senders": None if self.senders is None else self.senders.to_json(),
        }


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 12)


def audit_votes(
    config: SimulationConfig,
    results: Sequence[TrialResult],
    training: Sequence[TrialResult],
) -> VoteAudit:
    """Every adversary and baseline on the audited `results`; the Bayes posteriors are learned on
    `training` (trials of the same configuration with other seeds). CDE: the report adversaries
    on the agents' reports and their times."""
    if not results:
        raise ParameterError("trials", 0, "need at least one trial")
    algo = config.algorithm
    k = config.environment.n_arms
    if algo.reports:
        edges = report_time_edges(config, training)
        train: list[Records | ReportRecords] = [report_records(config, r, edges) for r in training]
        audited: list[Records | ReportRecords] = [report_records(config, r, edges) for r in results]
    else:
        train = [records(config, r) for r in training]
        audited = [records(config, r) for r in results]
    posterior = Posterior.fit(train)
    hits: dict[str, list[np.ndarray]] = {
        a: [] for a in (REPORT_ADVERSARIES if algo.reports else ADVERSARIES)
    }
    public: dict[str, list[np.ndarray]] = {b: [] for b in BASELINES}
    exact: list[np.ndarray] = []
    voted: list[np.ndarray] = []
    senders: list[np.ndarray] = []
    for rec in audited:
        n = rec.shape[0]
        if isinstance(rec, ReportRecords):
            own = np.where(rec.sent, (rec.reported & rec.optimal).any(axis=1), rec.optimal.mean())
            hits["reported-arm"].append(own.astype(float))
            exact.append(np.zeros(n))  # a randomized report never names the arm for sure
            voted.append(rec.sent.astype(float))
            senders.append(own[rec.sent].astype(float))
        else:
            hits["never-voted-against"].append(hit_probabilities(rec.votes, rec.optimal))
            exact.append((rec.votes.sum(axis=1) == k - 1).astype(float))
            voted.append(rec.votes.any(axis=1).astype(float))
        scores = posterior.scores(rec)
        hits["bayes-posterior"].append(best_guess_hits(scores, rec.optimal))
        # scores are probabilities: + 2 puts every named arm above every other arm
        hits["outcome+bayes-posterior"].append(
            best_guess_hits(np.where(rec.named, scores + 2.0, scores), rec.optimal)
        )
        named = rec.named[0]
        public["identified-arm"].append(
            np.full(n, (named & rec.optimal).sum() / max(named.sum(), 1))
        )
        public["uniform"].append(np.full(n, rec.optimal.mean()))
    sc = describe([r.sample_complexity for r in results])
    return VoteAudit(
        method=method_label(algo),
        certified_epsilon=certified_epsilon(config),
        hit_rate_uniform_prior=hit_rate_uniform_prior(config),
        papers_privacy=papers_privacy(algo, k),
        certifies=certifies(algo),
        adversaries={a: Rate.of(h) for a, h in hits.items()},
        baseline={b: Rate.of(h) for b, h in public.items()},
        named_exactly=Rate.of(exact),
        voters=Rate.of(voted),
        agents=sum(len(x) for x in exact),
        trials=len(results),
        training_trials=len(training),
        sample_complexity=(sc.mean, sc.ci95_low, sc.ci95_high),
        messages=float(np.mean([r.messages for r in results])),
        threshold=config.threshold,
        senders=Rate.of(senders) if algo.reports else None,
    )
