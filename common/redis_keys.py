"""Every Redis key the services use, in one place (names only: common does no I/O).

An experiment's keys share the hash tag {id}, so a multi-key script stays valid on Redis Cluster:
they all live in one hash slot, hence on one node. The agents' activation streams are the
exception (see `activations`): they carry the tag {id~s<k>}, one of ACTIVATION_SHARDS shards, so
that the heaviest traffic (the load generator's XADDs, the agents' reads and acknowledgements)
spreads over the cluster's masters instead of landing on the experiment's one. No script and no
transaction ever mixes a stream with the experiment's keys, or streams of two shards.
"""

from __future__ import annotations

import hashlib
import zlib

PREFIX = "dexp"
# Activation streams of one experiment are spread over this many hash tags (hence at most this
# many hash slots, on at most this many masters). 16: enough to spread an experiment's streams
# over the masters of a usual cluster (3 to 16 of them: with 3 masters, each gets about a third of
# the streams), while a process reading a few hundred streams reads and acknowledges them in at
# most 16 groups per loop (one XREADGROUP and one MULTI/EXEC per group, see agent/streams.py). The
# shard of an agent is fixed by its id alone (crc32, stable across processes and Python versions,
# unlike hash()): changing this number renames every stream.
ACTIVATION_SHARDS = 16
# Sorted set of experiment ids, all scored 0 so that they page in id order (ZRANGE BYLEX); an
# index for GET /v1/experiments, outside every experiment's slot and never read by a script.
EXPERIMENT_INDEX = f"{PREFIX}:experiment-index"


def meta(exp: str) -> str:
    """Hash: config JSON, threshold, n_arms, version, epoch, messages, ignored, created_at, and
    the current epoch's epoch_messages (messages since the epoch began) and epoch_started_at (unix
    ms: creation or the last reset). What the public sees change (coordinator/store/lua/changes.lua):
    revision and revised_at (the document's changes that its counters may not show: the ETag),
    event_id (the last announced change of the public state: the SSE event id) and tied (the tie
    status last announced, 1 or 0). `algorithm` (experiments created since CDE): what the scripts
    check so that a vote never counts in a CDE experiment, nor a report in a voting one. `result`:
    the decided experiment's result, kept by the first coordinator that read the decision
    (coordinator/store/lua/result.lua); `p_history`: the published total votes over this epoch
    (coordinator/store/lua/publish.lua)."""
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


def reporters(exp: str) -> str:
    """Set of the agent ids that sent their CDE report, whatever its arm: one report per agent and
    experiment (coordinator/store/lua/report.lua). Which arm an agent reported is not kept: only the
    counts (report_counts)."""
    return f"{PREFIX}:{{{exp}}}:reporters"


def report_counts(exp: str) -> str:
    """Hash: arm index -> the CDE reports it got (one per agent, so distinct agents); the first arm
    to reach the threshold is accepted and every other arm leaves at once."""
    return f"{PREFIX}:{{{exp}}}:report-counts"


def report_ones(exp: str) -> str:
    """Hash: arm index -> the LDP reports on it whose privatized bit is 1 (report_counts counts
    them all): with those counts, all the coordinator learns (common/ldp.py)."""
    return f"{PREFIX}:{{{exp}}}:report-ones"


def report_seq(exp: str) -> str:
    """Hash: agent id -> the LDP reports it sent that counted (1, 2, ... up to B): a report numbered
    at most this is a duplicate, the next one counts (coordinator/store/lua/ldp_report.lua). Which
    arms and bits an agent reported is not kept: only the counts."""
    return f"{PREFIX}:{{{exp}}}:report-seq"


def eliminations(exp: str) -> str:
    """List of JSON eliminations of the current epoch, in order."""
    return f"{PREFIX}:{{{exp}}}:eliminations"


def agents(exp: str) -> str:
    """Sorted set of enrolled agent ids, scored by enrollment order."""
    return f"{PREFIX}:{{{exp}}}:agents"


def agent_seq(exp: str) -> str:
    return f"{PREFIX}:{{{exp}}}:agent-seq"


def events(exp: str) -> str:
    """Pub/sub channel: the new state version, published when the global set changes (read by
    agent processes that hold Redis credentials)."""
    return f"{PREFIX}:{{{exp}}}:events"


def changes(exp: str) -> str:
    """Pub/sub channel of the coordinators' event streams (coordinator/events.py), published by the
    scripts that change the experiment: 's' when its public state changed (an elimination, a
    reset, a tie announced), 'c' when a change may turn it tied or untied, 'd' when it is deleted.
    Nothing else: anonymous readers may read all it implies."""
    return f"{PREFIX}:{{{exp}}}:changes"


def activation_shard(agent: str) -> int:
    """The shard of an agent's activation stream: crc32 of its id, modulo ACTIVATION_SHARDS."""
    return zlib.crc32(agent.encode()) % ACTIVATION_SHARDS


# What sha256 hashes before an agent's token to derive its stream's secret: a domain of its own,
# so the secret is no other digest of the token (credentials keeps sha256 of the token alone).
STREAM_SECRET_DOMAIN = b"dexp activation stream\0"


def stream_secret(token: str) -> str:
    """The secret in the name of the activation stream of the agent holding `token`: the first 32
    hex digits (128 bits) of sha256(STREAM_SECRET_DOMAIN + token). Only the token's holder (and the
    coordinator, which drew it) can compute it, and it tells nothing of the token; so whoever may
    touch the streams whose names it can build touches only the streams of the agents whose
    tokens it holds (common/redis_acl.py)."""
    return hashlib.sha256(STREAM_SECRET_DOMAIN + token.encode()).hexdigest()[:32]


def activations(exp: str, agent: str, secret: str) -> str:
    """Stream of one agent's activations (written by the load generator, read by the agent), in
    the hash slot of the shard tag {exp~s<k>}, k = activation_shard(agent). `~` never occurs in an
    experiment id (^[A-Za-z0-9_-]{1,64}$), so the tag of one experiment's shard is no other
    experiment's tag, nor the experiment's own {exp}. The name ends with the agent's stream
    secret (stream_secret of its token): a key pattern cannot name the connecting user, so the
    name itself is what keeps one agent host off another's streams."""
    return f"{PREFIX}:{{{exp}~s{activation_shard(agent)}}}:activations:{agent}:{secret}"


def stream_secrets(exp: str) -> str:
    """Hash: agent id -> the secret of its activation stream (stream_secret of its token), written
    by the enrollment script with the agent, deleted with it (its departure, its lease lapsed) and
    with the experiment. The load generator reads it to name the streams it writes; the agent
    host's Redis user may not (it names its own agents' streams from their tokens). An agent
    without an entry (enrolled by an older version) gets no activations."""
    return f"{PREFIX}:{{{exp}}}:streams"


def unsecret_activations(exp: str, agent: str) -> str:
    """The name an agent's stream had before it carried a secret (the shard tag, no secret): only
    deleted, with the agent or the experiment, so that streams left by an older version do not
    outlive them."""
    return f"{PREFIX}:{{{exp}~s{activation_shard(agent)}}}:activations:{agent}"


def legacy_activations(exp: str, agent: str) -> str:
    """The name an agent's stream had before the shard tag (in the experiment's slot): only
    deleted, with the experiment, so that streams left by an older version do not outlive it."""
    return f"{PREFIX}:{{{exp}}}:activations:{agent}"


def hash_tag(key: str) -> str:
    """The part of `key` Redis Cluster hashes to choose its slot (Redis's rule): between the first
    '{' and the first '}' after it, if that is not empty; else the whole key. Keys with the same
    hash tag are in the same slot."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


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


def simulated(exp: str) -> str:
    """Set of the enrolled agent ids that said they are simulated (the agent service's, fed by a
    load generator), not real devices: the document counts them (agents_simulated)."""
    return f"{PREFIX}:{{{exp}}}:simulated"


def leases(exp: str) -> str:
    """Sorted set: agent id -> when its lease lapses (unix ms of Redis's clock), for the agents
    enrolled with a lease (`lease: true`: the agent service's). Renewed by their host (POST
    /v1/agents/leases); an agent whose lease lapsed leaves as DELETE /v1/agents/me would make it
    (coordinator/store/lua/lapse.lua, run by the coordinators' sweep, coordinator/leases.py)."""
    return f"{PREFIX}:{{{exp}}}:leases"


# Set of the experiment ids that have (or lately had) agents with a lease: what the coordinators'
# lease sweeps visit (coordinator/leases.py); outside every experiment's slot, never read by a
# script. An experiment leaves it when a sweep finds no lease left in it.
LEASE_INDEX = f"{PREFIX}:lease-index"


def tickets(exp: str) -> str:
    """Sorted set: SHA-256 hex digest of each unused enrollment ticket -> its expiry (unix ms).
    A ticket is removed by the enrollment it buys, in the same script."""
    return f"{PREFIX}:{{{exp}}}:tickets"


def reset_rate(exp: str) -> str:
    """Hash: agent id -> its reset rate-limit state, and '*' -> the experiment's (GCRA)."""
    return f"{PREFIX}:{{{exp}}}:reset-rate"


def reset_requests(exp: str) -> str:
    """Sorted set: agent id -> unix ms of its reset request in this epoch, kept while fewer than
    f + 1 distinct agents asked within the window (a tolerance f > 0; cleared by each reset)."""
    return f"{PREFIX}:{{{exp}}}:reset-requests"


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


# Set of the experiment ids that have webhooks: what the coordinators' webhook dispatchers watch
# (coordinator/webhooks/dispatcher.py); outside every experiment's slot, never read by a script.
WEBHOOK_INDEX = f"{PREFIX}:webhook-index"
# Pub/sub channel: an experiment id, published when it gets (or loses) a webhook, so that every
# dispatcher watches it at once; a dispatcher reads WEBHOOK_INDEX only when it (re)connects.
WEBHOOK_CHANNEL = f"{PREFIX}:webhooks"


def webhooks(exp: str) -> str:
    """Hash: webhook id -> JSON (url, secret, created_at, and the state it was created in), the
    experiment's webhooks (coordinator/webhooks/records.py). The secret is kept: it signs."""
    return f"{PREFIX}:{{{exp}}}:webhooks"


def webhook_deliveries(exp: str) -> str:
    """Hash: '<webhook id>:<event>' -> JSON delivery (body, status, attempts, next attempt, lease),
    one per webhook and event (a decision, a reset), created once whichever coordinator saw it."""
    return f"{PREFIX}:{{{exp}}}:webhook-deliveries"


ACTIVATION_GROUP = "agents"


# The API keys and the audit log: the coordinator's alone, outside every experiment's slot. Their
# hash tag {~keys} has a `~`, which no experiment id has, so no experiment's key shares it, and the
# two hashes of the keys share one slot (lua/key_create.lua and lua/key_revoke.lua touch both).
API_KEYS = f"{PREFIX}:{{~keys}}:names"
"""Hash: key name -> JSON {digest, role, created_at} (coordinator/store/api_keys.py)."""
API_KEY_DIGESTS = f"{PREFIX}:{{~keys}}:digests"
"""Hash: SHA-256 hex digest of a key (never the key) -> JSON {name, role}: what a request's bearer
credential is looked up by."""
AUDIT = f"{PREFIX}:{{~keys}}:audit"
"""Stream, capped (XADD MAXLEN ~ DEXP_AUDIT_MAX_ENTRIES): one entry per state-changing call made
with a key or the admin token: at, key (its name), role, method, route, experiment, status."""
