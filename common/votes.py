"""The global vote rule, in one place: the coordinator's Lua script and the simulators follow it.

An arm leaves the global set once `threshold` distinct agents voted against it; an agent's second
vote on the same arm counts for nothing; the last arm never leaves; a vote on an arm that is already
out is a message but changes nothing.

CDE's reports (common.cde) follow the other rule here, `decide_report`: an agent reports one arm,
once per experiment; the first arm that `threshold` distinct agents reported is accepted and every
other arm leaves at once. Its counters are the same per-arm sets of agents, holding reporters.

Ties. Votes can stop short of removing any arm: with two arms within eps of each other and fewer
than 2M - 1 agents, each agent keeps one of them and votes against the other, and neither reaches M
votes. `reachable_votes` bounds, for each remaining arm, the votes it has plus those it can still
get in this epoch while no arm leaves; when no arm can reach the threshold, nothing can change any
more (no elimination, so no agent restarts) and the experiment is tied (`is_tied`). An agent stops
voting ("settles") once its local set holds one arm, which it never votes against. Under DE and
DP-MASE every local elimination is sent, so an agent that voted against every remaining arm but
one has settled, visibly. Under CE some votes are dropped, so the agent says it itself: one
"settled" message, which carries no arm (`GlobalState.settle`). The coordinator then forgets the
flag of a settled agent whenever an arm leaves that the agent did not visibly vote against (it may
have been the agent's own arm, which restarts it); an agent still settled then sends it again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from common.rounding import upper


class VoteOutcome(StrEnum):
    COUNTED = "counted"  # a new voter for an arm still in the set
    ELIMINATED = "eliminated"  # counted, and it brought the arm to the threshold
    DUPLICATE = "duplicate"  # this agent already voted against this arm in this epoch
    ARM_OUT = "arm_out"  # the arm already left the set (a late vote)
    LAST_ARM = "last_arm"  # ignored: the last arm is the identified one, it takes no more votes


class ReportOutcome(StrEnum):
    COUNTED = "counted"  # a first report, of an arm still in the set
    ACCEPTED = "accepted"  # counted, and it brought the arm to the threshold: the others leave
    DUPLICATE = "duplicate"  # this agent already reported (any arm) in this experiment
    DECIDED = "decided"  # an arm was accepted already: the answer is final


def decide_report(
    remaining: Collection[int],
    reporters: Collection[str],
    count: int,
    agent: str,
    threshold: int,
) -> ReportOutcome:
    """CDE's rule as a pure function of the state before the report: `reporters` are the agents
    that reported any arm, `count` the reports of this one. A repeated report is a duplicate even
    once decided, so that the replies to an agent do not change with the reports of others."""
    if agent in reporters:
        return ReportOutcome.DUPLICATE
    if len(remaining) == 1:
        return ReportOutcome.DECIDED
    if count + 1 >= threshold:
        return ReportOutcome.ACCEPTED
    return ReportOutcome.COUNTED


def reports_exhausted(
    remaining: Collection[int],
    counts: Mapping[int, int],
    reported: int,
    n_agents: int,
    threshold: int,
) -> bool:
    """CDE: several arms remain and none can reach the threshold with the N - `reported` agents
    that have not reported yet: no answer will come (the certificate's no-answer event)."""
    if len(remaining) < 2:
        return False
    free = max(0, n_agents - reported)
    return all(counts.get(arm, 0) + free < threshold for arm in remaining)


def decide_vote(
    remaining: frozenset[int] | set[int],
    voters: frozenset[str] | set[str],
    agent: str,
    arm: int,
    threshold: int,
) -> VoteOutcome:
    """The rule as a pure function of the arm's state before the vote. A repeated vote is a
    duplicate even once its arm is out: the replies to an agent that repeats itself do not change
    with the votes of others (and so cannot time them)."""
    if agent in voters:
        return VoteOutcome.DUPLICATE
    if arm not in remaining:
        return VoteOutcome.ARM_OUT
    if len(remaining) == 1:  # identified: the answer is final, a vote against it changes nothing
        return VoteOutcome.LAST_ARM
    if len(voters) + 1 >= threshold:
        return VoteOutcome.ELIMINATED
    return VoteOutcome.COUNTED


def reachable_votes(
    remaining: Collection[int],
    voters: Mapping[int, Collection[str]],
    settled: Collection[str],
    n_agents: int,
    liars: int = 0,
) -> dict[int, int]:
    """For each remaining arm, the most distinct votes it can have in this epoch while no arm
    leaves: its voters, plus every agent that has not voted against it and can still vote.

    An agent can still vote unless it has settled: it said so (`settled`), or it voted against
    every remaining arm but one. Agents that never voted count as able to (N = `n_agents` includes
    them). An arm's count is then (settled voters of the arm) + (agents not settled): the voters
    that can still vote are among the agents not settled. A "settled" message is only a claim:
    with a tolerance f (`liars`), up to f of the agents that only said so may be lying and vote
    after all, so each arm can also get the votes of min(f, such agents that have not voted
    against it)."""
    against: dict[str, set[int]] = {}
    for arm in remaining:
        for agent in voters.get(arm, ()):
            against.setdefault(agent, set()).add(arm)
    by_votes = {a for a, arms in against.items() if len(remaining) - len(arms) <= 1}
    done = set(settled) | by_votes
    claimed = set(settled) - by_votes  # done only by their word
    free = max(0, n_agents - len(done))
    return {
        arm: free
        + sum(1 for agent in done if arm in against.get(agent, ()))
        + min(liars, sum(1 for agent in claimed if arm not in against.get(agent, ())))
        for arm in remaining
    }


def is_tied(
    remaining: Collection[int],
    voters: Mapping[int, Collection[str]],
    settled: Collection[str],
    n_agents: int,
    threshold: int,
    tolerance: int = 0,
) -> bool:
    """Several arms remain and none can reach the threshold any more: the experiment is tied.
    With a tolerance f, f agents' "settled" claims are not believed (`reachable_votes`): f liars
    cannot decide a tie by claims alone. What a tie certifies is `tie_certificate`'s sentence."""
    if len(remaining) < 2:
        return False
    reachable = reachable_votes(remaining, voters, settled, n_agents, liars=tolerance)
    return all(count < threshold for count in reachable.values())


def tie_certificate(threshold: int, agents: int, failure: float, tolerance: int = 0) -> str:
    """What a tie certifies, exactly. An arm leaves only with M distinct votes (with tolerance f:
    M honest ones), so the best arm is among the candidates unless M honest agents voted it out by
    error, whose probability with the N enrolled agents is at most `failure`, the configuration's
    certified failure P(Bin(N - f, p) >= M) (common/certificate.py; docs/SUBROUTINES.md,
    section 3). And the best arm may leave without any error when another arm is within epsilon
    of it (SE's epsilon-stop; measured: of two equal arms, arm 0 left in 79 of 200 runs at
    N = 64). Nothing is certified about how the candidates compare. `threshold` is M (without f),
    `agents` N."""
    sentence = (
        f"the best arm is among the candidates unless M = {threshold} agents voted it out by "
        f"error (probability at most {upper(failure)} with the N = {agents:,} agents enrolled), "
        "or another arm is within epsilon of it (then either may have been voted out without "
        "error); nothing is certified about the differences between the candidates"
    )
    return f"while at most f = {tolerance} agents lie, {sentence}" if tolerance else sentence


@dataclass(frozen=True)
class Elimination:
    arm: int
    votes: int
    time: int  # activation count (or any clock the caller passes) at the elimination
    order: int  # 1 for the first arm out in this epoch, 2 for the next, ...
    epoch: int = 0  # DSER4 reset epoch; the log keeps every epoch's eliminations


@dataclass
class GlobalState:
    """Global arm set and voter sets of one experiment epoch, applied with `decide_vote`."""

    n_arms: int
    threshold: int
    remaining: set[int] = field(default_factory=set)
    voters: dict[int, set[str]] = field(default_factory=dict)
    eliminations: list[Elimination] = field(default_factory=list)
    version: int = 0
    epoch: int = 0
    messages: int = 0  # votes and settled messages received, counted or not
    ignored: int = 0
    settled: set[str] = field(default_factory=set)  # agents that said they settled (CE)
    reporters: set[str] = field(default_factory=set)  # CDE: agents that reported, any arm

    def __post_init__(self) -> None:
        if not self.remaining:
            self.remaining = set(range(self.n_arms))
        for arm in range(self.n_arms):
            self.voters.setdefault(arm, set())

    def vote(self, agent: str, arm: int, time: int = 0) -> VoteOutcome:
        if not 0 <= arm < self.n_arms:
            raise ValueError(f"arm={arm} is invalid: must be in [0, {self.n_arms - 1}]")
        self.messages += 1
        outcome = decide_vote(self.remaining, self.voters[arm], agent, arm, self.threshold)
        if outcome in (VoteOutcome.ARM_OUT, VoteOutcome.DUPLICATE, VoteOutcome.LAST_ARM):
            self.ignored += 1
            return outcome
        self.voters[arm].add(agent)
        # it votes: whatever it said, it has not settled (coordinator/store/lua/vote.lua does the same)
        self.settled.discard(agent)
        if outcome is VoteOutcome.ELIMINATED:
            self.remaining.discard(arm)
            # A settled agent that did not vote against the arm may have held it: it restarts.
            self.settled &= self.voters[arm]
            self.version += 1
            order = sum(e.epoch == self.epoch for e in self.eliminations) + 1
            self.eliminations.append(
                Elimination(arm, len(self.voters[arm]), time, order, self.epoch)
            )
        return outcome

    def report(self, agent: str, arm: int, time: int = 0) -> ReportOutcome:
        """A CDE report (`decide_report`): `voters[arm]` holds the arm's reporters."""
        if not 0 <= arm < self.n_arms:
            raise ValueError(f"arm={arm} is invalid: must be in [0, {self.n_arms - 1}]")
        self.messages += 1
        outcome = decide_report(
            self.remaining, self.reporters, len(self.voters[arm]), agent, self.threshold
        )
        if outcome in (ReportOutcome.DUPLICATE, ReportOutcome.DECIDED):
            self.ignored += 1
            return outcome
        self.reporters.add(agent)
        self.voters[arm].add(agent)
        if outcome is ReportOutcome.ACCEPTED:
            for order, out in enumerate(sorted(self.remaining - {arm}), start=1):
                self.eliminations.append(
                    Elimination(out, len(self.voters[out]), time, order, self.epoch)
                )
            self.remaining = {arm}
            self.version += 1
        return outcome

    def exhausted(self, n_agents: int) -> bool:
        """CDE: no arm can reach the threshold any more (`reports_exhausted`)."""
        counts = {arm: len(self.voters[arm]) for arm in self.remaining}
        return reports_exhausted(
            self.remaining, counts, len(self.reporters), n_agents, self.threshold
        )

    def vote_many(self, agent: str, arms: Iterable[int], time: int = 0) -> list[VoteOutcome]:
        return [self.vote(agent, arm, time) for arm in arms]

    def settle(self, agent: str) -> None:
        """An agent's "settled" message (CE): its local set holds one arm, it votes no more."""
        self.messages += 1
        self.settled.add(agent)

    def tied(self, n_agents: int) -> bool:
        """No remaining arm can reach the threshold any more (see `is_tied`)."""
        return is_tied(self.remaining, self.voters, self.settled, n_agents, self.threshold)

    def reset(self) -> None:
        """DSER4's global reset: every arm back, votes cleared, a new epoch."""
        self.remaining = set(range(self.n_arms))
        self.voters = {arm: set() for arm in range(self.n_arms)}
        self.settled = set()
        self.epoch += 1
        self.version += 1

    def votes_against(self, arm: int) -> int:
        return len(self.voters[arm])

    def fewest_votes_arm(self) -> int:
        """The arm the set points at while it holds several: fewest votes, then lowest index."""
        return min(self.remaining, key=lambda arm: (len(self.voters[arm]), arm))
