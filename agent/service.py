"""The agent service: hosts AGENTS_PER_REPLICA agents in one process, fed by Redis streams.

Each agent has a stream of activations and a consumer group; an activation is acknowledged (and
deleted, so the stream length is the backlog the load generator sees) only after the votes it caused
were acknowledged by the coordinator. A crash therefore means redelivery, and redelivery is harmless
because a vote is idempotent per (agent, arm).
"""

from __future__ import annotations

import logging
import signal
import socket
import time
from typing import Any

import numpy as np
import redis

from agent.client import CoordinatorClient
from agent.library import Agent, GlobalView
from agent.settings import AgentSettings
from common import redis_keys as keys
from common.wire import decode_rewards

log = logging.getLogger("dexp.agent.service")
CONSUMER = "agent"  # one logical consumer per stream: a restarted process sees its pending entries


def connect_redis(url: str, attempts: int = 120, delay: float = 0.5) -> redis.Redis:
    client = redis.Redis.from_url(url)
    for attempt in range(attempts):
        try:
            client.ping()
            return client
        except redis.ConnectionError as exc:
            if attempt == attempts - 1:
                raise
            log.warning("redis not ready (%s); retrying", exc)
            time.sleep(delay)
    return client


class AgentService:
    def __init__(self, settings: AgentSettings) -> None:
        self.settings = settings
        self.stopping = False
        self.client = CoordinatorClient(
            settings.coordinator_url,
            retry_max_seconds=settings.retry_max_seconds,
            should_stop=lambda: self.stopping,
        )
        self.redis = connect_redis(settings.redis_url)
        self.view = GlobalView.fetch(self.client, settings.experiment)
        seeds = np.random.SeedSequence(settings.seed).spawn(settings.agents_per_replica)
        self.agents: dict[str, Agent] = {}
        for seed in seeds:
            agent = Agent.enroll(
                self.client, self.view, settings.enrollment_secret, np.random.default_rng(seed)
            )
            stream = keys.activations(settings.experiment, agent.agent_id)
            try:
                self.redis.xgroup_create(stream, keys.ACTIVATION_GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self.agents[stream] = agent
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(keys.events(settings.experiment))
        self.activations = 0
        self.last_refresh = time.monotonic()
        log.info(
            "%d agent(s) enrolled in %s on %s (M=%d)",
            len(self.agents),
            settings.experiment,
            socket.gethostname(),
            self.view.threshold,
        )

    def stop(self, *_: Any) -> None:
        self.stopping = True

    def _follow_global_set(self) -> None:
        changed = False
        while (message := self.pubsub.get_message(timeout=0)) is not None:
            changed = changed or message.get("type") == "message"
        if changed or time.monotonic() - self.last_refresh > self.settings.poll_seconds:
            self.view.refresh(self.client)
            self.last_refresh = time.monotonic()

    def _process(self, stream: str, entries: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        agent = self.agents[stream]
        done: list[bytes] = []
        for entry_id, fields in entries:
            if not fields:  # deleted while pending
                done.append(entry_id)
                continue
            rewards = decode_rewards(fields[b"r"])
            arms = agent.choose()
            if arms:
                agent.observe(arms, rewards[arms])
            done.append(entry_id)
        self.activations += len(done)
        pipe = self.redis.pipeline(transaction=False)
        pipe.xack(stream, keys.ACTIVATION_GROUP, *done)
        pipe.xdel(stream, *done)
        pipe.execute()

    def _read(self, start: str) -> list[Any]:
        streams = dict.fromkeys(self.agents, start)
        block = None if start == "0" else 1000
        return (
            self.redis.xreadgroup(
                keys.ACTIVATION_GROUP, CONSUMER, streams, count=self.settings.batch, block=block
            )
            or []
        )

    def run(self) -> None:
        while pending := [(s, e) for s, e in self._read("0") if e]:  # redeliveries after a crash
            for stream, entries in pending:
                self._process(stream.decode(), entries)
        last_log = time.monotonic()
        while not self.stopping:
            self._follow_global_set()
            for stream, entries in self._read(">"):
                self._process(stream.decode(), entries)
            if time.monotonic() - last_log > 10:
                last_log = time.monotonic()
                log.info(
                    "%d activations, %d votes, remaining arms %s",
                    self.activations,
                    sum(a.votes_sent for a in self.agents.values()),
                    sorted(self.view.remaining),
                )
        self.client.close()


def main() -> None:
    settings = AgentSettings()
    logging.basicConfig(
        level=settings.log_level.upper(),
        format='{"time":"%(asctime)s","level":"%(levelname)s","logger":"%(name)s","msg":"%(message)s"}',
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    service = AgentService(settings)
    signal.signal(signal.SIGTERM, service.stop)
    signal.signal(signal.SIGINT, service.stop)
    service.run()


if __name__ == "__main__":
    main()
