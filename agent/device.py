"""The device SDK: one agent embedded in an application (a phone, a browser, a shop's till), over
HTTP alone. docs/DEVICES.md is its guide.

    from agent.device import DeviceAgent

    agent = DeviceAgent.enroll(
        coordinator="https://dexp.example.com", experiment="checkout",
        ticket="ticket.checkout.…", state_file="dexp-agent.json",
    )
    while not agent.done:
        arms = agent.choose()                   # the arms to play now (usually one)
        agent.observe(arms, rewards_of(arms))   # the rewards stay here; maybe a vote leaves
    agent.close()

In an LDP experiment (`algorithm: ldp`, docs/LDP.md) `enroll` gives a PrivateDeviceAgent (below,
the logic in agent/private_device.py): no local learning; `choose` draws one arm from the published
allocation, `observe` sends one private report (the arm, one bit, its number) while the device has
reports left.

What leaves the device: the enrollment ticket (once), votes (an arm index and an epoch), CE's
"settled" messages (an epoch), CDE's one report (an arm index, randomized, sent at the activation
that ends its fixed budget), the reads of the experiment's public state and its event stream,
and GET /v1/agents/me (this agent's own votes, to re-send any a failover lost). Rewards, local
means, and which arms it plays never do: the algorithm (common/) runs here.

It is agent.library.Agent (choose, observe, vote, settle, DSER4 resets, re-sending lost votes)
with what a device needs around it: the state file (agent.state.StateFile: agent id, token and
votes, never rewards or means), so that a restarted app is the same agent and never votes twice
on an arm; and a GlobalSetFollower (agent/events.py) in a background thread, which follows the
global set by Server-Sent Events with ETag polling as the fallback. The follower only reads: the
application's thread applies what it learnt at its next call, so the requests of the agent stay
sequential and the application needs no event loop. The methods may be called from any thread,
one at a time (a lock serializes them).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from agent.events import GlobalSetFollower
from agent.library import Agent, GlobalView, next_seq
from agent.private_device import (
    PrivateProtocol,
    Uniform,
    generator_uniform,
    system_uniform,
)
from agent.protocol import client_transport, run
from agent.state import AgentRecord, StateFile
from clients.coordinator import CoordinatorClient, CoordinatorError
from common.params import check_bernoulli_rewards

__all__ = [
    "CoordinatorError",
    "DeviceAgent",
    "EnrollmentRefused",
    "ExperimentGone",
    "PrivateDeviceAgent",
]

log = logging.getLogger("dexp.agent.device")


class EnrollmentRefused(RuntimeError):
    """The coordinator refused to enroll this agent: the message says why and what to do."""


class ExperimentGone(RuntimeError):
    """The experiment was deleted (or deleted and created again): this agent has nothing to do."""


@dataclass
class _Start:
    """How an agent comes to a device: restored from its state file, or enrolled."""

    client: CoordinatorClient
    view: GlobalView
    state: StateFile | None
    ticket: str | None
    rng: np.random.Generator
    reconcile_seconds: float

    def restore(self) -> Agent | None:
        """The agent saved in the state file, if it is one of this experiment that the
        coordinator still knows; None if a new one is to be enrolled."""
        record = self.saved()
        if record is None:
            return None
        return Agent(
            self.client,
            self.view,
            record.agent_id,
            record.token,
            self.rng,
            record=record,
            reconcile_seconds=self.reconcile_seconds,
        )

    def saved(self) -> AgentRecord | None:
        """The record in the state file, if it is an agent of this experiment that the
        coordinator still knows; None if a new one is to be enrolled."""
        state, view = self.state, self.view
        saved = state.load() if state is not None else None
        if saved is None:
            return None
        experiment, created_at, record = saved
        if experiment != view.experiment:
            raise ValueError(
                f"{state.path if state else ''} holds an agent of experiment {experiment!r}, not "
                f"{view.experiment!r}: give each experiment its own state file"
            )
        if created_at != view.created_at:
            log.warning(
                "experiment %s was deleted and created again since agent %s enrolled: a new "
                "agent is enrolled",
                experiment,
                record.agent_id,
            )
            return None
        try:
            self.client.me(record.token)
        except CoordinatorError as exc:
            if exc.status != 401:
                raise
            if self.ticket is None:
                raise EnrollmentRefused(
                    f"the coordinator no longer knows agent {record.agent_id} (401: its data was "
                    "lost): enroll a new agent with a new ticket (the state file is then "
                    "overwritten)"
                ) from None
            log.warning("the coordinator no longer knows agent %s: enrolling anew", record.agent_id)
            return None
        return record

    def enroll(self) -> Agent:
        """A new agent, with the ticket; saved before anything else (a crash then must not
        enroll it again)."""
        record = self.enroll_record()
        return Agent(
            self.client,
            self.view,
            record.agent_id,
            record.token,
            self.rng,
            record=record,
            reconcile_seconds=self.reconcile_seconds,
        )

    def enroll_record(self) -> AgentRecord:
        """A new agent's record, enrolled with the ticket and saved before anything else."""
        state, view = self.state, self.view
        if not self.ticket:
            raise EnrollmentRefused(
                f"no agent of experiment {view.experiment} is saved"
                + (f" in {state.path}" if state else "")
                + ": a ticket is needed to enroll one (`dexp tickets issue "
                f"{view.experiment} --count 1`)"
            )
        try:
            reply = self.client.enroll(self.ticket, view.experiment)
        except CoordinatorError as exc:
            why = {
                401: "the ticket is unknown, used, expired or another experiment's (or open "
                "enrollment is off): ask for a new ticket",
                403: "the experiment has its maximum of agents (DEXP_MAX_AGENTS), or this "
                "address its maximum under open enrollment: use a ticket, or try later",
            }.get(exc.status)
            if why is None:
                raise
            raise EnrollmentRefused(f"enrollment refused ({exc}): {why}") from None
        record = AgentRecord(str(reply["agent_id"]), str(reply["token"]))
        if state is not None:
            state.save(view.experiment, view.created_at, record)
        return record


class DeviceAgent:
    """One agent on a device. Build it with `enroll`; see the module docstring."""

    def __init__(
        self,
        client: CoordinatorClient,
        agent: Agent,
        state: StateFile | None,
        follower: GlobalSetFollower | None,
        resumed: bool,
    ) -> None:
        self.client = client
        self.agent = agent
        self.state = state
        self.follower = follower
        self.resumed = resumed  # restored from the state file (no new enrollment)
        self.gone = False  # the experiment was deleted, or deleted and created again
        self.closed = False
        self._lock = threading.RLock()

    @classmethod
    def enroll(
        cls,
        coordinator: str,
        experiment: str,
        ticket: str | None = None,
        state_file: str | Path | None = None,
        *,
        seed: int | None = None,
        follow: bool = True,
        poll_seconds: float = 30.0,
        reconcile_seconds: float = 300.0,
        timeout: float = 10.0,
        retry_max_seconds: float = 30.0,
    ) -> DeviceAgent:
        """The agent of `state_file` if it holds one of this experiment, else a new one enrolled
        with `ticket` (a one-time ticket, `dexp tickets issue`; in development, the coordinator's
        open-enrollment secret), saved there before anything else.

        `coordinator`: its URL, or several comma-separated (failover). `seed`: the local
        algorithm's randomness (None: fresh; a resumed agent should not replay its draws).
        `follow`: follow the global set in a background thread (else only the replies to its
        own requests, and `refresh`, tell it of changes). `poll_seconds`: the period of the
        fallback polls while no event stream is open. `reconcile_seconds`: the mean period of the
        check of its own votes (GET /v1/agents/me), which finds votes a failover lost even when
        nothing else shows it. Requests are retried (capped back-off up to `retry_max_seconds`,
        failover, Retry-After) until the coordinator answers; a refusal (4xx) is raised."""
        client = CoordinatorClient(
            coordinator, timeout=timeout, retry_max_seconds=retry_max_seconds
        )
        state = StateFile(state_file) if state_file is not None else None
        follower: GlobalSetFollower | None = None
        try:
            if state is not None:
                state.lock()
            seq = next_seq()
            document, etag = client.experiment_if_changed(experiment, None)
            assert document is not None  # no ETag sent: never a 304
            view = GlobalView.of(experiment, document, seq)
            start = _Start(
                client, view, state, ticket, np.random.default_rng(seed), reconcile_seconds
            )

            def following() -> GlobalSetFollower:
                return GlobalSetFollower(
                    coordinator,
                    experiment,
                    poll_seconds=poll_seconds,
                    retry_max_seconds=max(retry_max_seconds, 60.0),
                    timeout=timeout,
                ).start()

            if view.config.crowd:  # LDP: no learning here, private reports (PrivateDeviceAgent)
                record = start.saved()
                resumed = record is not None
                record = record or start.enroll_record()
                uniform = system_uniform() if seed is None else generator_uniform(start.rng)
                follower = following() if follow else None
                private = PrivateDeviceAgent(
                    client, view, record, state, follower, resumed, document, etag, uniform
                )
                if resumed:
                    private.resend_pending()  # decided before the restart, not seen answered
                return private
            agent = start.restore()
            resumed = agent is not None
            if agent is None:
                agent = start.enroll()
            if state is not None:
                saved, created_at, record = state, view.created_at, agent.record
                agent.persist = lambda: saved.save(experiment, created_at, record)
            if follow:
                follower = following()
            device = cls(client, agent, state, follower, resumed)
            if resumed:
                agent.resend_pending()  # decided before the restart, not seen acknowledged
                agent.next_check = 0.0  # and the acknowledged ones checked at the first call
            return device
        except BaseException:
            if follower is not None:
                follower.close()
            client.close()
            if state is not None:
                state.close()
            raise

    # -- what the application calls -----------------------------------------------------------
    def choose(self) -> list[int]:
        """The arms to play now (indices into `arms`): one, or each of the local set under
        `every_arm`. Once the best arm is identified, that arm; settled (one arm left locally),
        that arm (its rewards teach nothing more); under CDE, none between its report and the
        answer. ExperimentGone if the experiment was deleted. (The JavaScript SDK's `choose`
        answers the same.)"""
        with self._lock, self._gone_on_404():
            self._catch_up()
            arms = self.agent.choose()
            self.agent.reconcile(time.monotonic())
            if self.agent.view.identified:
                return sorted(self.agent.view.remaining)
            if not arms and self.agent.local.done and not self.agent.reporting:
                return list(self.agent.local.local_arms)
            return arms

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        """The rewards of the arms `choose` gave, in the same order; the arms it voted against
        (usually none). The rewards stay on the device. An experiment declared Bernoulli takes 0
        and 1 only: any other reward is refused (ParameterError, a ValueError), nothing learnt."""
        with self._lock, self._gone_on_404():
            if self.agent.view.bernoulli:
                check_bernoulli_rewards(rewards)
            if self.agent.local.done and not self.agent.reporting:
                return []  # settled: the arm `choose` gave teaches nothing more
            votes = self.agent.observe(arms, rewards)
            self._catch_up()
            return votes

    def me(self) -> dict[str, Any]:
        """What the coordinator counted of this agent's own messages (GET /v1/agents/me, with its
        own token): `votes` (its votes of this epoch, each `counted` or `arm_out`), `reported`
        (CDE), `reports_sent` and `reports_left` (LDP), and `waiting`, the experiment's counted
        messages not yet in the public counts, which are published `publish_batch` at a time:
        the public counts may not show this agent's messages yet, this does."""
        with self._lock, self._gone_on_404():
            return self.client.me(self._token)

    @property
    def _token(self) -> str:
        return self.agent.record.token

    def wait_for_change(self, timeout: float | None = None) -> bool:
        """Wait until the follower learns of a change of the global set (True), or `timeout`
        seconds pass (False): what an agent whose local set holds one arm can do meanwhile."""
        if self.follower is None:
            time.sleep(timeout or 0.0)
            return False
        return self.follower.wait(timeout)

    def refresh(self) -> bool:
        """Read the experiment's state now (a full GET); True if the global set changed."""
        with self._lock:
            return self.agent.view.refresh(self.client)

    def close(self) -> None:
        """Stop following, close the connections, release the state file. Votes decided and not
        acknowledged are on record: the next start sends them."""
        with self._lock:
            self.closed = True
            if self.follower is not None:
                self.follower.close()
            self.client.close()
            if self.state is not None:
                self.state.close()

    def __enter__(self) -> DeviceAgent:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def _gone_on_404(self) -> Iterator[None]:
        """ExperimentGone before and after the block if the experiment is gone, and for a 404
        within it (a vote or a read of a deleted experiment)."""
        if self.gone:
            raise ExperimentGone(f"experiment {self.experiment} was deleted")
        try:
            yield
        except CoordinatorError as exc:
            if exc.status != 404:
                raise
            self.gone = True
        if self.gone:
            raise ExperimentGone(f"experiment {self.experiment} was deleted")

    def _catch_up(self) -> None:
        """Apply the newest change the follower kept (if any) to the view (not once closed:
        the properties then tell what was known at the close)."""
        if self.closed:
            return
        change = self.follower.take() if self.follower is not None else None
        view = self.agent.view
        if change is not None and not self.gone:
            if change.state is None:
                self.gone = True
            else:
                try:
                    view.follow(change.state, change.seq, self.client)
                except CoordinatorError as exc:  # its read again found it gone
                    if exc.status != 404:
                        raise
                    self.gone = True
        if view.replaced:
            self.gone = True

    # -- what the application may read --------------------------------------------------------
    @property
    def experiment(self) -> str:
        return self.agent.view.experiment

    @property
    def agent_id(self) -> str:
        return self.agent.agent_id

    @property
    def arms(self) -> list[str]:
        """The arms' names, by index."""
        return list(self.agent.view.arms)

    @property
    def remaining(self) -> list[int]:
        """The global set: the arms still in play, as far as this agent knows."""
        with self._lock:
            self._catch_up()
            return sorted(self.agent.view.remaining)

    @property
    def epoch(self) -> int:
        with self._lock:
            self._catch_up()
            return self.agent.view.epoch

    @property
    def status(self) -> str:
        """exploring, identified (one arm left), tied (several left, none can reach the
        threshold with the agents enrolled: the experiment has ended with them), or deleted."""
        with self._lock:
            self._catch_up()
            return "deleted" if self.gone else self.agent.view.status

    @property
    def best_arm(self) -> int | None:
        """The identified arm's index (None until then)."""
        remaining = self.remaining
        return remaining[0] if len(remaining) == 1 else None

    @property
    def done(self) -> bool:
        """The experiment ended (identified, tied or deleted): nothing more to learn. A tie
        reopens if more agents enroll: `status` then says exploring again."""
        return self.status != "exploring"

    @property
    def settled(self) -> bool:
        """Its local set holds one arm: it sends no more votes until the global set changes
        (wait_for_change), though it may keep playing that arm. CDE: its report is drawn (or an
        arm was accepted): it sends nothing more, and `choose` gives no arm until the answer."""
        with self._lock:
            return self.agent.local.done or self.agent.reported

    @property
    def reported(self) -> bool:
        """CDE: its one report is drawn (sent, or sent again at the next start)."""
        return self.agent.reported

    @property
    def votes_sent(self) -> int:
        """Votes this object decided and sent (not those sent again)."""
        return self.agent.votes_sent


class PrivateDeviceAgent(DeviceAgent):
    """A device in an LDP experiment (`algorithm: ldp`, docs/LDP.md), as DeviceAgent.enroll gives
    it: no local algorithm. `choose` draws one arm from the published allocation (the leader once
    identified); `observe` privatizes its reward into one bit and sends the report, while the
    device has reports left (B = reports_per_agent). The logic is agent/private_device.py's
    PrivateProtocol; this class reads the document and sends the reports through the client.

    The allocation moves at every publication, which the event stream does not announce: while
    the device may still report, `choose` reads the document first (If-None-Match: a 304 when
    nothing moved); afterwards only a change the follower sees (an arm out, the identification)
    makes it read it again. `done`: decided, or every report sent."""

    def __init__(
        self,
        client: CoordinatorClient,
        view: GlobalView,
        record: AgentRecord,
        state: StateFile | None,
        follower: GlobalSetFollower | None,
        resumed: bool,
        document: dict[str, Any],
        etag: str | None,
        uniform: Uniform,
    ) -> None:
        self.client, self.view, self.record = client, view, record
        self.state, self.follower, self.resumed = state, follower, resumed
        self.gone = False
        self.closed = False
        self._lock = threading.RLock()
        self.etag = etag
        self.uniform = uniform
        experiment, created_at = view.experiment, view.created_at

        def persist() -> None:
            if state is not None:
                state.save(experiment, created_at, record)

        self.protocol = PrivateProtocol(experiment, record, persist, document)
        self._transport = client_transport(client)

    # -- what the application calls -----------------------------------------------------------
    def choose(self) -> list[int]:
        """One arm, drawn from the allocation with the device's own randomness (the identified
        arm once there is one). ExperimentGone if the experiment was deleted."""
        with self._lock, self._gone_on_404():
            self._catch_up()
            if not (self.protocol.spent or self.protocol.decided):
                self._read()
            return [self.protocol.choose(self.uniform())]

    def observe(self, arms: Sequence[int], rewards: Sequence[float] | np.ndarray) -> list[int]:
        """The reward of the arm `choose` gave: privatized (one bit) and reported while the
        device has reports left; the arms reported now ([arm], or [] once spent or decided; a
        report an earlier call could not deliver is sent first, in its place). The reward never
        leaves; a reward the experiment does not take (outside [0, 1] without a
        declared range, not 0 or 1 under Bernoulli) is refused (ParameterError), nothing sent."""
        if len(arms) != 1 or len(rewards) != 1:
            raise ValueError("observe(arms, rewards): the one arm `choose` gave, and its reward")
        arm, reward = int(arms[0]), float(rewards[0])
        with self._lock, self._gone_on_404():
            self.protocol.check(arm, reward)
            report = self.protocol.decide(arm, reward, self.uniform(), self.uniform())
            pending = self.record.private_pending
            if pending is None:
                return []
            # a report still pending (its reply lost by an earlier call) goes again, unchanged,
            # instead of a new one
            kind = "decided" if report is not None else "pending"
            outcome = run(self.protocol.deliver(kind), self._transport)
            self._catch_up()
            return [pending[0]] if outcome in ("counted", "duplicate") else []

    @property
    def _token(self) -> str:
        return self.record.token

    def resend_pending(self) -> str | None:
        """After a restart: the report decided and not seen answered, sent again (the same arm,
        bit and number: a duplicate if it was counted). Its outcome; None if none was pending."""
        with self._lock, self._gone_on_404():
            return run(self.protocol.deliver("pending"), self._transport)

    def refresh(self) -> bool:
        """Read the experiment document now; True if it changed."""
        with self._lock:
            return self._read()

    # -- inside -------------------------------------------------------------------------------
    def _read(self) -> bool:
        """The document read again if it changed (If-None-Match); True if it did."""
        seq = next_seq()
        document, self.etag = self.client.experiment_if_changed(self.experiment, self.etag)
        if document is None:
            return False
        self.view.update(document, seq)
        if self.view.replaced:
            self.gone = True
            return False
        self.protocol.update(document)
        return True

    def _catch_up(self) -> None:
        """A change the follower saw (an arm out, the identification, the deletion): the
        document read again, for its allocation and estimates."""
        if self.closed:
            return
        change = self.follower.take() if self.follower is not None else None
        if change is not None and not self.gone:
            if change.state is None:
                self.gone = True
            else:
                try:
                    self._read()
                except CoordinatorError as exc:
                    if exc.status != 404:
                        raise
                    self.gone = True

    # -- what the application may read --------------------------------------------------------
    @property
    def experiment(self) -> str:
        return self.view.experiment

    @property
    def agent_id(self) -> str:
        return self.record.agent_id

    @property
    def arms(self) -> list[str]:
        return list(self.view.arms)

    @property
    def remaining(self) -> list[int]:
        with self._lock:
            self._catch_up()
            return sorted(self.protocol.remaining)

    @property
    def epoch(self) -> int:
        return self.view.epoch

    @property
    def status(self) -> str:
        """exploring, identified, or deleted (as far as this device read)."""
        with self._lock:
            self._catch_up()
            return "deleted" if self.gone else self.protocol.status

    @property
    def done(self) -> bool:
        """Nothing more to send: the experiment decided (or deleted), or every report sent."""
        with self._lock:
            self._catch_up()
            return self.gone or self.protocol.decided or self.protocol.spent

    @property
    def settled(self) -> bool:
        """Every report sent: `choose` still gives an arm to show, nothing more leaves."""
        return self.protocol.spent

    @property
    def reported(self) -> bool:
        """At least one report sent (or pending)."""
        return self.protocol.sent > 0 or self.record.private_pending is not None

    @property
    def votes_sent(self) -> int:
        return 0  # LDP sends reports, never votes

    @property
    def sent(self) -> int:
        """Reports this device sent and saw answered (counted or refused: each a release)."""
        return self.protocol.sent

    @property
    def reports_left(self) -> int:
        """Reports it may still send (B less those sent and the one pending)."""
        return self.protocol.reports_left

    @property
    def allocation(self) -> list[float]:
        """The allocation it draws from, as last read."""
        return list(self.protocol.allocation)

    @property
    def estimates(self) -> list[dict[str, Any]] | None:
        """Every arm's estimate (reports, mean, ci) as last read: what the experiment says."""
        with self._lock:
            self._catch_up()
            return self.protocol.estimates

    @property
    def lift(self) -> list[dict[str, Any]] | None:
        """The leader's lift over each other arm (mean, ci) as last read."""
        return self.protocol.lift
