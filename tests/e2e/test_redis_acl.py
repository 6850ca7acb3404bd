"""The Redis users of common/redis_acl.py, on real redis-servers (Redis 6.2, as `dexp demo` runs
them): the services do their whole work under their own users, and each user is refused the rest.

One run of `dexp demo`'s stack (tickets, the production way) serves the module: the coordinator and
two agent processes log in as `coordinator` and `agent`, the load generator as `load-generator`,
and the run ends identified. Redis's ACL log then shows that none of their commands was refused.
Then each user is tried, on that Redis, at what it must not do: the agent host on every key of the
coordinator's (write and read), the load generator likewise but for the two keys it uses, the
coordinator outside dexp's keys and at administering the server, and anyone without a user. A
Redis Cluster with replicas shows the same users on every node, the replicas replicating as
`replica`.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import re
import secrets
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from redis.cluster import RedisCluster

from common import redis_acl as acl
from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.redis_memory import DEMO_MAXMEMORY
from dexp.demo import EXPERIMENT, LocalStack, local_stack
from dexp.redis_cluster import start_cluster
from load_generator.generator import LoadGenerator, Summary
from load_generator.settings import LoadSettings
from tests.services.helpers import (
    activation_streams,
    admin_headers,
    bearer,
    coordinator,
    coordinator_settings,
    enroll_agents,
)
from tests.test_deploy_redis_memory import size_bytes

ROOT = Path(__file__).resolve().parents[2]
CONFIG = AlgorithmConfig(delta=0.05, eta=0.5)  # 3 arms: M = 5
ARMS = ["arm-0", "arm-1", "arm-2"]
# The functions of common/redis_keys.py that name an activation stream the agents' key pattern
# matches (acl.ACTIVATIONS): not the coordinator's keys.
STREAM_NAMES = ("activations", "unsecret_activations")
MEANS = "0.9,0.5,0.1"  # gaps above epsilon: identified, never tied
# redis-py sends CLIENT SETINFO on each new connection and ignores a refusal (Redis 6.2 and 7.0
# do not even know it): the one command a service sends that its user does not allow.
IGNORED_REFUSAL = ("command", "client")


def coordinator_keys(exp: str, arms: int) -> list[str]:
    """Every key of the coordinator's for one experiment: each function of common/redis_keys.py
    that names a key of `exp` (a new one is covered as soon as it is written), the agents'
    activation streams excepted (under the names older versions gave them with the shard tag
    too: the agents' pattern matches those), and the index of experiments."""
    found = [keys.EXPERIMENT_INDEX]
    for name, function in vars(keys).items():
        if not inspect.isfunction(function) or function.__module__ != keys.__name__:
            continue
        parameters = list(inspect.signature(function).parameters)
        if not parameters or parameters[0] != "exp" or name in STREAM_NAMES:
            continue
        if parameters == ["exp"]:
            found.append(function(exp))
        elif parameters == ["exp", "arm"]:
            found += [function(exp, arm) for arm in range(arms)]
        elif parameters == ["exp", "agent"]:
            found.append(function(exp, "a1"))
        else:
            raise AssertionError(f"redis_keys.{name}{parameters}: teach this test its arguments")
    return found


def test_coordinator_keys_are_all_found() -> None:
    found = coordinator_keys("x", 2)
    for key in ("meta", "voters:0", "voters:1", "credentials", "tickets", "events", "agents"):
        assert f"dexp:{{x}}:{key}" in found
    assert keys.EXPERIMENT_INDEX in found and keys.legacy_activations("x", "a1") in found
    assert keys.stream_secrets("x") in found  # the agents' stream secrets: the agent host's not
    assert keys.activations("x", "a1", keys.stream_secret("t")) not in found
    assert keys.unsecret_activations("x", "a1") not in found


def script_commands(text: str) -> set[str]:
    return {c.lower() for c in re.findall(r"redis\.p?call\(\s*['\"](\w+)['\"]", text)}


def test_each_lua_script_calls_only_what_its_user_may() -> None:
    """A script's commands are checked against its caller's user: each command the coordinator's
    scripts call is one its user allows. The coordinator is the only user that runs scripts."""
    lua = {
        p.name: script_commands(p.read_text())
        for p in (ROOT / "coordinator/store/lua").glob("*.lua")
    }
    assert len(lua) >= 5 and all(lua.values())
    for name, commands in lua.items():
        assert commands <= set(acl.USERS[acl.COORDINATOR].commands), name
    lua_users = [u.name for u in acl.USERS.values() if {"evalsha", "script|load"} & {*u.commands}]
    assert lua_users == [acl.COORDINATOR]


# ------------------------------------------------------------------------------ the run


def refusals(client: redis.Redis) -> list[dict[str, Any]]:
    """Redis's ACL log, but for IGNORED_REFUSAL."""
    log = [dict(e) for e in client.acl_log()]
    return [e for e in log if (e["reason"], e["object"]) != IGNORED_REFUSAL]


def operate(stack: LocalStack) -> None:
    """What the run leaves to an operator and a device, on the coordinator: every read route, an
    experiment created, an agent of it enrolled with a ticket that votes, says it settled (CE) and
    resets (DSER4), then the admin's reset and deletion."""
    admin = {"Authorization": f"Bearer {stack.admin_token}"}
    with httpx.Client(base_url=stack.coordinator_url, timeout=30) as http:

        def call(method: str, path: str, token: dict[str, str] | None = None, **body: Any) -> Any:
            reply = http.request(method, path, headers=token, **({"json": body} if body else {}))
            assert reply.is_success, (method, path, reply.status_code, reply.text)
            return reply.json() if reply.content else None

        for path in (
            "",
            "/demo",
            "/demo/voters",
            "/demo/agents",
            "/demo/suspects",
            "/demo/best-arm",
        ):
            call("GET", f"/v1/experiments{path}", admin)
        exp, arms = "acl-more", ["a", "b", "c"]
        call(
            "POST",
            "/v1/experiments",
            admin,
            id=exp,
            arms=arms,
            algorithm="ce",
            xi=0.1,
            subroutine="ser4",
            phi=0.1,
        )
        # the device's reads: a 304 for the current tag, and the event stream's first event
        state = http.get(f"/v1/experiments/{exp}")
        again = http.get(f"/v1/experiments/{exp}", headers={"If-None-Match": state.headers["etag"]})
        assert again.status_code == 304, again.text
        with http.stream("GET", f"/v1/experiments/{exp}/events") as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data:")).startswith(
                f'data: {{"experiment":"{exp}"'
            )
        (ticket,) = call("POST", f"/v1/experiments/{exp}/tickets", admin, count=1)["tickets"]
        agent = call("POST", "/v1/agents", {"Authorization": f"Bearer {ticket}"}, experiment=exp)
        token = {"Authorization": f"Bearer {agent['token']}"}
        call("POST", f"/v1/experiments/{exp}/votes", token, arm=2, epoch=0)
        call("POST", f"/v1/experiments/{exp}/settled", token, epoch=0)
        call("GET", "/v1/agents/me", token)
        call("POST", f"/v1/experiments/{exp}/reset", token, epoch=0)
        call("POST", f"/v1/experiments/{exp}/reset", admin)
        call("DELETE", f"/v1/experiments/{exp}", admin)


@dataclass
class Run:
    stack: LocalStack
    summary: Summary


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The run: every service under its own user, to an identified arm."""
    workdir = tmp_path_factory.mktemp("acl-stack")
    with local_stack(CONFIG, ARMS, 10, 2, seed=3, workdir=workdir, enrollment="tickets") as stack:
        settings = LoadSettings(
            coordinator_url=stack.coordinator_url,
            redis_url=stack.redis_urls[acl.LOAD_GENERATOR],
            problem="",
            means=MEANS,
            seed=3,
            max_seconds=240,
            settle_seconds=1.0,
        )
        with LoadGenerator(settings) as generator:
            summary = generator.run()
        operate(stack)
        yield Run(stack, summary)


@pytest.fixture(scope="module")
def stack(run: Run) -> LocalStack:
    return run.stack


@pytest.fixture(scope="module")
def admin(stack: LocalStack) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        yield client
    finally:
        client.close()


def user_client(stack: LocalStack, user: str) -> redis.Redis:
    return redis.Redis.from_url(stack.redis_urls[user], decode_responses=True)


def test_the_services_end_the_run_under_their_users_refused_nothing(
    run: Run, admin: redis.Redis
) -> None:
    stack, summary = run.stack, run.summary
    assert summary.status == "identified" and summary.identified_arm == 0
    urls = {urlsplit(url).username for url in stack.redis_urls.values()}
    assert urls == {acl.COORDINATOR, acl.AGENT, acl.LOAD_GENERATOR}
    # Each one used its own user (CLIENT LIST names the user of each connection).
    connections = admin.client_list()
    users = {c["user"] for c in connections}
    assert {acl.COORDINATOR, acl.AGENT} <= users
    # the coordinator's revision cache tracks its reads (flag t), under its own user
    assert any(
        c["name"] == "dexp-revisions" and "t" in c["flags"] and c["user"] == acl.COORDINATOR
        for c in connections
    ), connections
    assert refusals(admin) == []
    # and their keys are all there: the probes below try them for real, not on names only
    present = set(admin.scan_iter(count=1000))
    for key in (keys.meta(EXPERIMENT), keys.credentials(EXPERIMENT), keys.voters(EXPERIMENT, 1)):
        assert key in present


def test_nothing_connects_without_a_user(stack: LocalStack) -> None:
    """The default user is off: a bare command is refused (NOAUTH), and so is logging in as
    `default` whatever the password, or with a service's name and a wrong password."""
    url = urlsplit(stack.redis_url)
    assert url.hostname and url.port
    wrong = f"AUTH {acl.AGENT} {secrets.token_urlsafe(8)}\r\n".encode()
    with socket.create_connection((url.hostname, url.port), timeout=5) as raw:
        raw.sendall(b"PING\r\nAUTH default x\r\nAUTH x\r\n" + wrong + b"GET x\r\n")
        replies = b""
        while replies.count(b"\r\n") < 5:
            replies += raw.recv(1000)
    lines = replies.decode().splitlines()
    assert lines[0].startswith("-NOAUTH") and lines[4].startswith("-NOAUTH"), lines
    assert all(line.startswith("-WRONGPASS") for line in lines[1:4]), lines


def probes(key: str) -> dict[str, list[Any]]:
    """Commands that write `key` (or read it), each as a command line."""
    return {
        "SET": ["SET", key, "x"],
        "DEL": ["DEL", key],
        "HSET": ["HSET", key, "f", "x"],
        "SADD": ["SADD", key, "x"],
        "ZADD": ["ZADD", key, 1, "x"],
        "RPUSH": ["RPUSH", key, "x"],
        "XADD": ["XADD", key, "*", "f", "x"],
        "XGROUP CREATE": ["XGROUP", "CREATE", key, "g", "0", "MKSTREAM"],
        "XTRIM": ["XTRIM", key, "MAXLEN", 0],
        "XDEL": ["XDEL", key, "0-1"],
        "XACK": ["XACK", key, keys.ACTIVATION_GROUP, "0-1"],
        "EXPIRE": ["EXPIRE", key, 1],
        "RENAME": ["RENAME", key, key + "-moved"],
        "EVAL": ["EVAL", "return redis.call('DEL', KEYS[1])", 1, key],
        "EVALSHA": ["EVALSHA", "0" * 40, 1, key],
        "PUBLISH": ["PUBLISH", key, "1"],
        # reads
        "GET": ["GET", key],
        "HGETALL": ["HGETALL", key],
        "SMEMBERS": ["SMEMBERS", key],
        "ZRANGE": ["ZRANGE", key, 0, -1],
        "LRANGE": ["LRANGE", key, 0, -1],
        "XRANGE": ["XRANGE", key, "-", "+"],
        "XREADGROUP": ["XREADGROUP", "GROUP", "g", "c", "STREAMS", key, ">"],
        "XINFO GROUPS": ["XINFO", "GROUPS", key],
        "TYPE": ["TYPE", key],
        "EXISTS": ["EXISTS", key],
        "DUMP": ["DUMP", key],
    }


def snapshot(stack: LocalStack) -> dict[Any, Any]:
    """Every key and its serialized value (bytes: DUMP's are not text)."""
    raw = redis.Redis.from_url(stack.redis_url)
    try:
        return {key: raw.dump(key) for key in sorted(raw.scan_iter(count=1000))}
    finally:
        raw.close()


def refused(client: redis.Redis, command: list[Any]) -> bool:
    try:
        client.execute_command(*command)
    except redis.exceptions.NoPermissionError:
        return True
    except redis.ResponseError as exc:  # a script's own command refused
        return "can't run this command" in str(exc) or "no permissions" in str(exc)
    return False


def allowed(user: str, stack: LocalStack, commands: list[list[Any]]) -> list[str]:
    """The commands of `commands` that `user` was not refused (NOPERM), as text."""
    client = user_client(stack, user)
    try:
        return [" ".join(map(str, c)) for c in commands if not refused(client, c)]
    finally:
        client.close()


def test_the_agent_host_can_neither_write_nor_read_any_coordinator_key(
    stack: LocalStack, admin: redis.Redis
) -> None:
    """Every key of the coordinator's (votes, voters, credentials, tickets, ...): each write and
    each read is refused (NOPERM), and Redis holds exactly what it held."""
    before = snapshot(stack)
    admin.acl_log_reset()
    tried = [c for key in coordinator_keys(EXPERIMENT, len(ARMS)) for c in probes(key).values()]
    assert allowed(acl.AGENT, stack, tried) == []
    assert snapshot(stack) == before
    assert {e["username"] for e in admin.acl_log()} == {acl.AGENT}


def test_the_agent_host_reads_and_acknowledges_its_streams_and_no_more(
    stack: LocalStack, admin: redis.Redis
) -> None:
    """On an activation stream (the coordinator created it and its group when it enrolled the
    agent) the agent host reads and acknowledges: it cannot delete an entry (XDEL, XTRIM), create
    a stream or a group, write an activation (XADD), publish or subscribe to any channel (it
    follows the global set over HTTP, like a device: agent/events.py), nor administer Redis."""
    stream = keys.activations(EXPERIMENT, f"acl-{secrets.token_hex(4)}", secrets.token_hex(16))
    group = keys.ACTIVATION_GROUP
    admin.xgroup_create(stream, group, id="0", mkstream=True)
    mine = [
        ["XREADGROUP", "GROUP", group, "agent", "COUNT", 1, "STREAMS", stream, ">"],
        ["XACK", stream, group, "0-1"],
        ["PING"],
    ]
    not_mine = [
        ["XTRIM", stream, "MINID", "0-2"],
        ["XTRIM", stream, "MAXLEN", 0],
        ["XDEL", stream, "0-1"],
        ["XGROUP", "CREATE", stream, "other", "0"],
        ["XGROUP", "CREATE", stream + "-new", group, "0", "MKSTREAM"],
        ["XGROUP", "DESTROY", stream, group],
        ["XINFO", "GROUPS", stream],
        ["XADD", stream, "*", "r", "x"],
        ["PUBLISH", keys.events(EXPERIMENT), "1"],
        ["PUBLISH", keys.changes(EXPERIMENT), "s"],
        ["SUBSCRIBE", keys.events(EXPERIMENT)],
        ["SUBSCRIBE", keys.changes(EXPERIMENT)],
        ["PSUBSCRIBE", "*"],
        ["SUBSCRIBE", "elsewhere"],
        ["FLUSHALL"],
        ["CONFIG", "GET", "*"],
        ["KEYS", "*"],
        ["SCAN", "0"],
        ["ACL", "LIST"],
        ["INFO"],
    ]
    assert allowed(acl.AGENT, stack, mine) == [" ".join(map(str, c)) for c in mine]
    assert allowed(acl.AGENT, stack, not_mine) == []
    admin.delete(stream)


def test_the_agent_host_cannot_empty_another_agents_stream(
    stack: LocalStack, admin: redis.Redis
) -> None:
    """The attack: an agent host empties the stream of an agent it does not host (XTRIM MAXLEN 0,
    XTRIM MINID, XDEL), so that agent never sees its activations and the backlog the load
    generator sees shrinks. Refused (NOPERM), and the stream keeps every entry."""
    stream = keys.activations(EXPERIMENT, f"other-{secrets.token_hex(4)}", secrets.token_hex(16))
    admin.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
    ids = [admin.xadd(stream, {"r": "x"}) for _ in range(3)]
    ms, seq = ids[-1].split("-")
    attacks = [
        ["XTRIM", stream, "MAXLEN", 0],
        ["XTRIM", stream, "MINID", f"{ms}-{int(seq) + 1}"],  # every entry
        ["XDEL", stream, *ids],
    ]
    assert allowed(acl.AGENT, stack, attacks) == []
    assert [entry_id for entry_id, _ in admin.xrange(stream)] == ids
    admin.delete(stream)


def test_the_agent_host_touches_only_the_streams_of_the_agents_whose_tokens_it_holds(
    stack: LocalStack, admin: redis.Redis
) -> None:
    """Issue 36's attack: a host's agent Redis user takes another host's agent's activations
    (XREADGROUP, XACK). Two agents enrolled over HTTP, one per host, each given an activation by
    the load generator's user (which names their streams from the secrets' hash). The other
    agent's id is public (a viewer's GET /v1/experiments/{id}/agents), and main's stream name was
    built from it alone; now each name ends with 128 bits derived from the agent's token. Under
    every name the attacker can build without the other agent's token nothing is read nor
    acknowledged, and the other agent's entry stays undelivered; the attacker's own agent's
    stream, named from its own token, is read and acknowledged; and the agent user can neither
    read the hash of the secrets nor list keys."""
    exp = f"acl-streams-{secrets.token_hex(3)}"
    operator = {"Authorization": f"Bearer {stack.admin_token}"}
    http = httpx.Client(base_url=stack.coordinator_url, timeout=30, headers=operator)
    attacker = user_client(stack, acl.AGENT)
    generator = user_client(stack, acl.LOAD_GENERATOR)
    try:
        assert http.post("/v1/experiments", json={"id": exp, "arms": ARMS}).status_code == 201
        tickets = http.post(f"/v1/experiments/{exp}/tickets", json={"count": 2}).json()["tickets"]
        mine, other = (
            http.post("/v1/agents", json={"experiment": exp}, headers=bearer(t)).json()
            for t in tickets
        )
        listed = http.get(f"/v1/experiments/{exp}/agents").json()["agents"]
        assert other["agent_id"] in [a["agent_id"] for a in listed]  # its id is no secret
        # the load generator's activations: one in each agent's stream, named as it names them
        real = {}
        for agent in (mine, other):
            pattern = f"dexp:{{{exp}~s*}}:activations:{agent['agent_id']}*"
            (real[agent["agent_id"]],) = set(admin.scan_iter(match=pattern))  # SCAN may repeat
        entry = {a: generator.xadd(stream, {"r": "x"}) for a, stream in real.items()}

        # the attack: every name the attacker can build from what it holds (its own token, the
        # other agent's public id): main's name, and secrets that are not the other's
        shard = f"dexp:{{{exp}~s{keys.activation_shard(other['agent_id'])}}}"
        base = f"{shard}:activations:{other['agent_id']}"
        derived = hashlib.sha256(b"dexp activation stream\0" + mine["token"].encode())
        guesses = [
            base,  # the name main's code gives it
            f"{base}:{derived.hexdigest()[:32]}",  # its own token's secret
            f"{base}:{hashlib.sha256(other['agent_id'].encode()).hexdigest()[:32]}",
            f"{base}:{'0' * 32}",
            f"{base}:{secrets.token_hex(16)}",
            f"{base}:*",
        ]
        group = keys.ACTIVATION_GROUP
        taken, acknowledged = [], 0
        for name in guesses:
            with contextlib.suppress(redis.ResponseError):  # NOGROUP: no such key
                for _, entries in attacker.xreadgroup(group, "agent", {name: ">"}) or []:
                    taken += entries
            with contextlib.suppress(redis.ResponseError):
                acknowledged += attacker.xack(name, group, entry[other["agent_id"]])
        assert (taken, acknowledged) == ([], 0)
        (groups,) = admin.xinfo_groups(real[other["agent_id"]])
        assert (groups["pending"], groups["last-delivered-id"]) == (0, "0-0")  # never delivered

        # its own agent's stream, named from its own token: read and acknowledged
        assert sorted(real.values()) == sorted(activation_streams(generator, exp))
        own = keys.activations(exp, mine["agent_id"], keys.stream_secret(mine["token"]))
        assert own == real[mine["agent_id"]]
        ((_, [(read, _)]),) = attacker.xreadgroup(group, "agent", {own: ">"})
        assert read == entry[mine["agent_id"]]
        assert attacker.xack(own, group, read) == 1

        # nor may it learn a name: the secrets' hash and the key space are closed to it
        hashed = keys.stream_secrets(exp)
        lookups = [
            ["HGET", hashed, other["agent_id"]],
            ["HMGET", hashed, other["agent_id"]],
            ["HGETALL", hashed],
            ["HKEYS", hashed],
            ["HVALS", hashed],
            ["HSCAN", hashed, 0],
            ["SCAN", 0],
            ["SCAN", 0, "MATCH", f"{base}*"],
            ["KEYS", f"{base}*"],
            ["RANDOMKEY"],
        ]
        assert allowed(acl.AGENT, stack, lookups) == []
    finally:
        http.delete(f"/v1/experiments/{exp}")
        http.close()
        attacker.close()
        generator.close()
    assert not list(admin.scan_iter(match=f"dexp:{{{exp}*"))  # its streams went with it


def test_the_load_generator_reaches_its_streams_its_lease_and_the_agent_list_only(
    stack: LocalStack, admin: redis.Redis
) -> None:
    """The load generator writes the activation streams (not read them as a consumer), reads the
    agent list and their stream secrets and holds the lease. Every other key of the
    coordinator's is refused to it, write and read. (The agent list and the secrets it could also
    delete with the DEL its lease needs: Redis 6.2 has no read-only key patterns, see
    common/redis_acl.py.)"""
    before = snapshot(stack)
    its_own = {keys.agents(EXPERIMENT), keys.load_generator(EXPERIMENT)}
    its_own.add(keys.stream_secrets(EXPERIMENT))
    others = [k for k in coordinator_keys(EXPERIMENT, len(ARMS)) if k not in its_own]
    tried = [c for key in others for c in probes(key).values()]
    assert allowed(acl.LOAD_GENERATOR, stack, tried) == []
    assert snapshot(stack) == before
    stream = keys.activations(EXPERIMENT, f"acl-{secrets.token_hex(4)}", secrets.token_hex(16))
    mine = [
        ["XADD", stream, "*", "r", "x"],
        ["XLEN", stream],
        # the backlog: what the agents acknowledged is deleted (load_generator/streams.py)
        ["XINFO", "GROUPS", stream],
        ["XPENDING", stream, keys.ACTIVATION_GROUP],
        ["XTRIM", stream, "MINID", "0-1"],
        ["XINFO", "CONSUMERS", stream, keys.ACTIVATION_GROUP],  # a stall's report
        ["ZRANGE", keys.agents(EXPERIMENT), 0, -1],
        ["HMGET", keys.stream_secrets(EXPERIMENT), "a1"],  # the secrets that name the streams
    ]
    assert len(allowed(acl.LOAD_GENERATOR, stack, mine)) == len(mine)
    admin.script_load("return 1")
    not_mine = [
        ["XGROUP", "CREATE", stream, "g", "0"],
        ["XREADGROUP", "GROUP", "g", "c", "STREAMS", stream, ">"],
        ["SCRIPT", "LOAD", "return 1"],
        ["EVAL", "return 1", 0],
        ["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", 0],  # return 1's, loaded below
        ["XACK", stream, "g", "0-1"],
        ["SUBSCRIBE", keys.events(EXPERIMENT)],
        ["PUBLISH", keys.events(EXPERIMENT), "1"],
        ["FLUSHALL"],
        ["KEYS", "*"],
    ]
    assert allowed(acl.LOAD_GENERATOR, stack, not_mine) == []
    admin.delete(stream)


def test_the_coordinator_keeps_to_dexp_keys_and_administers_nothing(
    stack: LocalStack, admin: redis.Redis
) -> None:
    admin.set("another-app:secret", "x")
    try:
        foreign = [c for c in probes("another-app:secret").values() if c[0] != "PUBLISH"]
        admin_commands = [
            ["FLUSHALL"],
            ["FLUSHDB"],
            ["CONFIG", "SET", "appendonly", "no"],
            ["KEYS", "*"],
            ["ACL", "SETUSER", "agent", "+@all"],
            ["DEBUG", "SLEEP", "0"],
            ["SCRIPT", "FLUSH"],
            ["SUBSCRIBE", "another-app:events"],
        ]
        assert allowed(acl.COORDINATOR, stack, foreign + admin_commands) == []
        assert admin.get("another-app:secret") == "x"
    finally:
        admin.delete("another-app:secret")


# ------------------------------------------------------------------------------ the red team's

ENDLESS = "while true do end"  # blocked Redis for 12 s: every vote of the time got 503
DEMO_MEMORY = {"maxmemory": str(size_bytes(DEMO_MAXMEMORY)), "maxmemory-policy": "noeviction"}


def memory_config(client: redis.Redis) -> dict[str, str]:
    config = client.config_get("maxmemory*")
    return {k: str(config[k]) for k in DEMO_MEMORY}


@pytest.mark.parametrize("user", [acl.LOAD_GENERATOR, acl.AGENT])
def test_no_service_but_the_coordinator_runs_a_script(
    stack: LocalStack, admin: redis.Redis, user: str
) -> None:
    """The red team's endless script, through the load generator's user (and the agent's): it
    can neither load it nor run it, not even once an administrator loaded it (EVALSHA), so Redis
    answers the next command at once. (Should a try get through, the attacker's client times out,
    and an administrator's SCRIPT KILL frees Redis for the tests after.)"""
    sha = admin.script_load(ENDLESS)
    attacker = redis.Redis.from_url(stack.redis_urls[user], socket_timeout=2)
    try:
        for command in (["SCRIPT", "LOAD", ENDLESS], ["EVAL", ENDLESS, 0], ["EVALSHA", sha, 0]):
            with pytest.raises(redis.exceptions.NoPermissionError):
                attacker.execute_command(*command)
        assert admin.ping()
    finally:
        attacker.close()
        with contextlib.suppress(redis.ResponseError):  # NOTBUSY: nothing ran
            admin.script_kill()


def test_the_agent_host_cannot_fill_redis_with_streams(
    stack: LocalStack, admin: redis.Redis
) -> None:
    """The red team's flood, 1,000 XGROUP CREATE ... MKSTREAM under names the agent's pattern
    matches (it made 100,000 keys, 60 MB, in 3 s): every one refused, no key made. Every enrolled
    agent's stream and group exist all the same: the coordinator made them when it enrolled it.
    And Redis has a memory limit, past which it refuses writes rather than evicting state."""
    before = admin.dbsize()
    host = user_client(stack, acl.AGENT)
    try:
        pipe = host.pipeline(transaction=False)
        for i in range(1000):
            stream = keys.activations(f"flood{i % 7}", f"x{i}", keys.stream_secret(f"x{i}"))
            pipe.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
        replies = pipe.execute(raise_on_error=False)
    finally:
        host.close()
    assert all(isinstance(r, redis.exceptions.NoPermissionError) for r in replies), replies[:3]
    assert admin.dbsize() == before
    streams = activation_streams(admin, EXPERIMENT)
    assert len(streams) == 10
    for stream in streams:
        groups = admin.xinfo_groups(stream)
        assert [g["name"] for g in groups] == [keys.ACTIVATION_GROUP]
    assert memory_config(admin) == DEMO_MEMORY


# ------------------------------------------------------------------------------ a cluster


def test_a_cluster_has_the_users_on_every_node_and_replicates_as_replica(
    tmp_path: Path,
) -> None:
    """Three masters with a replica each, every node started with the users: the replicas sync
    with their masters as `replica` (start_cluster waits for every link up); each service's user
    works through redis-py's cluster client (the topology, the command table): the coordinator
    creates an experiment, enrolls an agent (and creates its stream, in another slot) and counts
    its vote, the load generator writes activations on several masters, the agent host reads
    them. No node's ACL log refuses anything but the agent host's try at creating a stream; every
    node has `dexp demo`'s memory limit and evicts nothing."""
    passwords = {u: secrets.token_urlsafe(16) for u in (*acl.SERVICES, acl.ADMIN, acl.REPLICA)}
    cluster = start_cluster(3, 1, directory=tmp_path / "cluster", users=passwords)
    try:
        assert len(cluster.replicas()) == 3
        node = cluster.nodes[0]

        def url(user: str) -> str:
            return acl.url(user, passwords[user], node.host, node.port)

        settings = coordinator_settings(url(acl.COORDINATOR), redis_cluster=True, experiment="")
        with coordinator(settings) as server, httpx.Client(base_url=server.url) as http:
            created = http.post(
                "/v1/experiments", json={"id": "c", "arms": ARMS}, headers=admin_headers()
            )
            assert created.status_code == 201, created.text
            (agent,) = enroll_agents(http, "c", 1)
            vote = http.post("/v1/experiments/c/votes", json={"arm": 1}, headers=agent.headers)
            assert vote.json()["counted"] is True, vote.text
        agent_host = RedisCluster.from_url(url(acl.AGENT))
        generator = RedisCluster.from_url(url(acl.LOAD_GENERATOR))
        owner = RedisCluster.from_url(url(acl.COORDINATOR))
        # the enrolled agent's stream and group: the coordinator created them, in their own slot
        enrolled = agent.stream("c")
        with RedisCluster.from_url(url(acl.ADMIN)) as operator:
            groups = operator.xinfo_groups(enrolled)
        assert [g["name"] for g in groups] == [keys.ACTIVATION_GROUP.encode()]
        # over several masters
        streams = [keys.activations("c", f"a{i}", keys.stream_secret(f"a{i}")) for i in range(8)]
        assert len({cluster.master_of(s).port for s in streams}) > 1
        for stream in streams:  # as the coordinator enrolling agents a0 ... a7 would
            owner.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
        for stream in [enrolled, *streams]:
            generator.xadd(stream, {"r": b"x"})
            assert agent_host.xreadgroup(keys.ACTIVATION_GROUP, "agent", {stream: ">"}, count=1)
        with pytest.raises(redis.exceptions.NoPermissionError):  # no stream of its own making
            agent_host.xgroup_create(streams[0] + "-new", "g", id="0", mkstream=True)
        agent_host.close()
        generator.close()
        owner.close()
        log = []
        for each in cluster.nodes:
            with cluster.client(each) as client:
                log += [(e["username"], e["reason"], e["object"]) for e in refusals(client)]
                assert memory_config(client) == DEMO_MEMORY
        assert log == [(acl.AGENT, "command", "xgroup")]
    finally:
        cluster.stop(remove_files=True)
