"""The reference simulator: one activation at a time through the very objects the services use.

Slow and plain on purpose: it is the definition the fast simulator is tested against.
"""

from __future__ import annotations

import numpy as np

from common.agent import AgentSpec, LocalAgent
from common.cde import randomize
from common.simulation.config import (
    SimulationConfig,
    TrialResult,
    find_suspects,
    honest_outcome,
    majority_arm,
    report_outcome,
    tie_outcome,
)
from common.votes import GlobalState, ReportOutcome, VoteOutcome, is_tied

_BLOCK = 4096


class _AgentDraws:
    """Agents drawn i.i.d. from P_N restricted to the present ones (retired agents are skipped,
    which is exactly the renormalised distribution); redrawn over the present ones when most of
    the mass has retired."""

    def __init__(self, probabilities: np.ndarray, rng: np.random.Generator) -> None:
        self.base = probabilities
        self.rng = rng
        self.present = np.ones(len(probabilities), dtype=bool)
        self._reweigh()

    def _reweigh(self) -> None:
        weights = np.where(self.present, self.base, 0.0)
        self.mass = weights.sum()
        self.p = weights / self.mass
        self.block: np.ndarray = np.empty(0, dtype=np.int64)
        self.pos = 0

    def retire(self, n: int) -> None:
        self.present[n] = False
        if self.present.any() and self.base[self.present].sum() < 0.5 * self.mass:
            self._reweigh()

    def any_present(self) -> bool:
        return bool(self.present.any())

    def next(self) -> int:
        while True:
            if self.pos >= len(self.block):
                self.block = self.rng.choice(len(self.p), size=_BLOCK, p=self.p)
                self.pos = 0
            n = int(self.block[self.pos])
            self.pos += 1
            if self.present[n]:
                return n


def run_trial(config: SimulationConfig, seed: int | np.random.SeedSequence) -> TrialResult:
    if config.algorithm.crowd:  # LDP: no agent learns; the coordinator's rule, vectorized
        from common.simulation import ldp

        return ldp.run_trial(config, seed)
    env = config.environment
    algo = config.algorithm
    n_arms, n_agents = env.n_arms, config.n_agents
    # a fresh copy: spawn() advances the caller's SeedSequence, so re-running it would differ
    if isinstance(seed, np.random.SeedSequence):
        seeds = np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key)
    else:
        seeds = np.random.SeedSequence(seed)
    rng = np.random.default_rng(seeds.spawn(1)[0])
    params = config.local_params()
    spec = AgentSpec(n_arms, algo.local_subroutine, params, algo.vote_drop, algo.report_privacy)
    draws = _AgentDraws(config.probabilities(), rng)

    if algo.algorithm == "central":
        return _run_central(
            config, LocalAgent(spec, np.random.default_rng(seeds.spawn(1)[0])), draws, rng
        )

    agent_rngs = [np.random.default_rng(s) for s in seeds.spawn(n_agents)]
    agents = [LocalAgent(spec, agent_rngs[n]) for n in range(n_agents)]
    if algo.reports:
        return _run_reports(config, agents, draws, rng)
    threshold = config.threshold or n_agents + 1  # baselines: no arm ever leaves
    state = GlobalState(n_arms, threshold)
    votes_sent = np.zeros((n_agents, n_arms), dtype=bool)
    vote_times = np.zeros((n_agents, n_arms), dtype=np.int64)  # activation t of each sent vote
    voting = algo.votes
    retire = config.stop == "global"
    says_settled = voting and algo.vote_drop > 0.0  # CE: settled messages (see common.votes)
    settled = np.zeros(n_agents, dtype=bool)  # holds one arm that is still in the global set
    # Byzantine agents 0 .. A-1: no subroutine; one vote against `attacked` per epoch. They never
    # hold the all-agents stop back (always "settled").
    attackers = config.attackers
    attacked = config.attacked_arm
    attacked_epoch = np.full(n_agents, -1, dtype=np.int64)  # epoch of the last attack, per agent
    settled[:attackers] = True
    # The tie rule (common.votes.is_tied) sees the coordinator's view (counted votes, CE's settled
    # messages: state.settled) plus what only the simulator knows: agents that can never vote again
    # in this epoch. Retired agents (global rule) and Byzantine agents that had their activation.
    retired: set[str] = set()
    acted: set[str] = set()
    honest = {str(m) for m in range(attackers, n_agents)}
    settled_messages = 0

    def tied(extra: set[str] | frozenset[str] = frozenset()) -> bool:
        known = state.settled | retired | acted | extra
        return is_tied(state.remaining, state.voters, known, n_agents, threshold)

    def is_settled(agent: LocalAgent) -> bool:
        """Holds one arm still in the global set, and has seen the current epoch."""
        return agent.done and agent.epoch == state.epoch and agent.local_arms[0] in state.remaining

    def refresh_settled() -> None:
        for m, other in enumerate(agents):
            settled[m] = m < attackers or is_settled(other)

    def all_agents_stop() -> str:
        """Every honest agent holds an arm still in the set: a tie if several remain and none
        can leave even counting every honest agent as settled, else the all-agents stop."""
        return "tie" if voting and len(state.remaining) > 1 and tied(honest) else "all-agents"

    t = 0
    stopped_by = "budget"
    while t < config.budget:
        if retire and not draws.any_present():
            # a voting run: every agent retired with several arms left, none can leave: a tie
            stopped_by = "tie" if voting and tied() else "exhausted"
            break
        n = draws.next()
        agent = agents[n]
        t += 1
        event = False  # something that can make the votes tie: checked only then
        if n < attackers:
            if attacked_epoch[n] != state.epoch:
                attacked_epoch[n] = state.epoch
                acted.add(str(n))
                event = True
                if attacked in state.remaining:
                    version = state.version
                    votes_sent[n, attacked] = True
                    vote_times[n, attacked] = t
                    state.vote(str(n), attacked, time=t)
                    if state.version != version:
                        refresh_settled()
            if retire:
                if len(state.remaining) == 1:
                    stopped_by = "global"
                    break
                draws.retire(n)
                retired.add(str(n))
            if event and tied():
                stopped_by = "tie"
                break
            if not retire and settled.all():
                stopped_by = all_agents_stop()
                break
            continue
        votes: list[int] = []
        if voting:
            votes += agent.sync(state.remaining, state.epoch)
        if agent.wants_reset():
            if algo.global_reset:
                state.reset()
                votes_sent[:] = False
                vote_times[:] = 0
                votes = []  # decided on the old epoch's statistics: never sent
                settled[:] = False  # every agent restarts in the new epoch
                settled[:attackers] = True
                acted.clear()
                event = True
                agent.sync(state.remaining, state.epoch)
            else:
                agent.reset(state.remaining)
        arms = agent.select()
        if arms:
            votes += agent.observe(arms, env.draw(arms, t - 1, rng))
        if voting:
            version = state.version
            for arm in votes:
                if not votes_sent[n, arm]:
                    vote_times[n, arm] = t
                votes_sent[n, arm] = True
                outcome = state.vote(str(n), arm, time=t)
                event |= outcome in (VoteOutcome.COUNTED, VoteOutcome.ELIMINATED)
            if state.version != version:
                refresh_settled()
        settled[n] = is_settled(agent)
        if says_settled and settled[n] and str(n) not in state.settled:
            # CE: "my local set holds one arm" (again, if an arm left that it did not visibly
            # vote against: the coordinator then forgot it)
            state.settle(str(n))
            settled_messages += 1
            event = True
        if retire:
            if voting and len(state.remaining) == 1:
                stopped_by = "global"
                break
            if agent.done:
                draws.retire(n)
                retired.add(str(n))
                event = True
        if voting and event and tied():
            stopped_by = "tie"
            break
        if not retire and settled.all():
            stopped_by = all_agents_stop()
            break

    agent_arms = np.array([a.local_arms[0] if a.done else -1 for a in agents], dtype=np.int64)
    agent_arms[:attackers] = -1
    mu = env.means_at(t)
    optimal = mu >= mu.max() - algo.epsilon
    candidates: list[int] = []
    if stopped_by == "tie":
        votes_against = [state.votes_against(a) for a in range(n_arms)]
        best, correct, candidates = tie_outcome(sorted(state.remaining), votes_against, optimal)
    elif stopped_by == "all-agents" or not voting:
        best, correct = honest_outcome(config, agent_arms, optimal)
    else:
        best = (
            next(iter(state.remaining)) if len(state.remaining) == 1 else state.fewest_votes_arm()
        )
        correct = env.eps_optimal(best, algo.epsilon, t)
    return TrialResult(
        sample_complexity=t,
        messages=state.messages,
        best_arm=best,
        correct=correct,
        stopped_by=stopped_by,
        eliminations=list(state.eliminations),
        resets=state.epoch,
        agent_votes=votes_sent,
        agent_vote_times=vote_times,
        agent_arms=agent_arms,
        suspects=find_suspects(votes_sent, best),
        candidates=candidates,
        settled_messages=settled_messages,
    )


def _run_reports(
    config: SimulationConfig, agents: list[LocalAgent], draws: _AgentDraws, rng: np.random.Generator
) -> TrialResult:
    """CDE: each agent plays its fixed-budget run and, at the activation it ends, sends the one
    randomized report LocalAgent drew (the stress mode draws the local answer from
    `config.stress_answers` instead, then randomizes it); the Byzantine agents lie by
    `config.attack` (fixed: `config.lie_arm` at their first activation; adaptive: all at once,
    the first bad arm whose honest reports reach M - A). The first arm with `threshold` reports
    is the answer; the trial also ends when no arm can reach it any more."""
    env, algo = config.environment, config.algorithm
    n_arms, n_agents = env.n_arms, config.n_agents
    assert config.threshold is not None
    state = GlobalState(n_arms, config.threshold)
    reports = np.full(n_agents, -1, dtype=np.int64)
    times = np.zeros(n_agents, dtype=np.int64)
    answers = np.full(n_agents, -1, dtype=np.int64)  # local answers, before randomization
    stress = config.stress_answers() if config.exact_local_error else None
    retire = config.stop == "global"
    liars = config.attackers
    adaptive = config.attack == "adaptive" and liars < config.threshold
    honest_counts = np.zeros(n_arms, dtype=np.int64)  # what the adaptive liars watch
    bad = set(config.bad_arms.tolist())
    accepted: int | None = None
    t = 0
    stopped_by = "budget"
    while t < config.budget:
        if retire and not draws.any_present():
            stopped_by = "exhausted"
            break
        n = draws.next()
        agent = agents[n]
        t += 1
        report: int | None = None
        if n < liars:
            report = config.lie_arm if reports[n] < 0 and not adaptive else None
        elif not agent.done:
            arms = agent.select()
            agent.observe(arms, env.draw(arms, t - 1, rng))
            if agent.report is not None:
                answers[n] = agent.local_arms[0]
                report = agent.report
                if stress is not None:
                    answers[n] = int(agent.rng.choice(n_arms, p=stress))
                    report = randomize(int(answers[n]), n_arms, algo.privacy, agent.rng)
        if report is None:
            continue
        reports[n], times[n] = report, t
        if state.report(str(n), report, time=t) is ReportOutcome.ACCEPTED:
            accepted, stopped_by = report, "global"
            break
        if adaptive and n >= liars:
            honest_counts[report] += 1
            if report in bad and honest_counts[report] + liars >= config.threshold:
                for liar in range(liars):  # all at once: the last one brings it to M
                    reports[liar], times[liar] = report, t
                    outcome = state.report(str(liar), report, time=t)
                assert outcome is ReportOutcome.ACCEPTED
                accepted, stopped_by = report, "global"
                break
        if state.exhausted(n_agents):
            stopped_by = "exhausted"
            break
        if retire:
            draws.retire(n)
    counts = np.bincount(reports[reports >= 0], minlength=n_arms)
    best, correct, candidates = report_outcome(config, counts, accepted, t)
    return TrialResult(
        sample_complexity=t,
        messages=state.messages,
        best_arm=best,
        correct=correct,
        stopped_by=stopped_by,
        eliminations=list(state.eliminations),
        agent_arms=answers,
        candidates=candidates,
        agent_reports=reports,
        agent_report_times=times,
    )


def _run_central(
    config: SimulationConfig, center: LocalAgent, draws: _AgentDraws, rng: np.random.Generator
) -> TrialResult:
    """0-privacy: every reward goes to one subroutine at confidence 1 - delta; each activation costs
    N - 1 broadcasts (Feraud et al.'s count)."""
    env = config.environment
    all_arms = list(range(env.n_arms))
    t = 0
    while t < config.budget and not center.done:
        draws.next()
        t += 1
        if center.wants_reset():
            center.reset(all_arms)
        arms = center.select()
        center.observe(arms, env.draw(arms, t - 1, rng))
    best = (
        center.local_arms[0]
        if center.done
        else majority_arm(np.array(center.local_arms), env.n_arms)
    )
    return TrialResult(
        sample_complexity=t,
        messages=t * (config.n_agents - 1),
        best_arm=best,
        correct=center.done and env.eps_optimal(best, config.algorithm.epsilon, t),
        stopped_by="global" if center.done else "budget",
        agent_arms=np.array([best if center.done else -1]),
    )
