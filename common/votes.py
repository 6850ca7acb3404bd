"""The global vote rule, in one place: the coordinator's Lua script and the simulators follow it.

An arm leaves the global set once `threshold` distinct agents voted against it; an agent's second
vote on the same arm counts for nothing; the last arm never leaves; a vote on an arm that is already
out is a message but changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum


class VoteOutcome(StrEnum):
    COUNTED = "counted"  # a new voter for an arm still in the set
    ELIMINATED = "eliminated"  # counted, and it brought the arm to the threshold
    DUPLICATE = "duplicate"  # this agent already voted against this arm in this epoch
    ARM_OUT = "arm_out"  # the arm already left the set (a late vote)
    LAST_ARM = "last_arm"  # counted as a voter, but the last arm never leaves


def decide_vote(
    remaining: frozenset[int] | set[int],
    voters: frozenset[str] | set[str],
    agent: str,
    arm: int,
    threshold: int,
) -> VoteOutcome:
    """The rule as a pure function of the arm's state before the vote."""
    if arm not in remaining:
        return VoteOutcome.ARM_OUT
    if agent in voters:
        return VoteOutcome.DUPLICATE
    if len(voters) + 1 >= threshold:
        return VoteOutcome.LAST_ARM if len(remaining) == 1 else VoteOutcome.ELIMINATED
    return VoteOutcome.COUNTED


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
    messages: int = 0
    ignored: int = 0

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
        if outcome in (VoteOutcome.ARM_OUT, VoteOutcome.DUPLICATE):
            self.ignored += 1
            return outcome
        self.voters[arm].add(agent)
        if outcome is VoteOutcome.ELIMINATED:
            self.remaining.discard(arm)
            self.version += 1
            order = sum(e.epoch == self.epoch for e in self.eliminations) + 1
            self.eliminations.append(
                Elimination(arm, len(self.voters[arm]), time, order, self.epoch)
            )
        return outcome

    def vote_many(self, agent: str, arms: Iterable[int], time: int = 0) -> list[VoteOutcome]:
        return [self.vote(agent, arm, time) for arm in arms]

    def reset(self) -> None:
        """DSER4's global reset: every arm back, votes cleared, a new epoch."""
        self.remaining = set(range(self.n_arms))
        self.voters = {arm: set() for arm in range(self.n_arms)}
        self.epoch += 1
        self.version += 1

    def votes_against(self, arm: int) -> int:
        return len(self.voters[arm])

    def fewest_votes_arm(self) -> int:
        """The arm the set points at while it holds several: fewest votes, then lowest index."""
        return min(self.remaining, key=lambda arm: (len(self.voters[arm]), arm))
