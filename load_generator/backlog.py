"""The backlog of a run: activations in the agents' streams, measured without reading every stream
at each poll.

A stream read is first rid of its acknowledged entries, and what it holds then is its agent's
backlog (`measure`: load_generator/streams.py; the agents only read and acknowledge). Reading every
stream (a few commands per agent, pipelined) costs O(agents) per poll, five times a second and after
every 10 ms wait under back-pressure: at 4,096 agents and more, that made the load generator the
bottleneck of the run (docs/BENCHMARKS.md, "Scale"). The gauge reads at most `sample` streams per
poll:

- It keeps an upper bound of every stream's backlog, and of what it holds: its length when last
  read, plus what this run delivered to it since (only this run writes to the streams, which its
  lease ensures, and only reading it deletes entries). A stream whose bound is 0 is empty and is not
  read; so `bound` is also the most Redis holds of the run's streams.
- When at most `sample` streams may hold entries, it reads them all: the figures are exact. They
  always are for a run of at most `sample` agents, and for any run whose backlog sits on few
  streams.
- Otherwise it reads `sample` streams on average, each drawn with probability proportional to its
  bound (capped at 1: the largest are always read), and estimates the others' lengths as their
  bounds times the fraction of its bound that a drawn stream still holds, weighted by the inverse
  of its probability (a ratio estimator, unbiased in the limit; with probabilities proportional to
  the bounds, its error falls as 1/sqrt(sample) of the unread streams' bounds).
- Consumption is seen exactly: a stream read shorter than its bound was consumed from (what a stall
  is judged by), and the gauge never guesses it.

`poll(full=True)` reads every stream that may hold entries, and is exact. The load generator uses it
at the start, once a second while it sees no consumption (before it calls a run stalled, and before
it says the agents are quiet), at the budget's end, after a Redis retry (a batch sent again may
have delivered twice), and at the end of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SAMPLE = 512  # streams read per poll, at most on average; runs of up to this many agents: exact


@dataclass(frozen=True)
class Reading:
    """One poll. `backlog`: entries in the streams, whoever delivered them; `own`: this run's
    entries not processed yet (per stream at most what the run delivered there: an earlier run's
    entries are read first); `consumed`: a stream read was shorter than its bound, so the agents
    consumed since the last poll (exact, never estimated); `exact`: every stream that may hold
    entries was read; `read`: streams read."""

    backlog: int
    own: int
    consumed: bool
    exact: bool
    read: int


class BacklogGauge:
    """The backlog of `n_streams` streams, read through `measure(indices) -> lengths`."""

    def __init__(
        self,
        n_streams: int,
        measure: Callable[[np.ndarray], np.ndarray],
        sample: int = SAMPLE,
        rng: np.random.Generator | None = None,
    ) -> None:
        if sample < 1:
            raise ValueError(f"sample={sample}: at least 1")
        self.measure = measure
        self.sample = sample
        self.rng = rng if rng is not None else np.random.default_rng()
        self.sent = np.zeros(n_streams, dtype=np.int64)  # delivered by this run, per stream
        self.known = np.zeros(n_streams, dtype=np.int64)  # length when last read
        self.added = np.zeros(n_streams, dtype=np.int64)  # delivered since last read
        self.polls = 0
        self.full_polls = 0
        self.streams_read = 0
        self.resync = True  # the next poll reads every stream (the first one: every stream)

    @property
    def bound(self) -> int:
        """An upper bound of the backlog: the sum of every stream's bound."""
        return int((self.known + self.added).sum())

    def delivered(self, counts: np.ndarray) -> None:
        """This run delivered `counts[i]` more entries to stream i."""
        counts = np.asarray(counts, dtype=np.int64)
        self.sent += counts
        self.added += counts

    def poll(self, full: bool = False) -> Reading:
        """Read the streams that may hold entries (all of them if `full` or few enough, else a
        sample) and return the backlog: exact, or estimated from the sample."""
        self.polls += 1
        if self.resync:
            full, self.resync = True, False
            candidates = np.arange(len(self.sent))  # every stream: one may hold old entries
        else:
            bounds = self.known + self.added
            candidates = np.flatnonzero(bounds)
        if full or len(candidates) <= self.sample:
            self.full_polls += 1
            lengths = self._read(candidates)
            before = (self.known + self.added)[candidates]
            self.known[candidates], self.added[candidates] = lengths, 0
            backlog = int(self.known.sum())
            own = int(np.minimum(self.sent, self.known).sum())
            consumed = bool((lengths < before).any())
            return Reading(backlog, own, consumed, True, len(candidates))
        bounds = (self.known + self.added)[candidates]
        total = float(bounds.sum())
        p = np.minimum(1.0, self.sample * bounds / total)
        drawn = self.rng.random(len(candidates)) < p
        chosen, p_chosen, bound_chosen = candidates[drawn], p[drawn], bounds[drawn]
        lengths = self._read(chosen)
        consumed = bool((lengths < bound_chosen).any())
        self.known[chosen], self.added[chosen] = lengths, 0
        # The unread streams hold this fraction of their bounds: estimated from the drawn streams
        # that were not certain to be drawn, each weighted by 1 / p (none: 1, the bound itself).
        uncertain = p_chosen < 1.0
        weight = 1.0 / p_chosen[uncertain]
        held = float((lengths[uncertain] * weight).sum())
        could = float((bound_chosen[uncertain] * weight).sum())
        ratio = held / could if could > 0 else 1.0
        unread = candidates[~drawn]
        unread_bounds = (self.known + self.added)[unread].astype(float)
        estimate = float(lengths.sum()) + ratio * float(unread_bounds.sum())
        own_estimate = float(np.minimum(self.sent[chosen], lengths).sum()) + float(
            np.minimum(self.sent[unread], ratio * unread_bounds).sum()
        )
        return Reading(round(estimate), round(own_estimate), consumed, False, len(chosen))

    def _read(self, indices: np.ndarray) -> np.ndarray:
        self.streams_read += len(indices)
        if len(indices) == 0:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(self.measure(indices), dtype=np.int64)
