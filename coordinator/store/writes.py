"""The writes of an experiment: its creation and deletion, and the scripts that apply the agents'
messages (votes, CDE reports, LDP's private reports, settled messages) and resets, one atomic
round trip each (an LDP report whose batch is published: one more, its decision)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import Any

from common import redis_keys as keys
from common.algorithms import AlgorithmConfig
from common.errors import ParameterError
from common.params import BOUNDED_REWARDS, check_reward_family
from common.votes import ReportOutcome, VoteOutcome
from coordinator.errors import Conflict, CoordinatorError, Forbidden, Invalid, NotFound, RateLimited
from coordinator.store.core import (
    SERVICE_ALGORITHMS,
    CrowdReport,
    ReportResult,
    ResetOutcome,
    SettleResult,
    StoreCore,
    VoteResult,
    agent_of,
    digest,
    now_ms,
    text,
    too_late,
)
from coordinator.store.decisions import Decisions
from coordinator.store.departures import stream_names
from coordinator.store.reads import ExperimentReads
from coordinator.store.state import ExperimentState

# A vote where agents report (CDE, LDP), or a report where they do not: refused (403), nothing
# changed.
WRONG_MESSAGE = {
    "not_voting": "experiment {exp!r} is CDE: its agents do not vote, each sends one report "
    "(POST /v1/experiments/{exp}/report)",
    "not_reporting": "experiment {exp!r} is not CDE: its agents vote (POST "
    "/v1/experiments/{exp}/votes); reports are CDE's one message per agent",
    "crowd": "experiment {exp!r} is LDP: its devices neither vote nor send CDE's report, they "
    "send private reports (POST /v1/experiments/{exp}/reports)",
    "not_crowd": "experiment {exp!r} is not LDP: private reports (POST .../reports) are LDP's; "
    "its agents vote (POST /v1/experiments/{exp}/votes) or, under CDE, send one report (POST "
    "/v1/experiments/{exp}/report)",
}
# An LDP report refused for its number or the experiment's state (409), nothing changed.
CROWD_CONFLICT = {
    "decided": "experiment {exp!r} is decided: no report counts any more",
    "spent": "reports spent: agent {agent} sent its {budget} report(s), the most one device "
    "may send (reports_per_agent)",
    "out_of_order": "report seq={seq} is out of order: agent {agent} sent {sent} report(s) that "
    "counted, so its next one is seq={next}",
}
DELETE_CHUNK = 1000  # activation streams per DEL when an experiment is deleted

Refusal = Callable[[str, str], Awaitable[CoordinatorError]]


class ScriptWrites:
    """Creation, deletion, and the agents' messages and resets (lua/*.lua through the scripts'
    table). `refusal` says why a token was refused (Enrollments.refusal)."""

    def __init__(self, core: StoreCore, reads: ExperimentReads, refusal: Refusal) -> None:
        self.core = core
        self.redis = core.redis
        self.reads = reads
        self.refusal = refusal
        self.decisions: Decisions = reads.decisions

    async def create(
        self,
        exp: str,
        arms: list[str],
        config: AlgorithmConfig,
        sigma: float | None = None,
        agents: int | None = None,
        rewards: str = BOUNDED_REWARDS,
    ) -> ExperimentState:
        """`agents`: CDE's expected fleet N, from which its threshold is chosen (required for
        CDE, refused for the others). `rewards`: bounded or bernoulli (with sigma None). CDE's T,
        computed here once (a search of up to a few seconds for a tiny eps, in a thread), is
        stored with the experiment: the agents play the T it was created with."""
        if config.algorithm not in SERVICE_ALGORITHMS:
            raise Invalid(
                f"algorithm={config.algorithm!r} is invalid: the services run "
                f"{', '.join(SERVICE_ALGORITHMS)}"
            )
        if (agents is not None) != config.reports:
            raise Invalid(
                "agents: CDE chooses its threshold from the agents expected, and only CDE does"
            )
        try:  # CDE's is a search: off the event loop (the API's check already cached it)
            threshold = await asyncio.to_thread(config.threshold, len(arms), agents)
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        if config.algorithm == "dp-mase" and sigma is not None:
            raise Invalid("sigma: DP-MASE needs rewards in [0, 1]")
        if config.crowd and sigma is not None:
            raise Invalid("sigma: LDP needs rewards in [0, 1] (each report privatizes one)")
        try:
            bernoulli = check_reward_family(rewards, sigma)
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        document: dict[str, Any] = {"arms": arms, "params": asdict(config), "sigma": sigma}
        if bernoulli:
            document["rewards"] = rewards
        if agents is not None:
            document["expected_agents"] = agents
        if config.reports:
            document["pulls_per_arm"] = await asyncio.to_thread(
                config.pulls_per_arm, len(arms), sigma, bernoulli
            )
        created = await self.core.scripts.create(
            meta_key=keys.meta(exp),
            remaining_key=keys.remaining(exp),
            eliminations_key=keys.eliminations(exp),
            config=json.dumps(document),
            threshold=int(threshold or 0),
            n_arms=len(arms),
            created_at=now_ms(),
            changes_channel=keys.changes(exp),
            algorithm=config.algorithm,
        )
        if not created:
            raise Conflict(f"experiment {exp!r} already exists")
        self.core.on_change(exp)
        await self.redis.zadd(keys.EXPERIMENT_INDEX, {exp: 0})
        return await self.reads.get_with_status(exp)

    async def delete(self, exp: str) -> None:
        """Delete the experiment: its keys (one slot) at once, with the read of its agents, then
        its agents' activation streams, then its entry in the index. The streams are named from
        the agents and their stream secrets, read with them (each agent's stream, and the names
        older versions gave it: departures.stream_names): on a cluster they live in other slots,
        on other nodes, and a read of the agents in the same transaction as the deletion misses
        no agent (an enrollment after it finds no experiment)."""
        n_arms = int((await self.core.meta(exp))["n_arms"])
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrange(keys.agents(exp), 0, -1)
            pipe.hgetall(keys.stream_secrets(exp))
            pipe.delete(*experiment_keys(exp, n_arms))
            members, found, _ = await pipe.execute()
        secrets = {text(a): s for a, s in found.items()}
        streams = stream_names(exp, {text(a): secrets.get(text(a)) for a in members})
        self.core.on_change(exp)
        await self.redis.publish(keys.changes(exp), "d")  # the event streams end
        for start in range(0, len(streams), DELETE_CHUNK):
            # On a cluster redis-py splits a DEL per slot: one per shard of the chunk.
            await self.redis.delete(*streams[start : start + DELETE_CHUNK])
        await self.redis.zrem(keys.EXPERIMENT_INDEX, exp)

    async def vote(
        self, exp: str, token: str, arm: int, epoch: int, epoch_started_at: int | None = None
    ) -> VoteResult:
        """Apply the vote of the agent whose bearer token is `token`: one round trip to Redis.
        `epoch_started_at` (if given) must be the epoch's start too: else stale_epoch."""
        reply = await self.core.scripts.vote(
            **self._message_inputs(exp, token, arm),
            deadline_ms=await self.core.deadline_ms(),
            voters_key=keys.voters(exp, arm),
            settled_key=keys.settled(exp),
            agent_epoch=epoch,
            agent_epoch_started_at="" if epoch_started_at is None else epoch_started_at,
        )
        outcome = text(reply[0])
        await self._refuse(outcome, reply, exp, token, arm, "votes too fast: at most {} votes")
        self.core.on_change(exp)  # a message: at least its counters moved
        result = VoteResult(
            VoteOutcome(outcome) if outcome in VoteOutcome._value2member_map_ else outcome,
            int(reply[1]),
            int(reply[2]),
            int(reply[3]),
        )
        if result.eliminated:
            await self.redis.publish(keys.events(exp), result.version)
        return result

    async def report(self, exp: str, token: str, arm: int) -> ReportResult:
        """Apply the CDE report of the agent whose bearer token is `token`: one round trip to
        Redis (lua/report.lua). Its first report counts; any later one is a duplicate."""
        reply = await self.core.scripts.report(
            **self._message_inputs(exp, token, arm),
            deadline_ms=await self.core.deadline_ms(),
            reporters_key=keys.reporters(exp),
            report_counts_key=keys.report_counts(exp),
        )
        outcome = text(reply[0])
        await self._refuse(
            outcome, reply, exp, token, arm, "sends too fast: at most {} votes and reports"
        )
        self.core.on_change(exp)
        result = ReportResult(ReportOutcome(outcome))
        if result.accepted:
            await self.redis.publish(keys.events(exp), int(reply[1]))
        return result

    async def crowd_report(self, exp: str, token: str, arm: int, bit: int, seq: int) -> CrowdReport:
        """Apply the LDP report number `seq` of the agent whose bearer token is `token`: one round
        trip to Redis (lua/ldp_report.lua), and, when its batch was published, the decision on
        that publication (Decisions.apply). Refusals (4xx) change nothing."""
        reply = await self.core.scripts.ldp_report(
            **self._message_inputs(exp, token, arm),
            deadline_ms=await self.core.deadline_ms(),
            report_counts_key=keys.report_counts(exp),
            report_ones_key=keys.report_ones(exp),
            report_seq_key=keys.report_seq(exp),
            bit=bit,
            seq=seq,
        )
        outcome = text(reply[0])
        await self._refuse(
            outcome, reply, exp, token, arm, "sends too fast: at most {} votes and reports"
        )
        if outcome == "bad_bit":
            raise Invalid(f"bit={bit} is invalid: a report's bit is 0 or 1")
        if outcome == "bad_seq":
            raise Invalid(f"seq={seq} is invalid: reports are numbered from 1")
        if outcome in CROWD_CONFLICT:
            sent, budget = int(reply[1]), int(reply[2])
            raise Conflict(
                CROWD_CONFLICT[outcome].format(
                    exp=exp, agent=agent_of(token), budget=budget, seq=seq, sent=sent, next=sent + 1
                )
            )
        result = CrowdReport(outcome, int(reply[1]), int(reply[2]), bool(int(reply[3])))
        if result.counted:
            self.core.on_change(exp)
        if result.published:
            await self.decisions.apply(exp)
        return result

    def _message_inputs(self, exp: str, token: str, arm: int) -> dict[str, Any]:
        """The inputs an agent's message shares across its scripts (vote.lua, report.lua,
        ldp_report.lua): who
        sends it (checked against the token's digest), its arm, its rate limit and the
        publication's batch and cadence."""
        core = self.core
        return {
            "meta_key": keys.meta(exp),
            "remaining_key": keys.remaining(exp),
            "eliminations_key": keys.eliminations(exp),
            "credentials_key": keys.credentials(exp),
            "vote_rate_key": keys.vote_rate(exp),
            "agent_id": agent_of(token),
            "arm_index": arm,
            "now_ms": now_ms(),
            "token_digest": digest(token),
            "vote_rate": core.vote_rate,
            "vote_burst": core.limits.vote_burst,
            "changes_channel": keys.changes(exp),
            "publish_batch": core.publish_batch,
            "publish_cadence_ms": core.publish_cadence_ms,
        }

    async def _refuse(
        self, outcome: str, reply: Sequence[Any], exp: str, token: str, arm: int, fast: str
    ) -> None:
        """Raise the refusal a vote's or a report's script answered (it changed nothing), if it
        did: `fast` says what a rate-limited agent does, its `{}` the rate."""
        if outcome == "expired":
            raise too_late()
        if outcome == "no_experiment":
            raise NotFound(f"experiment {exp!r} does not exist")
        if outcome == "unauthorized":
            raise await self.refusal(token, exp)
        if outcome in WRONG_MESSAGE:
            raise Forbidden(WRONG_MESSAGE[outcome].format(exp=exp))
        if outcome == "bad_arm":
            raise Invalid(f"arm={arm} is invalid: must be in [0, {int(reply[1]) - 1}]")
        if outcome == "rate_limited":
            wait = int(reply[1]) / 1000
            limits = self.core.limits
            raise RateLimited(
                f"agent {agent_of(token)} {fast.format(f'{limits.vote_rate:g}')} per second "
                f"(burst {limits.vote_burst}); retry in {wait:.2f} s",
                wait,
            )

    async def settle(self, exp: str, token: str, epoch: int) -> SettleResult:
        """Apply the "settled" message of the agent whose bearer token is `token` (CE): one round
        trip to Redis (lua/settled.lua). A message of another epoch is counted and ignored. The
        reply's version and global set are the published ones; a newly settled agent is published
        at the cadence's next tick (it may make the experiment tied)."""
        core = self.core
        agent = agent_of(token)
        reply = await core.scripts.settled(
            meta_key=keys.meta(exp),
            settled_key=keys.settled(exp),
            remaining_key=keys.remaining(exp),
            credentials_key=keys.credentials(exp),
            vote_rate_key=keys.vote_rate(exp),
            eliminations_key=keys.eliminations(exp),
            agent_id=agent,
            agent_epoch=epoch,
            token_digest=digest(token),
            vote_rate=core.vote_rate,
            vote_burst=core.limits.vote_burst,
            changes_channel=keys.changes(exp),
            now_ms=now_ms(),
            publish_batch=core.publish_batch,
            publish_cadence_ms=core.publish_cadence_ms,
            deadline_ms=await core.deadline_ms(),
        )
        outcome = text(reply[0])
        if outcome == "expired":
            raise too_late()
        if outcome == "no_experiment":
            raise NotFound(f"experiment {exp!r} does not exist")
        if outcome == "unauthorized":
            raise await self.refusal(token, exp)
        if outcome == "not_ce":
            raise Forbidden(
                f"experiment {exp!r} is not CE: settled messages are for CE, which drops votes; "
                "under the other algorithms every vote is sent and an agent's settling shows in them"
            )
        if outcome == "rate_limited":
            wait = int(reply[1]) / 1000
            limits = core.limits
            raise RateLimited(
                f"agent {agent} sends too fast: at most {limits.vote_rate:g} votes and settled "
                f"messages per second (burst {limits.vote_burst}); retry in {wait:.2f} s",
                wait,
            )
        core.on_change(exp)
        return SettleResult(
            outcome,
            bool(int(reply[3])),
            int(reply[1]),
            int(reply[2]),
            sorted(int(text(a)) for a in reply[4]),
        )

    async def reset(
        self, exp: str, epoch: int | None, agent: str = "", quorum: int = 1
    ) -> ResetOutcome:
        """A new epoch. By an agent (DSER4): only if still in `epoch`, rate-limited per agent and
        per experiment (RateLimited), and with a tolerance f (`quorum` f + 1) only once f + 1
        distinct agents asked within DEXP_RESET_QUORUM_SECONDS (else `pending`); by the admin
        (`agent` ''): unconditional, unlimited."""
        n_arms = int((await self.core.meta(exp))["n_arms"])
        limits = self.core.limits
        reply = await self.core.scripts.reset(
            meta_key=keys.meta(exp),
            remaining_key=keys.remaining(exp),
            eliminations_key=keys.eliminations(exp),
            reset_rate_key=keys.reset_rate(exp),
            resets_key=keys.resets(exp),
            settled_key=keys.settled(exp),
            reset_requests_key=keys.reset_requests(exp),
            voters_keys=[keys.voters(exp, arm) for arm in range(n_arms)],
            caller_epoch="" if epoch is None else epoch,
            agent_id=agent,
            agent_reset_rate=repr(float(limits.reset_rate)),
            agent_reset_burst=limits.reset_burst,
            experiment_reset_rate=repr(float(limits.experiment_reset_rate)),
            experiment_reset_burst=limits.experiment_reset_burst,
            changes_channel=keys.changes(exp),
            quorum=quorum,
            quorum_window_ms=int(limits.reset_quorum_seconds * 1000),
            deadline_ms=await self.core.deadline_ms(),
        )
        code = int(reply[0])
        if code == -5:
            raise too_late()
        if code == -1:
            raise NotFound(f"experiment {exp!r} does not exist")
        if code == -3:
            raise Forbidden(
                f"experiment {exp!r} is CDE, which is never reset: each agent reports once per "
                "experiment, and a new epoch would let it report again (two reports are only "
                "2 e0-private, not e0: its certified epsilon); delete it and create a new one"
            )
        if code == -4:
            raise Forbidden(
                f"experiment {exp!r} is LDP, which is never reset: its decisions are final (an "
                "arm that left never returns), and each device's reports_per_agent reports are "
                "its whole privacy budget; delete it and create a new one"
            )
        if code == -2:
            wait = int(reply[1]) / 1000
            raise RateLimited(
                f"resets too fast: at most {limits.reset_rate:g} per second per agent (burst "
                f"{limits.reset_burst}) and {limits.experiment_reset_rate:g} per second per "
                f"experiment (burst {limits.experiment_reset_burst}); retry in {wait:.2f} s",
                wait,
            )
        if code == 1:
            self.core.on_change(exp)
            await self.redis.publish(keys.events(exp), int(reply[1]))
        return ResetOutcome(code == 1, int(reply[1]), int(reply[2]), code == 2, int(reply[3]))


def experiment_keys(exp: str, n_arms: int) -> list[str]:
    """Every key of the experiment, all in its hash slot (the streams are not: see delete)."""
    return [
        keys.meta(exp),
        keys.remaining(exp),
        keys.eliminations(exp),
        keys.agents(exp),
        keys.agent_seq(exp),
        keys.credentials(exp),  # every agent's token stops working with the experiment
        keys.stream_secrets(exp),
        keys.vote_rate(exp),
        keys.enroll_rate(exp),
        keys.enrollers(exp),
        keys.simulated(exp),
        keys.leases(exp),
        keys.tickets(exp),
        keys.reset_rate(exp),
        keys.resets(exp),
        keys.settled(exp),
        keys.load_generator(exp),
        keys.reporters(exp),
        keys.report_counts(exp),
        keys.report_ones(exp),
        keys.report_seq(exp),
        keys.webhooks(exp),  # the secrets go with the experiment
        keys.webhook_deliveries(exp),
        *[keys.voters(exp, arm) for arm in range(n_arms)],
    ]
