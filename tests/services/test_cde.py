"""CDE in the services, over real HTTP and real Redis: an experiment created with `algorithm: cde`
chooses its threshold M from the agents expected; each agent sends ONE report (POST .../report,
lua/report.lua), the first arm M distinct agents reported is accepted and every other arm leaves at
once; a second report of an agent is a duplicate that changes nothing and gets the same reply
whatever the others did; votes and reports are refused where they do not belong; the documents
carry certified_failure (with the agents enrolled, at the threshold of the creation),
certified_epsilon (e0, for every prior) and hit_rate_uniform_prior; and hosted agents
(agent/host.py) reach the right answer on an easy instance, each reporting once, at the
activation its fixed budget ends."""

from __future__ import annotations

import asyncio
import io
import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from agent.device import DeviceAgent
from agent.host import AgentService
from agent.settings import AgentSettings
from common import cde
from common.algorithms import AlgorithmConfig
from common.certificate import certify, upper
from common.environments import Environment
from common.errors import ParameterError
from common.simulation import SimulationConfig
from common.subroutines.fixed_budget import samples_per_arm
from coordinator.app import InvalidDefaultExperiment, ensure_default_experiment
from coordinator.store import ExperimentState, Limits
from dexp.cli import app
from load_generator.generator import LoadGenerator, format_summary
from load_generator.settings import LoadSettings

from .helpers import (
    ADMIN_TOKEN,
    DEFAULT_EXPERIMENT,
    ENROLLMENT_SECRET,
    RedisState,
    admin_headers,
    bearer,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    open_store,
)
from .test_agent_experiments import running

# K = 3, eta = 0.1, P = 0.8, delta = 0.05: with N = 10 agents expected, M = 5 (common.cde)
ARMS = ["A", "B", "C"]
CDE = {"algorithm": "cde", "eta": 0.1, "delta": 0.05, "privacy": 0.8, "epsilon": 0.5}
CONFIG = AlgorithmConfig(algorithm="cde", eta=0.1, delta=0.05, privacy=0.8, epsilon=0.5)


def report(client: httpx.Client, experiment: str, token: str, arm: int) -> httpx.Response:
    return client.post(
        f"/v1/experiments/{experiment}/report", json={"arm": arm}, headers=bearer(token)
    )


def document(client: httpx.Client, experiment: str) -> dict[str, Any]:
    reply = client.get(f"/v1/experiments/{experiment}")
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def test_reports_accept_the_first_arm_at_the_threshold_and_the_others_leave(
    client: httpx.Client,
) -> None:
    created = create_experiment(client, id="c", arms=ARMS, agents=10, **CDE)
    assert created["threshold"] == CONFIG.threshold(3, 10) == 4
    assert created["expected_agents"] == 10
    assert created["reports"] == [0, 0, 0] and created["votes"] == [0, 0, 0]
    # e^e0 = P (K - 1) / (1 - P) = 8 for every prior; the hit rate named with its uniform prior
    assert created["certified_epsilon"] == cde.report_epsilon(0.8, 3) == pytest.approx(math.log(8))
    assert created["hit_rate_uniform_prior"] == cde.hit_rate_uniform_prior(0.8, 3)
    assert created["hit_rate_uniform_prior"] == pytest.approx(0.8)
    assert created["privacy_certificate"].startswith("e0 = 2.08: whatever it believed before")
    assert "e^e0 = 8 by its report" in created["privacy_certificate"]
    assert "certified_privacy" not in created
    # no agent yet: nothing below 1, and the warnings say what would certify delta
    assert created["certified_failure"] == 1.0
    assert created["certificate"].startswith("Nothing below 1 is certified")
    assert any("at least" in w and "would certify it" in w for w in created["warnings"])
    agents = enroll_agents(client, "c", 10)
    doc = document(client, "c")
    assert doc["certified_failure"] == certify(CONFIG, 3, 10, threshold=4).failure <= 0.05
    assert not [w for w in doc["warnings"] if w.startswith("certified failure")]

    replies = [
        report(client, "c", a.token, arm).json()
        for a, arm in zip(agents, [0, 0, 1, 0], strict=False)
    ]
    assert [r["outcome"] for r in replies] == ["counted"] * 4
    doc = document(client, "c")
    assert doc["reports"] == [3, 1, 0] and doc["remaining_arms"] == [0, 1, 2]
    assert doc["status"] == "exploring"
    accepted = report(client, "c", agents[4].token, 0).json()
    assert accepted == {"outcome": "accepted", "counted": True, "accepted": True}
    doc = document(client, "c")
    assert doc["remaining_arms"] == [0] and doc["status"] == "identified"
    assert doc["reports"] == [4, 1, 0] and doc["votes"] == [0, 0, 0]
    assert [(e["arm"], e["votes"], e["order"]) for e in doc["eliminations"]] == [
        (1, 1, 1),
        (2, 0, 2),
    ]
    best = client.get("/v1/experiments/c/best-arm").json()
    assert best["best_arm"] == {"index": 0, "name": "A"}
    assert best["reports"] == {"A": 4, "B": 1, "C": 0}
    for field in ("certified_epsilon", "hit_rate_uniform_prior", "privacy_certificate"):
        assert best[field] == doc[field]
    assert best["certified_failure"] == doc["certified_failure"]
    late = report(client, "c", agents[5].token, 2).json()  # a first report after the answer
    assert late == {"outcome": "decided", "counted": False, "accepted": False}
    assert document(client, "c")["reports"] == [4, 1, 0]
    assert (doc := document(client, "c"))["messages"] == 6 and doc["ignored_messages"] == 1


# The meta hash's fields that any message moves (counters, and the publication they trigger with
# DEXP_PUBLISH_BATCH = 1): a duplicate report moves these and nothing else.
MESSAGE_FIELDS = {
    "messages",
    "ignored",
    "epoch_messages",
    "p_messages",
    "p_ignored",
    "p_epoch_messages",
    "published",
    "published_at",
}


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, set[str]]:
    """Per key, what differs between two Redis snapshots (a hash: its fields)."""
    diff: dict[str, set[str]] = {}
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            diff[key] = {f for f in old.keys() | new.keys() if old.get(f) != new.get(f)}
        else:
            diff[key] = {"*"}
    return diff


def test_a_duplicate_changes_nothing_and_its_reply_ignores_the_others(
    client: httpx.Client, redis_state: RedisState
) -> None:
    create_experiment(client, id="dup", arms=ARMS, agents=10, **CDE)
    agents = enroll_agents(client, "dup", 6)
    first = report(client, "dup", agents[0].token, 1)
    assert first.json()["outcome"] == "counted"
    before = redis_state()
    again = report(client, "dup", agents[0].token, 2)  # another arm: still its one report
    assert again.status_code == 200
    assert again.json() == {"outcome": "duplicate", "counted": False, "accepted": False}
    moved = changed(before, redis_state())
    assert set(moved) == {"dexp:{dup}:meta", "dexp:{dup}:vote-rate"}  # its own rate limit
    assert moved["dexp:{dup}:meta"] <= MESSAGE_FIELDS
    assert document(client, "dup")["reports"] == [0, 1, 0]
    # the others report and arm 0 is accepted: the agent's repeated report gets the same reply
    for a in agents[1:]:
        report(client, "dup", a.token, 0)
    assert document(client, "dup")["remaining_arms"] == [0]
    before = redis_state()
    late = report(client, "dup", agents[0].token, 0)
    assert late.content == again.content
    moved = changed(before, redis_state())
    assert set(moved) <= {"dexp:{dup}:meta", "dexp:{dup}:vote-rate"}
    assert moved["dexp:{dup}:meta"] <= MESSAGE_FIELDS


def test_an_attackers_device_buys_one_report(client: httpx.Client) -> None:
    """The credentials of one device, replayed concurrently on every arm: one report counts."""
    create_experiment(client, id="one", arms=ARMS, agents=10, **CDE)
    (device,) = enroll_agents(client, "one", 1)
    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda i: report(client, "one", device.token, i % 3), range(48)))
    outcomes = [r.json()["outcome"] for r in replies]
    assert outcomes.count("counted") == 1 and outcomes.count("duplicate") == 47
    doc = document(client, "one")
    assert sum(doc["reports"]) == 1 and doc["messages"] == 48 and doc["ignored_messages"] == 47


def test_votes_and_reports_are_refused_where_they_do_not_belong(
    client: httpx.Client, redis_state: RedisState
) -> None:
    create_experiment(client, id="rep", arms=ARMS, agents=10, **CDE)
    create_experiment(client, id="vot", arms=ARMS, delta=0.2, eta=0.5)
    (reporter,) = enroll_agents(client, "rep", 1)
    (voter,) = enroll_agents(client, "vot", 1)
    before = redis_state()
    refusals = [
        # a vote in a CDE experiment, the plain way (the fast path) and not
        (client.post("/v1/experiments/rep/votes", json={"arm": 1}, headers=reporter.headers), 403),
        (
            client.post(
                "/v1/experiments/rep/votes",
                json={"arm": 1, "epoch": 0, "extra": 1},
                headers=reporter.headers,
            ),
            422,
        ),
        (
            client.post("/v1/experiments/rep/settled", json={"epoch": 0}, headers=reporter.headers),
            403,
        ),
        (
            client.post("/v1/experiments/rep/reset", json={"epoch": 0}, headers=reporter.headers),
            403,
        ),
        (client.post("/v1/experiments/rep/reset", headers=admin_headers()), 403),  # never reset
        (report(client, "vot", voter.token, 1), 403),  # a report in a voting experiment
        (report(client, "rep", voter.token, 1), 403),  # another experiment's agent
        (report(client, "rep", "rep-0000000000.forged", 1), 401),
        (report(client, "rep", reporter.token, 3), 422),  # no arm 3
        (report(client, "nowhere", reporter.token, 0), 404),
        (
            client.post("/v1/experiments/rep/report", json={"arm": 1.5}, headers=reporter.headers),
            422,
        ),
        (
            client.post(
                "/v1/experiments/rep/report", json={"arm": 1, "epoch": 0}, headers=reporter.headers
            ),
            422,
        ),
    ]
    for response, status in refusals:
        assert response.status_code == status, response.text
        assert response.json()["detail"], response.text
    details = [r.json()["detail"] for r, _ in refusals]
    assert "its agents do not vote, each sends one report" in details[0]
    assert "never reset" in details[4]
    assert "is not CDE: its agents vote" in details[5]
    assert redis_state() == before  # a refusal changes nothing


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"algorithm": "cde", "privacy": 1 / 3}, "privacy"),  # a uniform guess decides nothing
        ({"algorithm": "cde", "privacy": 1.0}, "privacy"),  # no randomization, no privacy
        ({"algorithm": "cde", "agents": 10_001}, "DEXP_MAX_AGENTS"),
        ({"algorithm": "cde", "agents": 0}, "agents"),
        ({"algorithm": "cde", "subroutine": "lucb"}, "fixed-budget"),
        ({"algorithm": "cde", "tolerance": 3, "agents": 3}, "agents"),  # N < f + 1
        ({"agents": 10}, "only CDE"),
        ({"privacy": 0.7}, "privacy"),
        ({"algorithm": "cde", "agents": 10, "rewards": "gaussian"}, "rewards"),
        ({"algorithm": "cde", "agents": 10, "rewards": "bernoulli", "sigma": 0.5}, "sigma"),
    ],
)
def test_a_bad_cde_creation_is_422_and_changes_nothing(
    client: httpx.Client, redis_state: RedisState, body: dict[str, Any], named: str
) -> None:
    before = redis_state()
    reply = client.post(
        "/v1/experiments", json={"id": "bad", "arms": ARMS, **body}, headers=admin_headers()
    )
    assert reply.status_code == 422, reply.text
    assert named in json.dumps(reply.json()["detail"])
    assert redis_state() == before


def test_the_threshold_comes_from_the_cap_and_the_certificate_from_the_agents_enrolled(
    client: httpx.Client,
) -> None:
    """Without `agents`, M is chosen for DEXP_MAX_AGENTS = 10,000; certified_failure is computed
    with the agents enrolled at that M, never grows as more enroll, and reaches the bound of the
    expected fleet long before it; a tolerance f is in the threshold and the sentence."""
    doc = create_experiment(client, id="cap", arms=ARMS, **CDE)
    threshold = doc["threshold"]
    assert threshold == CONFIG.threshold(3, 10_000) == 4 and doc["expected_agents"] == 10_000
    assert doc["certified_failure_at_max_agents"] == certify(CONFIG, 3, 10_000).failure
    bounds = []
    for count in (3, 3, 10, 20):  # 3 < M: nothing certified; then 6, 16 and 36 agents
        enroll_agents(client, "cap", count)
        doc = document(client, "cap")
        bounds.append(doc["certified_failure"])
        assert bounds[-1] == certify(CONFIG, 3, doc["agents"], threshold=threshold).failure
    assert bounds[0] == 1.0 > bounds[1] > bounds[2] == bounds[3]  # it never grows
    assert bounds[3] == certify(CONFIG, 3, 10_000).failure <= 0.05  # the fleet's bound
    tolerant = create_experiment(client, id="tol", arms=ARMS, agents=40, tolerance=2, **CDE)
    config = AlgorithmConfig(**tolerant["params"])
    assert tolerant["threshold"] == config.threshold(3, 40) == 7
    enroll_agents(client, "tol", 40)
    sentence = document(client, "tol")["certificate"]
    assert sentence.startswith("The answer is not epsilon-optimal with probability at most")
    assert "for any number of agents, even if 2 of the agents lie" in sentence


def test_reports_spent_without_an_answer_read_as_a_tie_that_more_agents_end(
    client: httpx.Client,
) -> None:
    """M = 3 (chosen for 7 agents) with 6 enrolled: two reports on each arm leave no arm that can
    reach 3 (status tied, and what is certified says nothing about the candidates); one more
    agent reopens it."""
    create_experiment(client, id="spent", arms=ARMS, agents=7, **CDE)
    agents = enroll_agents(client, "spent", 6)
    assert document(client, "spent")["threshold"] == 3
    for i, a in enumerate(agents):
        assert report(client, "spent", a.token, i % 3).json()["outcome"] == "counted"
    best = client.get("/v1/experiments/spent/best-arm").json()
    assert best["status"] == "tied"
    assert [c["index"] for c in best["candidates"]] == [0, 1, 2]
    assert best["certified"].startswith("No answer with these agents: an arm is accepted at 3")
    assert "6 of the 6 agents enrolled reported (at most 2 for one arm)" in best["certified"]
    listed = client.get("/v1/experiments").json()["experiments"]
    assert [e["status"] for e in listed if e["id"] == "spent"] == ["tied"]
    (extra,) = enroll_agents(client, "spent", 1)
    assert document(client, "spent")["status"] == "exploring"
    assert report(client, "spent", extra.token, 2).json()["outcome"] == "accepted"
    assert client.get("/v1/experiments/spent/best-arm").json()["best_arm"]["index"] == 2


# An easy instance: with eps = 0.5 only arm 0 is eps-optimal; each agent plays every arm T = 12
# times (common.subroutines.fixed_budget.samples_per_arm(0.5, 0.1, 3)), 36 activations.
MEANS = "0.9,0.3,0.1"
BUDGET = samples_per_arm(0.5, 0.1, 3, None) * 3


def test_hosted_agents_report_once_each_and_the_load_generator_reports_the_certificates(
    client: httpx.Client, coordinator_url: str, redis_url: str
) -> None:
    """Ten agents of one agent process, played by the load generator: the best arm is accepted,
    each agent reported at most once, at the activation that ended its budget, and the run's
    summary says what is certified (failure against delta, and privacy)."""
    create_experiment(client, id="hosted", arms=ARMS, agents=10, **CDE)
    settings = AgentSettings(
        coordinator_url=coordinator_url,
        redis_url=redis_url,
        experiment="hosted",
        AGENTS_PER_REPLICA=10,
        enrollment_secret=ENROLLMENT_SECRET,
        seed=5,
        poll_seconds=0.5,
        discover_seconds=0.2,
    )
    load = LoadSettings(
        coordinator_url=coordinator_url,
        redis_url=redis_url,
        experiment="hosted",
        problem="",
        means=MEANS,
        seed=1,
        settle_seconds=0,
        agent_wait_seconds=20,
        max_seconds=60,
        batch=100,
        max_backlog=4 * BUDGET,
        stall_seconds=20,
    )
    service = AgentService(settings)
    with running(service), LoadGenerator(load, out=io.StringIO()) as generator:
        summary = generator.run()
        hosted = list(service.discovery.hosted["hosted"].agents.values())
    assert summary.status == "identified" and summary.correct, summary
    doc = document(client, "hosted")
    reported = [a for a in hosted if a.reported]
    # one report each at most, sent at the activation that ended its budget, and nothing after;
    # those that reported before they learnt of the answer were told it was decided
    assert doc["messages"] == len(reported) <= 10
    assert all(a.reports_sent == 1 and a.votes_sent == 0 for a in reported)
    assert all(sum(a.local.sub.counts) == BUDGET for a in reported)
    outcomes = [a.record.report_outcome for a in reported]
    assert outcomes.count("accepted") == 1 and set(outcomes) <= {"counted", "accepted", "decided"}
    assert sum(doc["reports"]) == outcomes.count("counted") + 1 >= doc["threshold"]
    assert doc["ignored_messages"] == outcomes.count("decided")

    assert (summary.algorithm, summary.message_bound) == ("cde", 10)
    assert summary.epoch_votes == sum(doc["reports"])
    assert summary.certified_failure == doc["certified_failure"] <= 0.05
    assert summary.certified_epsilon == doc["certified_epsilon"]
    assert summary.hit_rate_uniform_prior == doc["hit_rate_uniform_prior"]
    lines = format_summary(summary, as_json=False).splitlines()
    assert lines[-2] == (
        f"certified failure at most {upper(doc['certified_failure'])} with 10 agents (within "
        f"delta = 0.05): {doc['certificate']}"
    )
    assert lines[-1] == f"certified epsilon {doc['privacy_certificate']}"
    assert lines[-1].startswith("certified epsilon e0 = 2.08: whatever it believed before")
    assert f"{summary.epoch_votes} reports counted" in "\n".join(lines)
    voting = format_summary(replace(summary, algorithm="de", certified_epsilon=None), False)
    assert voting.splitlines()[-1].startswith("certified failure at most")  # every algorithm's


def test_a_device_reports_at_the_end_of_its_budget_once_across_a_restart(
    client: httpx.Client, coordinator_url: str, tmp_path: Path
) -> None:
    """Its report leaves at its BUDGET-th activation whatever its rewards, and stays in its state
    file: a restarted device neither draws another nor sends it again; one whose report was drawn
    but never answered (a crash) sends that same report at its start."""
    create_experiment(client, id="dev", arms=ARMS, agents=10, **CDE)
    sent = []
    for rewards, name in ((np.ones(3), "ones"), (np.zeros(3), "zeros")):
        path = tmp_path / f"{name}.json"
        device = DeviceAgent.enroll(
            coordinator_url, "dev", ENROLLMENT_SECRET, path, seed=1, follow=False
        )
        activations = 0
        while not device.reported and activations < 2 * BUDGET:
            arms = device.choose()
            device.observe(arms, rewards[arms])
            activations += 1
        sent.append(activations)
        assert device.settled and device.choose() == []
        device.close()
        saved = json.loads(path.read_text())
        assert saved["report"][1] == "counted"
        again = DeviceAgent.enroll(coordinator_url, "dev", None, path, follow=False)
        assert again.resumed and again.reported and again.choose() == []
        again.close()
    assert sent == [BUDGET, BUDGET]
    assert document(client, "dev")["messages"] == 2
    # a crash after the draw and before the answer: the same report, sent at the next start
    saved["report"][1] = None
    path.write_text(json.dumps(saved))
    resumed = DeviceAgent.enroll(coordinator_url, "dev", None, path, follow=False)
    resumed.close()
    assert json.loads(path.read_text())["report"] == [saved["report"][0], "duplicate"]
    assert sum(document(client, "dev")["reports"]) == 2


def test_a_bernoulli_experiment_publishes_its_exact_t_and_its_devices_refuse_other_rewards(
    client: httpx.Client, coordinator_url: str, tmp_path: Path
) -> None:
    """rewards "bernoulli": the document says so and publishes T (pulls_per_arm), the same as
    common's samples_per_arm and the simulators' for Bernoulli arms, below the bounded experiment's
    (which publishes the sub-Gaussian T); a device refuses a reward of 0.5 with a ParameterError
    (a ValueError) saying why, records nothing, and reports after exactly T activations per arm."""
    created = create_experiment(client, id="bern", arms=ARMS, agents=10, rewards="bernoulli", **CDE)
    bounded = create_experiment(client, id="bounded", arms=ARMS, agents=10, **CDE)
    pulls = samples_per_arm(0.5, 0.1, 3, None, bernoulli=True)
    simulated = SimulationConfig(Environment((0.9, 0.2, 0.1)), CONFIG, n_agents=10)
    assert created["rewards"] == "bernoulli" and created["pulls_per_arm"] == pulls
    assert simulated.local_params().pulls == pulls and simulated.local_budget == 3 * pulls
    assert bounded["rewards"] == "bounded"
    assert bounded["pulls_per_arm"] == samples_per_arm(0.5, 0.1, 3, None) > pulls
    assert document(client, "bern")["pulls_per_arm"] == pulls
    device = DeviceAgent.enroll(
        coordinator_url, "bern", ENROLLMENT_SECRET, tmp_path / "d.json", seed=1, follow=False
    )
    assert device.agent.local.sub.budget == pulls  # type: ignore[attr-defined]
    with pytest.raises(ParameterError, match="declared Bernoulli: every reward must be 0 or 1"):
        device.observe(device.choose(), [0.5])
    assert int(device.agent.local.sub.counts.sum()) == 0  # nothing recorded
    rewards = np.array([1.0, 0.0, 0.0])
    activations = 0
    while not device.reported and activations < 10 * pulls:
        arms = device.choose()
        device.observe(arms, rewards[arms])
        activations += 1
    device.close()
    assert activations == 3 * pulls
    assert sum(document(client, "bern")["reports"]) == 1


def test_the_default_experiment_can_be_cde(clean_redis: str) -> None:
    """DEXP_ALGORITHM=cde, DEXP_PRIVACY and DEXP_AGENTS make the coordinator's startup experiment
    (the demo's way): its threshold chosen from DEXP_AGENTS, its privacy stored with it."""
    settings = coordinator_settings(clean_redis, arms="A,B,C", agents=10, **CDE)

    async def start() -> ExperimentState:
        async with open_store(clean_redis) as store:
            await ensure_default_experiment(store, settings)
            return await store.get(DEFAULT_EXPERIMENT)

    design = asyncio.run(start()).design
    assert design.threshold == 4 and design.expected_agents == 10
    assert design.params["algorithm"] == "cde" and design.params["privacy"] == 0.8
    with pytest.raises(InvalidDefaultExperiment, match="only CDE"):
        asyncio.run(ensure_default_experiment(None, coordinator_settings(clean_redis, agents=10)))  # type: ignore[arg-type]


def test_dexp_experiments_creates_and_shows_a_cde_experiment(
    client: httpx.Client, coordinator_url: str
) -> None:
    """`dexp experiments create --algorithm cde --privacy --agents` and `show`: the threshold with
    the agents it was chosen for, the reports per arm, certified epsilon beside certified
    failure."""
    env = {"DEXP_COORDINATOR_URL": coordinator_url, "DEXP_ADMIN_TOKEN": ADMIN_TOKEN}
    options = ["--algorithm", "cde", "--privacy", "0.8", "--agents", "10", "--eta", "0.1"]
    created = CliRunner().invoke(
        app,
        ["experiments", "create", "cli", "--arms", "A,B,C", "--epsilon", "0.5", *options],
        env=env,
    )
    assert created.exit_code == 0, created.stderr
    agents = enroll_agents(client, "cli", 10)
    for agent, arm in zip(agents, (0, 1, 0), strict=False):
        assert report(client, "cli", agent.token, arm).status_code == 200
    shown = CliRunner().invoke(app, ["experiments", "show", "cli"], env=env)
    assert shown.exit_code == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "threshold 4 reports accept an arm, one per agent; chosen for 10 agents" in text
    assert "agents 10 (3 counted reports)" in text
    assert "reports for each arm (threshold 4)" in text and "2/4" in text
    failure = certify(CONFIG, 3, 10, threshold=4).failure
    assert (
        f"certified failure at most {upper(failure)} with 10 agents (within delta = 0.05)" in text
    )
    # e0 first (for every prior), the hit rate with its prior named after it
    assert "certified epsilon e0 = 2.08: whatever it believed before, any adversary's odds" in text
    assert "Hit rate under a uniform prior over which arm is best: at most 0.8" in text


def test_dexp_experiments_creates_a_bernoulli_experiment(
    client: httpx.Client, coordinator_url: str
) -> None:
    """`dexp experiments create --rewards bernoulli` declares the family; `show` says it and T."""
    env = {"DEXP_COORDINATOR_URL": coordinator_url, "DEXP_ADMIN_TOKEN": ADMIN_TOKEN}
    options = ["--algorithm", "cde", "--agents", "10", "--eta", "0.1", "--epsilon", "0.5"]
    created = CliRunner().invoke(
        app,
        ["experiments", "create", "bcli", "--arms", "A,B,C", "--rewards", "bernoulli", *options],
        env=env,
    )
    assert created.exit_code == 0, created.stderr
    pulls = samples_per_arm(0.5, 0.1, 3, None, bernoulli=True)
    assert document(client, "bcli")["pulls_per_arm"] == pulls
    shown = CliRunner().invoke(app, ["experiments", "show", "bcli"], env=env)
    assert f"rewards 0 or 1 T={pulls} pulls per arm" in " ".join(shown.stdout.split())
    wrong = CliRunner().invoke(
        app, ["experiments", "create", "x", "--arms", "A,B", "--rewards", "gaussian"], env=env
    )
    assert wrong.exit_code == 2 and "one of bounded, bernoulli" in wrong.stderr


def test_reports_and_the_acceptance_are_published_in_batches(clean_redis: str) -> None:
    """DEXP_PUBLISH_BATCH = 4 and a cadence of an hour: what anyone reads shows the reports four
    at a time, and an acceptance that does not fall on a batch only at the cadence's tick (never
    here), as votes and eliminations are; the admin's live view has it at once."""
    limits = Limits(publish_batch=4, publish_cadence_seconds=3600)

    async def run() -> list[tuple[list[int], list[int], str]]:
        async with open_store(clean_redis) as store:
            store.limits = limits
            await store.create("batch", ARMS, CONFIG, agents=10)
            tokens = [(await store.enroll("batch")).token for _ in range(6)]
            seen = []
            for token, arm in zip(tokens, (0, 0, 1, 0, 0, 0), strict=True):
                await store.report("batch", token, arm)
                public = await store.get_with_status("batch")
                seen.append((public.reports, public.remaining_arms, public.status))
            live = await store.get_with_status("batch", voters=True)
            seen.append((live.reports, live.remaining_arms, live.status))
            return seen

    before, batch = ([0, 0, 0], [0, 1, 2], "exploring"), ([3, 1, 0], [0, 1, 2], "exploring")
    assert asyncio.run(run()) == [
        *[before] * 3,
        *[batch] * 3,  # the fourth message made a publication; the fifth was the acceptance
        ([4, 1, 0], [0], "identified"),  # the admin's live view
    ]
