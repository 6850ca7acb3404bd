"""The agents' backlogs, read where the activations are written: each stream's acknowledged entries
are deleted here, by the load generator, and what is left is its agent's backlog.

The agent host only reads and acknowledges (its Redis user may do nothing else:
common/redis_acl.py), so a stream keeps its acknowledged entries until the load generator trims
them. Two round trips, each one pipeline over all the streams asked for (not transactions: a
cluster pipeline keeps a transaction to one slot):

1. XINFO GROUPS (the group's last-delivered-id L), then XPENDING (the oldest entry read but not
   acknowledged, and how many are). Redis 6.2 has both; it has neither XINFO's `lag` nor
   `entries-read` (7.0).
2. XTRIM MINID of the first entry not acknowledged, then XLEN: the entries from it on.

Every entry up to L was delivered, and those of them not pending were acknowledged; so the entries
before the oldest pending one (with none pending, those up to L) may go. The two reads of step 1
are not one transaction: L is read first, and the trim never goes past it (MINID is at most the id
after L), so an entry delivered after L was read is kept, whatever XPENDING saw later.

XLEN after the trim is the backlog exactly when a stream's pending entries are its newest delivered
ones, which is how the agent host reads and acknowledges (a read's entries of one stream together);
after a read whose reply was lost, the entries acknowledged after the lost ones count until the
agent reads its pending entries again (agent/streams.py): the figure is then above the backlog,
never below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clients.redis import SyncRedis
from common import redis_keys as keys


def trim_acknowledged(redis: SyncRedis, streams: Sequence[str]) -> list[int]:
    """Delete each stream's acknowledged entries (those before its first entry not acknowledged)
    and return what each holds then: its agent's backlog. A stream without the activation group
    (or none at all) is left as it is and counted whole."""
    if not streams:
        return []
    pipe = redis.pipeline(transaction=False)
    for stream in streams:
        pipe.xinfo_groups(stream)  # before XPENDING: see the module docstring
        pipe.xpending(stream, keys.ACTIVATION_GROUP)
    replies = pipe.execute(raise_on_error=False)
    pipe = redis.pipeline(transaction=False)
    lengths: list[int] = []  # where each stream's XLEN is among the replies
    for i, stream in enumerate(streams):
        first = first_unacknowledged(replies[2 * i], replies[2 * i + 1])
        if first is not None:
            pipe.xtrim(stream, minid=first, approximate=False)
        lengths.append(len(pipe))
        pipe.xlen(stream)
    trimmed = pipe.execute()
    return [int(trimmed[at]) for at in lengths]


def first_unacknowledged(groups: Any, pending: Any) -> str | None:
    """The id of a stream's first entry not acknowledged (every older one was), from its XINFO
    GROUPS and XPENDING replies; None: no activation group (or no stream), nothing to trim."""
    if isinstance(groups, Exception) or isinstance(pending, Exception):
        return None
    found = [g for g in groups if _text(g["name"]) == keys.ACTIVATION_GROUP]
    if not found:
        return None
    ms, seq = entry_order(found[0]["last-delivered-id"])
    after_last = f"{ms}-{seq + 1}"
    if not pending["pending"]:
        return after_last
    oldest = entry_order(pending["min"])
    return after_last if (ms, seq + 1) < oldest else f"{oldest[0]}-{oldest[1]}"


def entry_order(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry id (b"<ms>-<seq>") as numbers, in the stream's order."""
    ms, _, seq = _text(entry_id).partition("-")
    return int(ms), int(seq or 0)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
