"""Every Redis key the services use, in one place (names only: common does no I/O).

An experiment's keys share the hash tag {id}, so a multi-key script stays valid on Redis Cluster.
"""

from __future__ import annotations

PREFIX = "dexp"
# Sorted set of experiment ids, all scored 0 so that they page in id order (ZRANGE BYLEX); an
# index for GET /v1/experiments, outside every experiment's slot and never read by a script.
EXPERIMENT_INDEX = f"{PREFIX}:experiment-index"


def meta(exp: str) -> str:
    """Hash: config JSON, threshold, n_arms, version, epoch, messages, ignored, created_at, and
    the current epoch's epoch_messages (messages since the epoch began) and epoch_started_at (unix
    ms: creation or the last reset)."""
    return f"{PREFIX}:{{{exp}}}:meta"


def remaining(exp: str) -> str:
    """Set of the arm indices still in the global set."""
    return f"{PREFIX}:{{{exp}}}:remaining"


def voters(exp: str, arm: int) -> str:
    """Set of the agent ids that voted against `arm` in the current epoch."""
    return f"{PREFIX}:{{{exp}}}:voters:{arm}"


def settled(exp: str) -> str:
    """Set of the agent ids that said they settled in the current epoch (CE's "settled" message:
    the agent's local set holds one arm). An elimination keeps only the settled agents that voted
    against the arm that left; a reset clears it (common/votes.py)."""
    return f"{PREFIX}:{{{exp}}}:settled"


def eliminations(exp: str) -> str:
    """List of JSON eliminations of the current epoch, in order."""
    return f"{PREFIX}:{{{exp}}}:eliminations"


def agents(exp: str) -> str:
    """Sorted set of enrolled agent ids, scored by enrollment order."""
    return f"{PREFIX}:{{{exp}}}:agents"


def agent_seq(exp: str) -> str:
    return f"{PREFIX}:{{{exp}}}:agent-seq"


def events(exp: str) -> str:
    """Pub/sub channel: the new state version, published when the global set changes."""
    return f"{PREFIX}:{{{exp}}}:events"


def activations(exp: str, agent: str) -> str:
    """Stream of one agent's activations (written by the load generator, read by the agent)."""
    return f"{PREFIX}:{{{exp}}}:activations:{agent}"


def credentials(exp: str) -> str:
    """Hash: agent id -> SHA-256 hex digest of the secret part of the agent's token (never the
    token). In the experiment's hash slot, so that the vote script checks the token itself."""
    return f"{PREFIX}:{{{exp}}}:credentials"


def vote_rate(exp: str) -> str:
    """Hash: agent id -> the agent's vote rate-limit state (GCRA: the theoretical arrival time of
    its next vote, in ms of Redis's clock). Written only when a vote is let through."""
    return f"{PREFIX}:{{{exp}}}:vote-rate"


def enroll_rate(exp: str) -> str:
    """Hash: client address -> its enrollment rate-limit state in this experiment (GCRA, as
    vote_rate)."""
    return f"{PREFIX}:{{{exp}}}:enroll-rate"


def enrollers(exp: str) -> str:
    """Hash: client address -> how many agents it enrolled in this experiment."""
    return f"{PREFIX}:{{{exp}}}:enrollers"


def tickets(exp: str) -> str:
    """Sorted set: SHA-256 hex digest of each unused enrollment ticket -> its expiry (unix ms).
    A ticket is removed by the enrollment it buys, in the same script."""
    return f"{PREFIX}:{{{exp}}}:tickets"


def reset_rate(exp: str) -> str:
    """Hash: agent id -> its reset rate-limit state, and '*' -> the experiment's (GCRA)."""
    return f"{PREFIX}:{{{exp}}}:reset-rate"


def resets(exp: str) -> str:
    """Hash: agent id -> resets of the experiment it made; '<agent id>:last' -> time of the last
    one (unix ms). What the admin reads to see who resets."""
    return f"{PREFIX}:{{{exp}}}:resets"


def load_generator(exp: str) -> str:
    """String: the lease of the load generator feeding the experiment, a JSON object (run, host,
    pid, started_at, updated_at, epoch, activations, delivered, backlog, activations_per_second),
    with a TTL of a few seconds that its holder renews with fresh figures (load_generator/lease.py).
    One load generator per experiment; the coordinator shows the figures (without the pid)."""
    return f"{PREFIX}:{{{exp}}}:load-generator"


ACTIVATION_GROUP = "agents"
