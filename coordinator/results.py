"""An experiment's result: what it decided, when, and at what cost, kept in Redis once decided.

The load generator's figures live in its lease, which goes when the run ends: a result made of
live figures would vanish with it. So the first coordinator that reads a decision (identified, or
tied) composes the result from what it sees then (`result_of`) and keeps it in the meta hash
(lua/result.lua); every later reader gets that one back. A result names its decision (`decision`):
a reset, or an enrollment that reopens a tie, makes the old one stale, and the next decision
replaces it. A result keeps the certificate it was decided with (the N it counts: `agents`): the
documents show that one once decided, however many agents come or go afterwards (agents enrolled
after an identification cannot change it, and the bound it was made with is the one that held).
Pure functions: the store does the I/O.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from common.certificate import Certificate, certify

if TYPE_CHECKING:
    from coordinator.store.state import ExperimentState

# The points of the votes history a publication keeps (lua/publish.lua, HISTORY_POINTS).
HISTORY_POINTS = 120


def decision(status: str, epoch: int, version: int, agents: int) -> str:
    """What names a decision: its epoch, the global set's version and the status; a tie is a
    verdict on the agents enrolled, so theirs too."""
    key = f"{epoch}:{version}:{status}"
    return f"{key}:{agents}" if status == "tied" else key


def decision_of(state: ExperimentState) -> str:
    return decision(state.status or "", state.epoch, state.version, state.agents)


def kept(raw: object, key: str) -> dict[str, Any] | None:
    """The result kept in the meta hash, if it is of the decision `key` (else None: stale)."""
    if not isinstance(raw, str | bytes):
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    return document if isinstance(document, dict) and document.get("key") == key else None


def certificate_of(state: ExperimentState, agents: int | None = None) -> Certificate:
    """What the experiment certifies with `agents` agents (default: the N of its decision once
    decided, else those counted now: state.agents), when at most f (its tolerance) of them lie.
    CDE's threshold is the one it was created with (chosen from the agents expected), whatever
    the agents enrolled."""
    config = state.design.config
    counted = decided_agents(state) if agents is None else agents
    fixed = state.threshold if config.reports else None
    return certify(config, len(state.arms), counted, threshold=fixed)


def decided_agents(state: ExperimentState) -> int:
    """The N a decided experiment's certificate counts (its kept result's), else state.agents."""
    result = state.result
    if state.status in ("identified", "tied") and result and isinstance(result.get("agents"), int):
        return int(result["agents"])
    return state.agents


def redis_ms(clock: str | None) -> int | None:
    """Redis's TIME as the scripts write it ('<seconds>.<microseconds>', the microseconds not
    zero-padded) in unix ms; None if absent."""
    if not clock:
        return None
    seconds, _, micros = clock.partition(".")
    return int(seconds) * 1000 + int(micros or 0) // 1000


def result_of(state: ExperimentState, key: str, now: int) -> dict[str, Any]:
    """The result of a decided state. Decided at: the last elimination for an identified
    experiment (the one that left one arm); for a tie, the publication that showed it (no message
    marks a tie: it is the verdict on the voter sets a publication made public), else `now`. The
    load generator's figures are those of its lease at the first read of the decision (it renews
    them about every 0.2 s), if it fed this epoch."""
    status = state.status
    arms, remaining = state.arms, state.remaining_arms
    eliminations = state.eliminations
    last = eliminations[-1].time if eliminations else None
    if status == "identified":
        decided_at = last if last is not None else now
    else:
        published = state.tags.published_ms
        decided_at = max(t for t in (published, last, 0) if t is not None) or now
    refs = [{"index": a, "name": arms[a]} for a in remaining]
    # the certificate of the decision (LDP's does not depend on N: its documents compute it)
    certificate = None if state.design.crowd else certificate_of(state, state.agents)
    return {
        "key": key,
        "status": status,
        "best_arm": refs[0] if status == "identified" and refs else None,
        "candidates": refs if status == "tied" else [],
        "decided_at": decided_at,
        "duration_ms": max(0, decided_at - state.created_at),
        "epoch": state.epoch,
        "version": state.version,
        "agents": state.agents,
        "messages": state.counters.messages,
        "votes": state.votes,
        "reports": state.reports,
        "load_generator": run_figures(state),
        "certified_failure": None if certificate is None else certificate.failure,
        "certificate": None if certificate is None else certificate.statement(),
    }


def run_figures(state: ExperimentState) -> dict[str, Any] | None:
    """The figures of the load generator's lease, if its run feeds this epoch."""
    lg = state.load_generator
    if lg is None or lg.get("activations") is None or lg.get("epoch") not in (None, state.epoch):
        return None
    return {
        name: lg[name] for name in ("run", "activations", "activations_per_second", "updated_at")
    }


def refreshed(result: dict[str, Any], state: ExperimentState) -> dict[str, Any] | None:
    """The result with newer figures of the run that fed the decision, while it still renews its
    lease (its last renewals carry the activations the agents processed up to the decision, and
    the rate then); None when there is nothing newer, or the lease is another run's (a run started
    after the decision fed nothing of it)."""
    kept, live = result.get("load_generator"), run_figures(state)
    if kept is None or live is None or live["run"] != kept.get("run"):
        return None
    if (live["updated_at"] or 0) <= (kept.get("updated_at") or 0) or live == kept:
        return None
    return {**result, "load_generator": live}


def history_of(raw: str | None, epoch: int) -> list[list[int]]:
    """This epoch's votes history (lua/publish.lua's p_history): [[unix ms, total votes], ...];
    empty for another epoch's, or a field that does not parse (none is written so)."""
    try:
        document = json.loads(raw or "null")
        points = document["p"] if document["e"] == epoch else []
        return [[int(t), int(v)] for t, v in points]
    except (ValueError, TypeError, KeyError):
        return []
