"""The Redis users of the services and what each may do: Redis ACL rules, as data (no I/O).

One Redis holds every service's data, and each service logs in as its own user, allowed exactly
the commands it sends, on the keys (common/redis_keys.py) and pub/sub channels it uses:

- coordinator: every dexp key (`dexp:*`) and channel, with the commands of coordinator/store/
  and its Lua scripts, and none that administers the server (FLUSHALL, CONFIG, KEYS, ACL, ...);
  it is the only user that runs Lua, and it creates each enrolled agent's activation stream and
  consumer group;
- load-generator: writes the agents' activation streams and deletes what the agents acknowledged
  (load_generator/streams.py), reads the experiment's agent list and their stream secrets (which
  name their streams), holds the experiment's lease (load_generator/lease.py: optimistic
  transactions, no Lua);
- agent: the agent host reads and acknowledges its own agents' activation streams (the simulated
  environment), nothing more: it deletes no entry (XDEL, XTRIM), creates no key, runs no Lua. It
  follows the global set as a device does, over HTTP (the coordinator's event stream,
  agent/events.py), so it has no pub/sub channel, and it cannot read, let alone write, any key of
  the coordinator's (votes, voters, credentials, ...).

Every deployment takes its users from here, so that none drifts: `dexp demo` (dexp/demo.py,
dexp/redis_cluster.py) starts redis-server with `server_args`; docker-compose.yml,
docker-compose.production.yml, deploy/swarm/docker-stack.yml and the Bitnami chart's values
(deploy/kubernetes/redis-values.yaml) hold the same rules, and tests/test_deploy_*.py check that
they are exactly `server_args` and `bitnami_users`; tests/e2e/test_redis_acl.py runs the services
under them and shows what each user is refused.

The rules work on Redis 6.2 (the redis-server of `dexp demo` and the tests) as on 7 and later:
commands and key patterns only, no read-only key patterns (`%R~`) and no selectors, which are Redis
7's. So a user may run each of its commands on each of its keys: the load generator, which must read
the agent list (ZRANGE) and the stream secrets (HMGET), could also delete or overwrite those two
keys with the SET and DEL its lease needs. And a key pattern cannot name the connecting user, so the agent's pattern matches every
agent's stream: what keeps an agent host to its own agents' streams is their names. Each ends with
128 bits derived from its agent's token (redis_keys.stream_secret), which only the token's holder
and the coordinator can compute, and the agent user may neither list keys (no SCAN, no KEYS) nor
read the hash of the secrets (redis_keys.stream_secrets: the load generator's). So a host's Redis
password and its agents' tokens buy the streams of that host's agents and nothing more
(docs/RELIABILITY.md, "Redis users"). Streams still under an older version's name (no secret)
match the pattern too, and their names can be guessed; nothing writes them any more (the load
generator names the streams from the secrets) and they go with their agent or experiment. Lua: whoever may SCRIPT LOAD runs code of its choosing, for as
long as it likes; Redis 7 cannot allow given SHAs only, and the coordinator must load its scripts
again after a restart of Redis (which forgets them), so it keeps SCRIPT LOAD and is the only one
that has it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from common.redis_keys import PREFIX

COORDINATOR = "coordinator"
LOAD_GENERATOR = "load-generator"
AGENT = "agent"
# Not a service: the replicas of a Redis Cluster log in to their master with it (masteruser) to
# replicate, as Redis's documentation prescribes (PSYNC, REPLCONF, PING and nothing else).
REPLICA = "replica"
# Not a service either: the operator's, and `dexp demo`'s own administration (building a cluster,
# the tests' inspection). No service is given its password.
ADMIN = "admin"

# An activation stream: dexp:{<experiment>~s<shard>}:activations:<agent>:<secret>
# (redis_keys.activations). No key of the coordinator's has a `~` (experiment ids are
# [A-Za-z0-9_-]), so none matches.
ACTIVATIONS = f"{PREFIX}:{{*~s*}}:activations:*"
# The hash of the agents' stream secrets (redis_keys.stream_secrets): the load generator's, to name
# the streams it writes; never the agent host's, which could then name every agent's stream.
STREAM_SECRETS = f"{PREFIX}:{{*}}:streams"
# What redis-py's cluster client sends on a Redis Cluster besides the commands it is asked for:
# CLUSTER SLOTS (the topology), COMMAND (the command table, to find each command's keys), ASKING
# (a slot being migrated). Nothing secret: given to every service, so one set of rules serves a
# single Redis and a cluster.
CLUSTER_CLIENT = ("cluster|slots", "command", "asking")
# MULTI/EXEC: a transaction (redis-py's pipeline(transaction=True)).
TRANSACTION = ("multi", "exec")
# An optimistic transaction (load_generator/lease.py): WATCH, and the UNWATCH redis-py sends when
# it gives one up.
WATCH = ("watch", "unwatch")
# redis-py runs a registered Lua script with EVALSHA, and loads it (SCRIPT LOAD) when Redis does
# not have it yet. The commands a script calls are checked against the caller's rules too, on the
# keys they touch. (No script runs in a pipeline, which would need SCRIPT EXISTS.) Only the
# coordinator has them: whoever may SCRIPT LOAD may run any code, for as long as it likes (Redis
# serves nobody else meanwhile), and Redis 7 cannot allow given SHAs only; nor can the coordinator
# do without SCRIPT LOAD, since Redis forgets its scripts when it restarts (see module docstring).
SCRIPTS = ("evalsha", "script|load")


@dataclass(frozen=True)
class RedisUser:
    """One Redis user: the key patterns (~), channel patterns (&) and commands (+) it is allowed,
    nothing else; `password_variable` holds its password in the compose and Swarm files."""

    name: str
    keys: tuple[str, ...]
    channels: tuple[str, ...]
    commands: tuple[str, ...]
    password_variable: str = ""
    development_password: str = ""  # compose's and Swarm's default, refused in production

    @property
    def key_rules(self) -> list[str]:
        return [f"~{pattern}" for pattern in self.keys]

    @property
    def channel_rules(self) -> list[str]:
        return [f"&{pattern}" for pattern in self.channels]

    @property
    def command_rules(self) -> list[str]:
        return ["-@all", *(f"+{command}" for command in self.commands)]

    def rules(self) -> list[str]:
        """The ACL rules after the user's name and password, starting from nothing."""
        keys, channels = ["resetkeys", *self.key_rules], ["resetchannels", *self.channel_rules]
        return [*keys, *channels, *self.command_rules]


USERS: dict[str, RedisUser] = {
    COORDINATOR: RedisUser(
        COORDINATOR,
        keys=(f"{PREFIX}:*",),
        # PUBLISH of each change of a global set; SUBSCRIBE, for the coordinator that follows its
        # experiments' changes to push them to its clients (coordinator/events.py); Redis's
        # invalidations of the keys its revision cache reads (coordinator/caching.py).
        channels=(f"{PREFIX}:*", "__redis__:invalidate"),
        commands=(
            "ping",
            *TRANSACTION,
            *SCRIPTS,
            *CLUSTER_CLIENT,
            "publish",
            "subscribe",
            "unsubscribe",
            # the revision cache's two connections (CLIENT TRACKING ON REDIRECT <id>), and the
            # names of the cache's and the event streams' connections in CLIENT LIST
            "client|id",
            "client|tracking",
            "client|setname",
            # coordinator/store/ and coordinator/store/lua/*.lua (tests/e2e/test_redis_acl.py reads
            # the scripts and checks that each command they call is here)
            "del",
            "exists",
            # each enrolled agent's activation stream and group (coordinator/store/enrollment.py)
            "xgroup|create",
            "get",
            "hdel",  # publish.lua clears settled_at; an API key revoked (lua/key_revoke.lua)
            "hexists",
            "hget",
            "hgetall",
            "hincrby",
            "hkeys",  # the webhooks' scripts (coordinator/webhooks/records.py)
            "hlen",  # the same
            "hmget",
            "hset",
            "hsetnx",  # when an agent first settled (lua/publish.lua)
            "incr",
            "llen",
            "lrange",
            "rpush",
            "sadd",
            "scard",
            "sinterstore",
            "sismember",
            "smembers",
            "smismember",
            "srem",
            "time",
            "zadd",
            "zcard",
            "zrange",
            "zrangebylex",
            "zrangebyscore",
            "zrem",
            "zremrangebyscore",
            "zscore",
            # the audit log (coordinator/store/api_keys.py): written capped, read a page back
            "xadd",
            "xrevrange",
        ),
        password_variable="DEXP_REDIS_COORDINATOR_PASSWORD",
        development_password="dexp-dev-redis-coordinator",
    ),
    LOAD_GENERATOR: RedisUser(
        LOAD_GENERATOR,
        keys=(
            ACTIVATIONS,
            f"{PREFIX}:{{*}}:agents",
            f"{PREFIX}:{{*}}:load-generator",
            STREAM_SECRETS,
        ),
        channels=(),
        commands=(
            "ping",
            # the lease's client asks whether Redis is a cluster node (INFO cluster) when the
            # load generator does not say (load_generator/lease.py: cluster_enabled)
            "info",
            *CLUSTER_CLIENT,
            "xadd",  # activations
            # the backlog (load_generator/streams.py): what the agents acknowledged is deleted
            # (XINFO GROUPS, XPENDING, XTRIM MINID), then what is left counted (XLEN)
            "xinfo|groups",
            "xpending",
            "xtrim",
            "xlen",
            "xinfo|consumers",  # a stall's report: who reads each stream
            "zrange",  # the enrolled agents
            "hmget",  # their stream secrets, which name their streams (redis_keys.stream_secrets)
            # the lease: optimistic transactions, no Lua (a script of its choosing could block
            # Redis for as long as it runs, and only an administrator may SCRIPT KILL it)
            *TRANSACTION,
            *WATCH,
            "get",
            "set",
            "del",
            "pttl",
        ),
        password_variable="DEXP_REDIS_GENERATOR_PASSWORD",
        development_password="dexp-dev-redis-generator",
    ),
    AGENT: RedisUser(
        AGENT,
        keys=(ACTIVATIONS,),
        channels=(),  # the global set comes from the coordinator's event stream, over HTTP
        commands=(
            "ping",
            *TRANSACTION,
            *CLUSTER_CLIENT,
            # No XGROUP CREATE: the coordinator creates each agent's stream and group when it
            # enrolls the agent, so the agent host creates no key (MKSTREAM, under any name its
            # pattern matches, filled Redis with 100,000 keys in 3 s).
            # Read and acknowledge, nothing more: the load generator deletes what was acknowledged
            # (no XDEL, no XTRIM: with them an agent host could empty any agent's stream).
            "xreadgroup",
            "xack",
        ),
        password_variable="DEXP_REDIS_AGENT_PASSWORD",
        development_password="dexp-dev-redis-agent",
    ),
}
SERVICES = (COORDINATOR, LOAD_GENERATOR, AGENT)
REPLICA_USER = RedisUser(REPLICA, keys=(), channels=(), commands=("psync", "replconf", "ping"))
ADMIN_USER = RedisUser(ADMIN, keys=("*",), channels=("*",), commands=("@all",))
# Nobody logs in without a user: the default user is off and has no password, so no connection
# can be it (a new one is refused with NOAUTH until it names a user). It keeps every permission
# all the same: Redis 7.0 replays the append-only file's transactions (the scripts' writes) as
# the default user at start, and with a default user that may do nothing it drops them
# ("NOPERM ... AOF-loading-client"): measured, an identified experiment came back as one field
# after a restart (tests/e2e/test_compose.py restarts the stack and reads it back).
DEFAULT_OFF = ["default", "off", "resetpass", "~*", "&*", "+@all"]


def user_args(user: RedisUser, password: str) -> list[str]:
    """redis-server's command-line arguments that define `user` (one `--user` directive)."""
    return ["--user", user.name, "on", f">{password}", *user.rules()]


def server_args(passwords: Mapping[str, str], extra: tuple[RedisUser, ...] = ()) -> list[str]:
    """redis-server's arguments for the default user off and each service's user (every one of
    SERVICES, with its password in `passwords`), then the `extra` users (ADMIN_USER,
    REPLICA_USER) with theirs."""
    args = ["--user", *DEFAULT_OFF]
    for user in [USERS[name] for name in SERVICES] + list(extra):
        args += user_args(user, passwords[user.name])
    return args


def acl_file(passwords: Mapping[str, str]) -> str:
    """The same users as an ACL file (redis-server --aclfile), each password as its SHA-256
    (`#<hex>`), so that the file holds no password: deploy/swarm/production.yml gives it to Redis
    as a Docker secret (scripts/swarm_secrets.py writes it)."""
    lines = [" ".join(["user", *DEFAULT_OFF])]
    for user in (USERS[name] for name in SERVICES):
        digest = hashlib.sha256(passwords[user.name].encode()).hexdigest()
        lines.append(" ".join(["user", user.name, "on", f"#{digest}", *user.rules()]))
    return "\n".join(lines) + "\n"


def bitnami_users() -> list[dict[str, str]]:
    """The services' users as the Bitnami redis chart's `auth.acl.users` entries (their passwords
    come from the Secret named by `auth.acl.userSecret`, one key per user name)."""
    return [
        {
            "username": user.name,
            "enabled": "on",
            "keys": " ".join(user.key_rules),
            "channels": " ".join(user.channel_rules) or "resetchannels",
            "commands": " ".join(user.command_rules),
        }
        for user in (USERS[name] for name in SERVICES)
    ]


def url(user: str, password: str, host: str, port: int, db: int = 0) -> str:
    """redis://USER:PASSWORD@HOST:PORT/DB, each part quoted as a URL needs."""
    return f"redis://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{db}"
