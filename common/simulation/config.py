"""What one simulated experiment is, and what a trial of it reports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from common.activation import Activation
from common.algorithms import AlgorithmConfig
from common.environments import Environment
from common.errors import ParameterError
from common.ldp import Estimate, Lift
from common.subroutines import LocalParams
from common.votes import Elimination

STOP_RULES = ("all-agents", "global")
ATTACKS = ("fixed", "adaptive")
DEFAULT_BUDGET = 200_000_000


@dataclass(frozen=True)
class SimulationConfig:
    """stop: "all-agents" (Feraud: every agent holds one arm still in the global set) or "global"
    (Rio: the global set has one arm; an agent whose local set has one arm retires from P_N).
    budget: the most activations a trial may take before it is cut short.

    attackers: the first `attackers` agents (indices 0 .. A-1: the most active ones under the
    skewed activation distributions, so the strongest attack) are Byzantine. At their first
    activation in each experiment epoch they vote against the best arm (`attacked_arm`: argmax of
    the means at t = 0, lowest index on ties) if it is still in the global set, and against
    nothing else; they run no subroutine (no rewards, no SER4 coin) but still consume their
    activations. Under the all-agents rule only the honest agents must be settled, and `correct`
    and `best_arm` are computed on the honest agents; under the global rule an attacker retires
    after its first activation. Voting algorithms only (de, ce, dp-mase); 0 by default.

    Ties (voting algorithms, both stop rules). A trial ends with stopped_by "tie" as soon as no
    remaining arm can reach the threshold in the current epoch (`common.votes.is_tied`) while
    several remain. The rule sees what the coordinator sees (counted votes; CE's settled
    messages) plus two facts only the simulator knows, which the services cannot: a Byzantine
    agent that had its activation of the epoch never votes again in it, and under the global rule
    a retired agent never acts again. Both count as settled. At a tie `candidates` is the set of
    remaining arms, `correct` says whether every candidate is eps-optimal at the stop, and
    `best_arm` is the candidate with the fewest votes (lowest index on equal votes).
    CE agents send one settled message when their local set reaches one arm (while it is still in
    the global set), and again once the coordinator forgot it (an arm left that they did not
    visibly vote against) if they are still settled; each counts in `messages`.

    CDE (`algorithm.reports`, common.cde). Each agent's fixed-budget run ends at its T K-th
    activation (T with every_arm); it then sends its one randomized report. A trial stops as soon
    as an arm has `threshold` reports (stopped_by "global": the answer, under both stop rules), or
    when no arm can reach it any more (`common.votes.reports_exhausted`: stopped_by "exhausted", no
    answer, counted as a failure like a budget cut: the certificate's no-answer event). The stop
    rule only says whether an agent whose run ended keeps being activated (all-agents, Feraud's
    activation model) or retires from P_N (global, Rio's). Byzantine agents lie once each, by the
    `attack` strategy: "fixed", they report `lie_arm` at their first activation (a global-rule
    attacker then retires); "adaptive", the strongest attack on the certificate, they wait
    (activated, doing nothing) until some non-eps-optimal arm has M - A honest reports (A the
    attackers) while no arm is accepted, then all report that arm at once, which accepts it (with
    A >= M they need no honest report: they act as "fixed"). `exact_local_error` is the stress
    mode: each honest agent's local answer ignores its rewards and is each non-eps-optimal arm
    with probability eta / (K - 1), and each of the s eps-optimal arms with an even share of the
    rest (`stress_answers`: the worst case the certificate allows), then randomized as usual.
    Drifting rewards are refused: the fixed-budget run and its certificate are for fixed
    means. Bernoulli arms' rewards are 0 or 1, and the agents are told so
    (`declare_bernoulli`, as an experiment's `rewards: bernoulli`): CDE's T is then the exact
    binomial one (common.subroutines.bernoulli_budget); with `declare_bernoulli` False they are
    told only that the rewards lie in [0, 1] (the sub-Gaussian T). Ignored for Gaussian arms.

    LDP (`algorithm.crowd`, common.ldp, engine common.simulation.ldp). No agent learns: each
    activation plays an arm of the published allocation and, while the agent has sent fewer than
    B reports, sends one private report. The stop rule plays no part (the coordinator stops);
    Byzantine agents send B reports each that push the best arm down and `lie_arm` up. Drifting
    rewards are refused (the intervals are for fixed means)."""

    environment: Environment
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    n_agents: int = 32
    activation: Activation = field(default_factory=Activation)
    stop: str = "all-agents"
    budget: int = DEFAULT_BUDGET
    attackers: int = 0
    exact_local_error: bool = False  # CDE's stress mode (see above)
    attack: str = "fixed"  # CDE: how the attackers lie (see above)
    declare_bernoulli: bool = True  # Bernoulli arms: the agents know the rewards are 0 or 1

    def __post_init__(self) -> None:
        if self.stop not in STOP_RULES:
            raise ParameterError("stop", self.stop, f"must be one of {', '.join(STOP_RULES)}")
        if self.budget < 1:
            raise ParameterError("budget", self.budget, "must be >= 1")
        self.algorithm.validate_for(self.environment.n_arms, self.n_agents)
        self.local_params()
        a = self.attackers
        if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < self.n_agents:
            raise ParameterError(
                "attackers", a, f"must be an integer in [0, agents - 1 = {self.n_agents - 1}]"
            )
        if a > 0 and not (self.algorithm.votes or self.algorithm.reports or self.algorithm.crowd):
            raise ParameterError(
                "attackers",
                a,
                "Byzantine agents lie in their votes or reports: de, ce, dp-mase, cde, ldp",
            )
        if self.attack not in ATTACKS:
            raise ParameterError("attack", self.attack, f"must be one of {', '.join(ATTACKS)}")
        if self.attack == "adaptive" and not self.algorithm.reports:
            raise ParameterError(
                "attack",
                self.attack,
                "adaptive liars wait for a wrong arm's honest reports: cde only (a vote against "
                "the best arm counts whenever it is sent)",
            )
        if self.exact_local_error and not self.algorithm.reports:
            raise ParameterError(
                "exact_local_error", True, "the stress mode of CDE's local runs: cde only"
            )
        if self.algorithm.reports and self.environment.drift:
            raise ParameterError(
                "drift",
                self.environment.drift,
                "CDE's fixed-budget run and its certificate are for fixed means",
            )
        if self.algorithm.crowd and self.environment.drift:
            raise ParameterError(
                "drift",
                self.environment.drift,
                "LDP's intervals are for fixed means: the honest reports on an arm must be i.i.d.",
            )

    @property
    def sigma(self) -> float | None:
        return None if self.environment.bounded else self.environment.sigma

    @property
    def bernoulli(self) -> bool:
        """The agents know every reward is 0 or 1 (Bernoulli arms, declared)."""
        return self.environment.bounded and self.declare_bernoulli

    def local_params(self) -> LocalParams:
        """Each agent's local run (CDE: its T from the rewards the agents are told of)."""
        return self.algorithm.local_params(
            self.environment.n_arms, self.n_agents, self.sigma, self.bernoulli
        )

    @cached_property
    def threshold(self) -> int | None:
        """M + f; CDE's is chosen from N (a search: computed once)."""
        return self.algorithm.threshold(self.environment.n_arms, self.n_agents)

    def probabilities(self) -> np.ndarray:
        return self.activation.probabilities(self.n_agents)

    @property
    def attacked_arm(self) -> int:
        """The arm the Byzantine agents vote against: the best at t = 0, lowest index on ties."""
        return int(np.argmax(self.environment.means_at(0)))

    @property
    def lie_arm(self) -> int:
        """CDE: the arm the Byzantine agents report, the most dangerous one: the best arm that is
        not eps-optimal (the worst arm when every arm is)."""
        mu, bad = self.environment.means_at(0), self.bad_arms
        if bad.size == 0:
            return int(np.argmin(mu))
        return int(bad[np.argmax(mu[bad])])

    @property
    def local_budget(self) -> int:
        """CDE: the activations of one agent's fixed-budget run, T K (T with every_arm)."""
        params = self.local_params()
        assert params.pulls is not None, "CDE's local params carry T"
        return params.pulls if params.every_arm else params.pulls * self.environment.n_arms

    @property
    def bad_arms(self) -> np.ndarray:
        """The arms that are not eps-optimal at t = 0."""
        mu = self.environment.means_at(0)
        return np.flatnonzero(mu < mu.max() - self.algorithm.epsilon)

    def stress_answers(self) -> np.ndarray:
        """The stress mode's local answer distribution (K,): each non-eps-optimal arm with
        probability eta / (K - 1), the s eps-optimal arms an even share of the rest (1 - eta when
        s = 1): the worst case for the certificate (docs/CDE.md, section 3)."""
        k = self.environment.n_arms
        probabilities = np.zeros(k)
        probabilities[self.bad_arms] = self.algorithm.eta / (k - 1)
        good = probabilities == 0.0
        probabilities[good] = (1.0 - probabilities.sum()) / good.sum()
        return probabilities


@dataclass
class TrialResult:
    sample_complexity: int  # activations until the stop
    # votes sent (CE: those not dropped) plus CE's settled messages; central: N - 1 broadcasts per
    # activation
    messages: int
    best_arm: int  # 0-based; at a tie the candidate with the fewest votes (then lowest index)
    # eps-optimal at the stop (all-agents rule: every agent's arm is; tie: every candidate is)
    correct: bool
    # "all-agents" | "global" | "tie" (votes can remove no arm any more, several remain: see
    # `common.votes.is_tied`) | "exhausted" (no agent left to act; non-voting baselines only:
    # a voting run that exhausts with several arms left is a tie; CDE: no arm can reach the
    # threshold any more; LDP: every agent's B reports are spent, no answer, best_arm the leader)
    # | "budget". LDP's answer (the leader identified) is "global".
    stopped_by: str
    eliminations: list[Elimination] = field(default_factory=list)
    resets: int = 0  # DSER4 global resets
    agent_votes: np.ndarray | None = None  # (N, K) bool: votes each agent sent, current epoch
    # (N, K) int: the activation t at which each of those votes was sent, 0 where none (what the
    # coordinator sees of an agent: its votes, their order and times; common/privacy.py)
    agent_vote_times: np.ndarray | None = None
    # (N,) the arm each agent holds at the stop, -1 if several (CDE: its local answer, before
    # randomization, -1 while its run goes on)
    agent_arms: np.ndarray | None = None
    # Agents whose sent votes contradict the outcome: they voted against best_arm (current epoch).
    # Every Byzantine agent that voted is one; an honest agent is one only when its local
    # subroutine eliminated the arm the experiment returned.
    suspects: list[int] = field(default_factory=list)
    # The arms the outcome leaves: the remaining arms at a tie (sorted), [best_arm] otherwise
    # (CDE without an answer: every arm).
    candidates: list[int] = field(default_factory=list)
    settled_messages: int = 0  # CE's "settled" messages, included in `messages`
    # CDE: what the coordinator sees of each agent, its one report (-1: none sent before the
    # stop) and the activation t at which it was sent (0: none). `messages` counts the reports.
    agent_reports: np.ndarray | None = None  # (N,) int
    agent_report_times: np.ndarray | None = None  # (N,) int
    # LDP: the coordinator's last estimates (each arm's mean and interval, on the rewards' scale)
    # and the leader's lift against each other arm; `messages` counts the reports. None elsewhere.
    estimates: tuple[Estimate, ...] | None = None
    lift: tuple[Lift, ...] | None = None
    # LDP, on request only (common.simulation.ldp.run_trial(record=True)): (reports, 3) int, the
    # agent, arm and bit of each report in order
    report_log: np.ndarray | None = None

    def __post_init__(self) -> None:
        if not self.candidates:
            self.candidates = [self.best_arm]

    def to_json(self) -> dict[str, object]:
        """The trial as JSON; `suspects` is their COUNT (the list can hold up to N agents)."""
        return {
            "sample_complexity": self.sample_complexity,
            "messages": self.messages,
            "best_arm": self.best_arm,
            "correct": self.correct,
            "stopped_by": self.stopped_by,
            "candidates": list(self.candidates),
            "settled_messages": self.settled_messages,
            "resets": self.resets,
            "suspects": len(self.suspects),
            "eliminations": [
                {"arm": e.arm, "votes": e.votes, "time": e.time, "order": e.order, "epoch": e.epoch}
                for e in self.eliminations
            ],
            **({} if self.estimates is None else {"estimates": estimates_json(self.estimates)}),
            **({} if self.lift is None else {"lift": lift_json(self.lift)}),
        }


def estimates_json(estimates: Sequence[Estimate]) -> list[dict[str, object]]:
    """Per arm: its index, reports, mean (None before its first report) and interval (arms have
    no names in a simulation)."""
    return [
        {"index": e.index, "reports": e.reports, "mean": e.mean, "ci": [e.low, e.high]}
        for e in estimates
    ]


def lift_json(lift: Sequence[Lift]) -> list[dict[str, object]]:
    """The leader against each other arm: the difference of their means and its interval."""
    return [{"vs": d.vs, "mean": d.mean, "ci": [d.low, d.high]} for d in lift]


def tie_outcome(
    remaining: Iterable[int], votes: Sequence[int] | np.ndarray, optimal: np.ndarray
) -> tuple[int, bool, list[int]]:
    """(best_arm, correct, candidates) of a tie: `remaining` arms with `votes[arm]` counted votes
    against each; best is the fewest-votes candidate (lowest index on equal votes), correct only
    if every candidate is eps-optimal (`optimal`: (K,) bool at the stop)."""
    candidates = sorted(int(a) for a in remaining)
    best = min(candidates, key=lambda a: (int(votes[a]), a))
    return best, bool(all(optimal[a] for a in candidates)), candidates


def report_outcome(
    config: SimulationConfig, counts: np.ndarray, accepted: int | None, t: int
) -> tuple[int, bool, list[int]]:
    """(best_arm, correct, candidates) of a CDE trial: the accepted arm, correct when it is
    eps-optimal at t; without one (exhausted, budget) no answer, a failure, every arm a candidate
    and best the most reported (lowest index on equal counts)."""
    if accepted is not None:
        return accepted, config.environment.eps_optimal(accepted, config.algorithm.epsilon, t), []
    best = int(np.argmax(counts))
    return best, False, list(range(config.environment.n_arms))


def majority_arm(agent_arms: np.ndarray, n_arms: int) -> int:
    held = agent_arms[agent_arms >= 0]
    if held.size == 0:
        return 0
    return int(np.bincount(held, minlength=n_arms).argmax())


def find_suspects(agent_votes: np.ndarray | None, best_arm: int) -> list[int]:
    """The agents whose sent votes contradict the final outcome: they voted against the arm the
    trial returned. Both engines report it through this helper."""
    if agent_votes is None:
        return []
    return [int(n) for n in np.flatnonzero(np.asarray(agent_votes, dtype=bool)[:, best_arm])]


def honest_outcome(
    config: SimulationConfig, agent_arms: np.ndarray, optimal: np.ndarray
) -> tuple[int, bool]:
    """(best_arm, correct) under the all-agents rule (and for the non-voting baselines): the arm
    most honest agents hold, and whether every honest agent holds an eps-optimal arm (`optimal`:
    (K,) bool at the stop). The Byzantine agents 0 .. attackers-1 hold nothing and are left out."""
    honest = agent_arms[config.attackers :]
    best = majority_arm(honest, config.environment.n_arms)
    held = honest[honest >= 0]
    correct = bool(held.size == honest.size and optimal[held].all())
    return best, correct
