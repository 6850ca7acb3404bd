"""The store's Lua scripts (lua/ beside this file) and their inputs by name: one table, SCRIPTS.

Each script names its inputs in its first lines (`local meta_key = KEYS[1]`, `local agent_id =
ARGV[1]`), and its entry here lists the same names in the same order. A call passes every input
by keyword (`scripts.vote(meta_key=..., agent_id=...)`), so a call site cannot misorder them, and
tests/test_lua_inputs.py holds the table and the headers together. Helpers (gcra.lua, changes.lua,
publish.lua, departure.lua) define local functions only; they are prepended to the scripts that use them.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator.redis_client import AnyRedis

LUA = Path(__file__).with_name("lua")


@dataclass(frozen=True)
class ScriptInputs:
    """A script's inputs, in the order of its header: `keys` (KEYS[1], ...), then `rest_keys`, the
    name of a variable-length tail of KEYS (`{unpack(KEYS, n)}`), and `args` (ARGV[1], ...), of
    which the `optional` ones may be left out (None) at the end."""

    file: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    helpers: tuple[str, ...] = ()
    rest_keys: str | None = None
    optional: tuple[str, ...] = ()

    def source(self) -> str:
        """The script after the helper files it uses (their local functions)."""
        return "\n".join((LUA / part).read_text() for part in (*self.helpers, self.file))

    def names(self) -> tuple[str, ...]:
        rest = () if self.rest_keys is None else (self.rest_keys,)
        return (*self.keys, *rest, *self.args)


LIMITED = ("deadline.lua", "gcra.lua", "changes.lua")
PUBLISHED = ("changes.lua", "publish.lua")
TIMED = ("deadline.lua", "gcra.lua", *PUBLISHED)  # an agent's message: deadline, rate, publication
RATE = ("vote_rate", "vote_burst")
PUBLICATION = ("publish_batch", "publish_cadence_ms")
# what an agent's departure touches (lua/departure.lua), its own token or its lease lapsed
DEPARTURE = (
    "meta_key",
    "agents_key",
    "credentials_key",
    "settled_key",
    "reporters_key",
    "simulated_key",
    "leases_key",
)

SCRIPTS: dict[str, ScriptInputs] = {
    "vote": ScriptInputs(
        "vote.lua",
        keys=(
            "meta_key",
            "remaining_key",
            "voters_key",
            "eliminations_key",
            "credentials_key",
            "vote_rate_key",
            "settled_key",
        ),
        args=(
            "agent_id",
            "arm_index",
            "agent_epoch",
            "now_ms",
            "token_digest",
            *RATE,
            "changes_channel",
            "agent_epoch_started_at",
            *PUBLICATION,
            "deadline_ms",
        ),
        helpers=TIMED,
    ),
    "report": ScriptInputs(
        "report.lua",
        keys=(
            "meta_key",
            "remaining_key",
            "reporters_key",
            "report_counts_key",
            "eliminations_key",
            "credentials_key",
            "vote_rate_key",
        ),
        args=(
            "agent_id",
            "arm_index",
            "now_ms",
            "token_digest",
            *RATE,
            "changes_channel",
            *PUBLICATION,
            "deadline_ms",
        ),
        helpers=TIMED,
    ),
    "ldp_report": ScriptInputs(
        "ldp_report.lua",
        keys=(
            "meta_key",
            "remaining_key",
            "report_counts_key",
            "report_ones_key",
            "report_seq_key",
            "eliminations_key",
            "credentials_key",
            "vote_rate_key",
        ),
        args=(
            "agent_id",
            "arm_index",
            "bit",
            "seq",
            "now_ms",
            "token_digest",
            *RATE,
            "changes_channel",
            *PUBLICATION,
            "deadline_ms",
        ),
        helpers=TIMED,
    ),
    "ldp_decide": ScriptInputs(
        "ldp_decide.lua",
        keys=("meta_key", "remaining_key", "eliminations_key"),
        args=("created_at", "publication", "eliminate", "leader", "now_ms", "changes_channel"),
        helpers=("changes.lua",),
    ),
    "settled": ScriptInputs(
        "settled.lua",
        keys=(
            "meta_key",
            "settled_key",
            "remaining_key",
            "credentials_key",
            "vote_rate_key",
            "eliminations_key",
        ),
        args=(
            "agent_id",
            "agent_epoch",
            "token_digest",
            *RATE,
            "changes_channel",
            "now_ms",
            *PUBLICATION,
            "deadline_ms",
        ),
        helpers=TIMED,
    ),
    "reset": ScriptInputs(
        "reset.lua",
        keys=(
            "meta_key",
            "remaining_key",
            "eliminations_key",
            "reset_rate_key",
            "resets_key",
            "settled_key",
            "reset_requests_key",
        ),
        rest_keys="voters_keys",
        args=(
            "caller_epoch",
            "agent_id",
            "agent_reset_rate",
            "agent_reset_burst",
            "experiment_reset_rate",
            "experiment_reset_burst",
            "changes_channel",
            "quorum",
            "quorum_window_ms",
            "deadline_ms",
        ),
        helpers=TIMED,
    ),
    "create": ScriptInputs(
        "create.lua",
        keys=("meta_key", "remaining_key", "eliminations_key"),
        args=("config", "threshold", "n_arms", "created_at", "changes_channel", "algorithm"),
        helpers=PUBLISHED,
    ),
    "published": ScriptInputs(
        "published.lua",
        keys=("meta_key", "remaining_key", "eliminations_key"),
        rest_keys="voters_keys",
        args=("now_ms", *PUBLICATION, "changes_channel"),
        helpers=PUBLISHED,
    ),
    "enroll": ScriptInputs(
        "enroll.lua",
        keys=(
            "meta_key",
            "agent_seq_key",
            "agents_key",
            "credentials_key",
            "enroll_rate_key",
            "enrollers_key",
            "tickets_key",
            "simulated_key",
            "leases_key",
            "stream_secrets_key",
        ),
        args=(
            "agent_id",
            "token_digest",
            "client",
            "max_agents",
            "max_agents_per_client",
            "enroll_rate",
            "enroll_burst",
            "ticket_digest",
            "changes_channel",
            "deadline_ms",
            "simulated",
            "lease_ms",
            "stream_secret",
        ),
        helpers=LIMITED,
    ),
    "leave": ScriptInputs(
        "leave.lua",
        keys=DEPARTURE,
        rest_keys="voters_keys",
        args=("agent_id", "token_digest", "changes_channel", "deadline_ms"),
        helpers=("deadline.lua", "changes.lua", "departure.lua"),
    ),
    "lapse": ScriptInputs(
        "lapse.lua",
        keys=DEPARTURE,
        rest_keys="voters_keys",
        args=("batch", "changes_channel"),
        helpers=("changes.lua", "departure.lua"),
    ),
    "renew": ScriptInputs(
        "renew.lua",
        keys=("leases_key", "credentials_key"),
        args=("lease_ms", "agent_ids", "token_digests"),
    ),
    "announce": ScriptInputs(
        "announce.lua",
        keys=("meta_key",),
        args=("tied", "changes_channel", "created_at"),
        helpers=("changes.lua",),
    ),
    "result": ScriptInputs(
        "result.lua",
        keys=("meta_key",),
        args=("created_at", "decision_key", "result", "replaced"),
        optional=("replaced",),
    ),
    "tag": ScriptInputs(
        "tag.lua",
        keys=("meta_key", "eliminations_key", "load_generator_key"),
        args=(),
    ),
    "revoke": ScriptInputs(
        "revoke.lua",
        keys=("meta_key", "agents_key", "credentials_key"),
        args=("agent_id", "now_ms"),
    ),
    "key_create": ScriptInputs(
        "key_create.lua",
        keys=("names_key", "digests_key"),
        args=("name", "digest", "name_doc", "digest_doc"),
    ),
    "key_revoke": ScriptInputs(
        "key_revoke.lua",
        keys=("names_key", "digests_key"),
        args=("name",),
    ),
}


class Script:
    """One registered script (EVALSHA, loaded again after a SCRIPT FLUSH), called with every input
    by name; an optional one given as None is left out."""

    def __init__(self, redis: AnyRedis, inputs: ScriptInputs) -> None:
        self.inputs = inputs
        self._run = redis.register_script(inputs.source())
        self._arity = len(inputs.names())
        self._optional = len(inputs.optional)

    def __call__(self, **given: Any) -> Awaitable[Any]:
        inputs = self.inputs
        if len(given) != self._arity:
            raise _wrong(inputs, given)
        try:
            keys = [given[name] for name in inputs.keys]
            if inputs.rest_keys is not None:
                keys += given[inputs.rest_keys]
            args = [given[name] for name in inputs.args]
        except KeyError:
            raise _wrong(inputs, given) from None
        for _ in range(self._optional):  # the optional ones are the last
            if args[-1] is None:
                args.pop()
        return self._run(keys=keys, args=args)


def _wrong(inputs: ScriptInputs, given: dict[str, Any]) -> TypeError:
    names = inputs.names()
    unknown = sorted(set(given) - set(names))
    missing = [name for name in names if name not in given]
    return TypeError(f"{inputs.file}: unknown inputs {unknown}, missing inputs {missing}")


class Scripts:
    """Every script of SCRIPTS, registered on one client."""

    def __init__(self, redis: AnyRedis) -> None:
        self.vote = Script(redis, SCRIPTS["vote"])
        self.report = Script(redis, SCRIPTS["report"])
        self.ldp_report = Script(redis, SCRIPTS["ldp_report"])
        self.ldp_decide = Script(redis, SCRIPTS["ldp_decide"])
        self.settled = Script(redis, SCRIPTS["settled"])
        self.reset = Script(redis, SCRIPTS["reset"])
        self.create = Script(redis, SCRIPTS["create"])
        self.published = Script(redis, SCRIPTS["published"])
        self.enroll = Script(redis, SCRIPTS["enroll"])
        self.leave = Script(redis, SCRIPTS["leave"])
        self.lapse = Script(redis, SCRIPTS["lapse"])
        self.renew = Script(redis, SCRIPTS["renew"])
        self.announce = Script(redis, SCRIPTS["announce"])
        self.result = Script(redis, SCRIPTS["result"])
        self.tag = Script(redis, SCRIPTS["tag"])
        self.revoke = Script(redis, SCRIPTS["revoke"])
        self.key_create = Script(redis, SCRIPTS["key_create"])
        self.key_revoke = Script(redis, SCRIPTS["key_revoke"])
