"""How the agent service keeps its agents in step with the coordinator: each hosted experiment's
view of the global set kept current, and the votes the coordinator lost or never acknowledged sent
again.

One GlobalView (agent/library.py) per experiment, shared by its agents, and one coordinator client
for them all. The global sets are followed as a device follows one, over HTTP alone: one
GlobalSetFollower (agent/events.py) per experiment, a thread holding the experiment's event stream
(never one per agent), which polls with If-None-Match while no stream is open; the loop takes what
each learnt at every turn. Besides, vote replies, and under `*` the (epoch, version) of each
experiment in the coordinator's list (agent/discovery.py), show changes, and the view is read
again. The polls are spread so that a process sends at most DEXP_POLL_RATE of them a second. The
process needs Redis only for its activation streams (agent/streams.py): no pub/sub. A deletion
announced, or a read that finds the experiment deleted and created again, drops it; a refused read
pauses its agents (agent/discovery.py).

After each new read of an experiment's global state or sign of lost writes, each agent checks its
acknowledged votes if it has a reason to (Agent.check_reason) and sends again those the coordinator
lost; the votes decided but not seen acknowledged (a dead process's, restored from DEXP_STATE_DIR,
or a paused experiment's) are sent again. A copy of a vote is harmless.
"""

from __future__ import annotations

import functools
import time

from agent.discovery import Discovery, Hosted
from agent.events import GlobalSetFollower
from agent.settings import AgentSettings
from clients.coordinator import CoordinatorClient

REPLACED = "was deleted and created again (these agents were the old one's)"


class Follower:
    """Follows the global set of every experiment `discovery` hosts (one GlobalSetFollower each)
    and has their agents check and send again their votes."""

    def __init__(
        self, settings: AgentSettings, client: CoordinatorClient, discovery: Discovery
    ) -> None:
        self.settings = settings
        self.client = client
        self.discovery = discovery
        self.followers: dict[str, GlobalSetFollower] = {}

    def follow(self, hosted: Hosted) -> None:
        """Follow a newly hosted experiment: its event stream opened, in a thread."""
        self.unfollow(hosted)
        self.followers[hosted.experiment] = GlobalSetFollower(
            self.settings.coordinator_url,
            hosted.experiment,
            poll_seconds=self.poll_period,
            retry_max_seconds=max(self.settings.retry_max_seconds, 60.0),
        ).start()
        self._spread()

    def unfollow(self, hosted: Hosted) -> None:
        follower = self.followers.pop(hosted.experiment, None)
        if follower is not None:
            follower.close()
            self._spread()

    def close(self) -> None:
        for follower in self.followers.values():
            follower.close()
        self.followers.clear()

    @property
    def poll_period(self) -> float:
        """Each experiment's poll period while its stream is down: DEXP_POLL_SECONDS, stretched
        so that the process sends at most DEXP_POLL_RATE polls a second in all (1,000 experiments
        polled every 2 s would be 500 requests a second from each process while a coordinator
        serves no stream)."""
        return max(self.settings.poll_seconds, len(self.followers) / self.settings.poll_rate)

    def _spread(self) -> None:
        period = self.poll_period
        for follower in self.followers.values():
            follower.poll_seconds = period

    def follow_global_set(self) -> None:
        """What each follower learnt, taken into its experiment's view (GlobalView.follow); an
        experiment the listing marked changed is read again; a deletion drops it."""
        for hosted in list(self.discovery.hosted.values()):
            follower = self.followers.get(hosted.experiment)
            change = follower.take() if follower is not None else None
            if change is not None and change.deleted:
                self.discovery.verify(hosted)  # asked again: another one may have its id now
                continue
            if change is not None and change.state is not None:
                state, seq = change.state, change.seq
                self.discovery.guarded(
                    hosted, functools.partial(hosted.view.follow, state, seq, self.client)
                )
            if hosted.changed:
                hosted.changed = False
                self.discovery.guarded(hosted, functools.partial(hosted.view.refresh, self.client))
            if hosted.view.replaced:
                self.discovery.drop(hosted, REPLACED)
            elif (
                follower is not None
                and follower.stopped
                and hosted is self.discovery.hosted.get(hosted.experiment)
            ):
                self.follow(hosted)  # its experiment came back under the same id: follow it

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
