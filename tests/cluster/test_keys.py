"""The key layout on a real cluster: an experiment's keys in one slot, its agents' activation
streams spread over slots and masters (common/redis_keys.py)."""

from __future__ import annotations

import hashlib
import random
import zlib
from collections import Counter

import httpx
from redis.cluster import RedisCluster
from redis.crc import key_slot

from common import redis_keys as keys
from dexp.redis_cluster import LocalCluster
from tests.services.helpers import admin_headers, create_experiment, enroll_agents

from .helpers import keys_on

ARMS = ["A", "B", "C"]
M2 = {"delta": 0.5**1.5, "eta": 0.5}  # DE: M = 2


def agent_ids(experiment: str, n: int, seed: int) -> list[str]:
    """Ids of the coordinator's form, <experiment>-<10 hex digits>, drawn with a fixed seed."""
    rng = random.Random(seed)
    return [f"{experiment}-{rng.getrandbits(40):010x}" for _ in range(n)]


def test_the_shard_of_a_stream_is_crc32_of_the_agent_id() -> None:
    """Pinned: every process (agents, load generator, coordinator) must name a stream alike."""
    agent = "demo-0123456789"
    shard = zlib.crc32(agent.encode()) % 16
    assert keys.ACTIVATION_SHARDS == 16
    assert keys.activation_shard(agent) == shard == 10
    secret = keys.stream_secret(f"{agent}.token")
    digest = hashlib.sha256(b"dexp activation stream\0" + f"{agent}.token".encode()).hexdigest()
    assert secret == digest[:32] and len(secret) == 32
    stream = keys.activations("demo", agent, secret)
    assert stream == f"dexp:{{demo~s10}}:activations:demo-0123456789:{secret}"
    assert keys.hash_tag(stream) == "demo~s10"
    # The tag of a shard is never another experiment's tag, nor the experiment's own.
    assert keys.hash_tag(keys.meta("demo~s10")) == "demo~s10"  # not an id the coordinator takes
    assert keys.hash_tag(keys.meta("demo")) == "demo"
    # Redis's rule: the first {...} that is not empty; else the whole key.
    assert keys.hash_tag("a{}{b}") == "a{}{b}" and keys.hash_tag("a{b}{c}") == "b"
    assert keys.hash_tag("no-tag") == "no-tag" and keys.hash_tag("a{b") == "a{b"


def test_an_experiments_keys_share_one_slot_on_one_master(
    client: httpx.Client, healthy_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    """Every key the coordinator writes for an experiment (state, agents, credentials, votes,
    tickets, rate limits) is in one slot, held by one master; the index is elsewhere."""
    exp = "keys-one-slot"
    create_experiment(client, id=exp, arms=ARMS, **M2)
    for agent in enroll_agents(client, exp, 2):
        reply = client.post(f"/v1/experiments/{exp}/votes", json={"arm": 2}, headers=agent.headers)
        assert reply.status_code == 200, reply.text
    reply = client.post(
        f"/v1/experiments/{exp}/tickets", json={"count": 1}, headers=admin_headers()
    )
    assert reply.status_code == 201, reply.text
    held = keys_on(healthy_cluster, f"dexp:{{{exp}}}:*")
    holders = {port for port, found in held.items() if found}
    assert len(holders) == 1, held
    (found,) = (held[port] for port in holders)
    expected = {
        keys.meta(exp),
        keys.remaining(exp),
        keys.agents(exp),
        keys.agent_seq(exp),
        keys.credentials(exp),
        keys.enrollers(exp),
        keys.enroll_rate(exp),
        keys.vote_rate(exp),
        keys.voters(exp, 2),
        keys.eliminations(exp),
        keys.tickets(exp),
    }
    assert expected <= found, expected - found
    slots = {int(cluster_client.cluster_keyslot(key)) for key in found}
    assert slots == {key_slot(exp.encode())}
    master = healthy_cluster.master_of(keys.meta(exp))
    assert holders == {master.port}
    assert cluster_client.zscore(keys.EXPERIMENT_INDEX, exp) == 0
    assert keys.hash_tag(keys.EXPERIMENT_INDEX) == keys.EXPERIMENT_INDEX  # no experiment's tag


def test_activation_streams_spread_over_slots_and_every_master(
    healthy_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    """300 agents' streams, created as enrollment creates them (XGROUP CREATE MKSTREAM) through the
    cluster client: every shard is used, each shard is one slot, and every master holds some."""
    exp = "keys-spread"
    agents = agent_ids(exp, 300, seed=5)
    streams = {keys.activations(exp, a, keys.stream_secret(a)) for a in agents}
    for stream in streams:
        cluster_client.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
    shards = Counter(keys.activation_shard(a) for a in agents)
    assert set(shards) == set(range(keys.ACTIVATION_SHARDS))
    assert max(shards.values()) <= 3 * min(shards.values())  # crc32 spreads the ids evenly
    slots = Counter(key_slot(s.encode()) for s in streams)
    assert len(slots) == keys.ACTIVATION_SHARDS
    assert key_slot(exp.encode()) not in slots
    held = keys_on(healthy_cluster, f"dexp:{{{exp}~s*}}:activations:*")
    assert set().union(*held.values()) == streams
    per_master = sorted(len(found) for found in held.values())
    assert len(per_master) == 3 and min(per_master) > 0, per_master
    print(
        f"\n[spread] {len(streams)} streams of one experiment: {len(slots)} slots; "
        f"streams per master {per_master}; streams per shard {min(shards.values())} to "
        f"{max(shards.values())}"
    )
    # One slot per shard: a read or an acknowledgement of one shard's streams is one slot.
    for shard in range(keys.ACTIVATION_SHARDS):
        of_shard = {s for s in streams if keys.hash_tag(s) == f"{exp}~s{shard}"}
        assert len({key_slot(s.encode()) for s in of_shard}) == 1
    cluster_client.delete(*streams)
