"""How the agent service keeps its agents in step with the coordinator: each hosted experiment's
view of the global set kept current, and the votes the coordinator lost or never acknowledged sent
again.

One GlobalView (agent/library.py) and one pub/sub channel per experiment, and one coordinator
client for them all. The global sets are learnt from broadcasts and vote replies, and under `*` from
the (epoch, version) of each experiment in the coordinator's list (agent/discovery.py); the
fallback refresh of each one is spread so that a process sends at most DEXP_POLL_RATE of them a
second. A refresh that finds the experiment deleted and created again drops it; a refused one
pauses its agents (agent/discovery.py).

After each new read of an experiment's global state or sign of lost writes, each agent checks its
acknowledged votes if it has a reason to (Agent.check_reason) and sends again those the coordinator
lost; the votes decided but not seen acknowledged (a dead process's, restored from DEXP_STATE_DIR,
or a paused experiment's) are sent again. A copy of a vote is harmless.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from typing import Any

import redis

from agent.discovery import Discovery, Hosted
from agent.settings import AgentSettings
from clients.coordinator import CoordinatorClient
from clients.redis import SyncRedis
from common import redis_keys as keys


class Follower:
    """Follows the global set of every experiment `discovery` hosts (one pub/sub subscription for
    them all) and has their agents check and send again their votes."""

    def __init__(
        self,
        redis_client: SyncRedis,
        settings: AgentSettings,
        client: CoordinatorClient,
        discovery: Discovery,
    ) -> None:
        self.redis = redis_client
        self.settings = settings
        self.client = client
        self.discovery = discovery
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)

    def subscribe(self, hosted: Hosted) -> None:
        """Follow a newly hosted experiment: its channel, and its first fallback refresh due at a
        random point of the period."""
        self.pubsub.subscribe(keys.events(hosted.experiment))
        hosted.next_refresh = time.monotonic() + self.refresh_period * random.random()

    def unsubscribe(self, hosted: Hosted) -> None:
        with contextlib.suppress(redis.RedisError):
            self.pubsub.unsubscribe(keys.events(hosted.experiment))

    def resubscribe(self) -> None:
        """After Redis came back: a new subscription, and every experiment refreshed soon (a
        change announced while we were away was missed)."""
        with contextlib.suppress(Exception):
            self.pubsub.close()
        self.pubsub = self._subscribe()
        now, period = time.monotonic(), self.refresh_period
        for hosted in self.discovery.hosted.values():
            hosted.next_refresh = now + period * random.random()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pubsub.close()

    def _subscribe(self) -> Any:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        channels = [keys.events(experiment) for experiment in self.discovery.hosted]
        if channels:
            pubsub.subscribe(*channels)
        return pubsub

    @property
    def refresh_period(self) -> float:
        """The mean period of each experiment's fallback refresh: DEXP_POLL_SECONDS, stretched so
        that the process sends at most DEXP_POLL_RATE of them a second in all (1,000 experiments
        refreshed every 2 s would be 500 requests a second from each process, most of the
        coordinator's work for nothing: the global set changes at most K - 1 times an epoch).
        Each refresh is due at a random point of it, so they do not come in bursts."""
        return max(self.settings.poll_seconds, len(self.discovery.hosted) / self.settings.poll_rate)

    def follow_global_set(self) -> None:
        """A broadcast marks its experiment changed; a changed experiment, or one whose fallback
        refresh is due, is read again (GlobalView.refresh)."""
        while (message := self.pubsub.get_message(timeout=0)) is not None:
            if message.get("type") == "message":
                channel = message["channel"]
                channel = channel.decode() if isinstance(channel, bytes) else str(channel)
                for experiment, hosted in self.discovery.hosted.items():
                    if channel == keys.events(experiment):
                        hosted.changed = True
        now = time.monotonic()
        period = self.refresh_period
        for hosted in list(self.discovery.hosted.values()):
            if hosted.changed or now >= hosted.next_refresh:
                hosted.changed = False
                hosted.next_refresh = now + period * (0.5 + random.random())
                self.discovery.guarded(hosted, functools.partial(hosted.view.refresh, self.client))
                if hosted.view.replaced:
                    self.discovery.drop(
                        hosted, "was deleted and created again (these agents were the old one's)"
                    )

    def reconcile(self) -> None:
        """After each new read of an experiment's global state or sign of lost writes, and once a
        second for the agents' slow periodic checks: each agent checks its acknowledged votes if it
        has a reason to (Agent.check_reason) and sends again those the coordinator lost."""
        now = time.monotonic()
        for hosted in list(self.discovery.hosted.values()):
            seen = (hosted.view.snapshot_seq, hosted.view.lost_at)
            if seen == hosted.reconciled and now < hosted.next_reconcile:
                continue
            hosted.reconciled, hosted.next_reconcile = seen, now + 1.0
            for agent in hosted.agents.values():
                self.discovery.guarded(hosted, functools.partial(agent.reconcile, now))

    def resend(self) -> None:
        """Votes decided but not seen acknowledged: a dead process's, or a paused experiment's."""
        for hosted in list(self.discovery.hosted.values()):
            if hosted.resend_due and not hosted.paused:
                hosted.resend_due = False
                for agent in hosted.agents.values():
                    self.discovery.guarded(hosted, agent.resend_pending)
