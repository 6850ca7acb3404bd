"""Ties, settled messages, refusals of what cannot finish, warnings and stalls, over real HTTP
(httpx -> uvicorn -> FastAPI -> real Redis) and with the real load generator.

A tie: several arms left and none can reach the threshold any more with the agents enrolled
(common.votes.is_tied). The coordinator answers `tied` exactly then, with the remaining arms as
candidates and what the guarantee certifies about them; the load generator stops on it.
"""

from __future__ import annotations

import io
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import redis

from agent.library import Agent as LibraryAgent
from agent.library import GlobalView
from clients.coordinator import CoordinatorClient
from common import redis_keys as keys
from common.votes import GlobalState, tie_certificate
from load_generator.__main__ import main as load_generator_main
from load_generator.generator import LoadGenerator, exit_code, format_summary
from load_generator.settings import LoadSettings

from .helpers import (
    ENROLLMENT_SECRET,
    Agent,
    RedisState,
    ThreadedCoordinator,
    admin_headers,
    bearer,
    ce_config_for_threshold,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
)

ARMS = ["A", "B", "C"]
M3 = {"delta": 0.2, "eta": 0.5}  # DE: log(0.2) / log(0.5) = 2.32 -> M = 3


def detail(response: httpx.Response) -> str:
    return str(response.json()["detail"])


def vote(client: httpx.Client, exp: str, agent: Agent, arm: int, epoch: int = 0) -> dict[str, Any]:
    response = client.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=agent.headers
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def settle(client: httpx.Client, exp: str, agent: Agent, epoch: int = 0) -> dict[str, Any]:
    response = client.post(
        f"/v1/experiments/{exp}/settled", json={"epoch": epoch}, headers=agent.headers
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def best_arm(client: httpx.Client, exp: str) -> dict[str, Any]:
    response = client.get(f"/v1/experiments/{exp}/best-arm")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def ce_body(threshold: int, n_arms: int = 3, xi: float = 0.05) -> dict[str, Any]:
    config = ce_config_for_threshold(threshold, n_arms, xi)
    return {"algorithm": "ce", "xi": config.xi, "eta": config.eta, "delta": config.delta}


# -- the tied status ---------------------------------------------------------------------------
def test_a_tie_ends_the_experiment_and_an_enrollment_can_reopen_it(client: httpx.Client) -> None:
    create_experiment(client, id="tie", arms=ARMS, **M3)
    a, b, c, d = enroll_agents(client, "tie", 4)  # 4 < 2 M - 1 = 5
    for agent in (a, b, c):
        vote(client, "tie", agent, 2)
    assert vote(client, "tie", d, 2)["outcome"] == "arm_out"
    vote(client, "tie", a, 0)
    vote(client, "tie", b, 0)
    vote(client, "tie", c, 1)
    assert best_arm(client, "tie")["status"] == "exploring"  # d can still vote against 0
    vote(client, "tie", d, 1)  # now each agent kept one of A, B: 2 votes each, 3 needed
    body = best_arm(client, "tie")
    candidates = [{"index": 0, "name": "A"}, {"index": 1, "name": "B"}]
    assert body["status"] == "tied"
    assert body["best_arm"] is None
    assert body["candidates"] == candidates == body["remaining_arms"]
    # p = (pi^2 / 24) eta for SER3; P(Bin(4, p) >= 3), in place of the old union C(4, 3) 0.2
    p = math.pi**2 / 24 * 0.5
    assert body["certified_failure"] == pytest.approx(4 * p**3 * (1 - p) + p**4, rel=1e-7)
    assert body["certified"] == tie_certificate(3, 4, body["certified_failure"])
    assert body["certified"].startswith(
        "the best arm is among the candidates unless M = 3 agents voted it out by error "
        "(probability at most 0.0295 with the N = 4 agents enrolled)"
    )
    assert client.get("/v1/experiments/tie").json()["status"] == "tied"
    listed = client.get("/v1/experiments").json()["experiments"]
    assert [(e["id"], e["status"]) for e in listed] == [("tie", "tied")]
    suspects = client.get("/v1/experiments/tie/suspects", headers=admin_headers()).json()
    assert suspects["status"] == "tied"

    (e,) = enroll_agents(client, "tie", 1)  # one more voter: A or B can reach 3 again
    body = best_arm(client, "tie")
    assert (body["status"], body["candidates"], body["certified"]) == ("exploring", [], None)
    vote(client, "tie", e, 0)
    body = best_arm(client, "tie")
    assert body["status"] == "identified"
    assert body["best_arm"] == {"index": 1, "name": "B"}
    assert body["candidates"] == []


def test_polling_a_tie_reads_the_voter_sets_once_per_change(
    client: httpx.Client, clean_redis: str
) -> None:
    """The load generator polls best-arm every 0.2 s: the verdict is kept per coordinator process
    under the experiment's counters, so polls of an unchanged state read no voter set."""
    create_experiment(client, id="poll", arms=ARMS, **M3)
    a, b, c, d = enroll_agents(client, "poll", 4)
    for agent, arm in ((a, 2), (b, 2), (c, 2), (a, 0), (b, 0), (c, 1), (d, 1)):
        vote(client, "poll", agent, arm)
    stats = redis.Redis.from_url(clean_redis)

    def smembers_calls() -> int:
        return int(stats.info("commandstats").get("cmdstat_smembers", {}).get("calls", 0))

    try:
        assert best_arm(client, "poll")["status"] == "tied"
        before = smembers_calls()
        for _ in range(20):
            assert best_arm(client, "poll")["status"] == "tied"
        assert smembers_calls() == before  # a public read reads no set at all
        enroll_agents(client, "poll", 1)  # a change: read once more, then known again
        assert best_arm(client, "poll")["status"] == "exploring"
        assert smembers_calls() > before  # the voter sets, once
        before = smembers_calls()
        for _ in range(5):
            assert best_arm(client, "poll")["status"] == "exploring"
        assert smembers_calls() == before
    finally:
        stats.close()


def test_with_a_tolerance_the_certificate_holds_while_at_most_f_agents_lie(
    client: httpx.Client,
) -> None:
    create_experiment(client, id="tol", arms=["A", "B"], tolerance=1, **M3)  # threshold 3 + 1
    a, b, c, d = enroll_agents(client, "tol", 4)
    for agent, arm in ((a, 0), (b, 0), (c, 1), (d, 1)):
        vote(client, "tol", agent, arm)
    body = best_arm(client, "tol")
    assert body["status"] == "tied"
    # at most f = 1 liar: 3 of the 3 other agents must err, P(Bin(3, p) >= 3) = p^3
    assert body["certified_failure"] == pytest.approx((math.pi**2 / 24 * 0.5) ** 3, rel=1e-7)
    assert body["certified"] == tie_certificate(3, 4, body["certified_failure"], tolerance=1)
    assert body["certified"].startswith("while at most f = 1 agents lie, the best arm is among")


def agent_like_steps(rng: np.random.Generator, n_arms: int, n_agents: int, ce: bool) -> list[Any]:
    """Steps shaped like agents that split between arms 0 and 1: each votes against the others
    (under CE some votes are dropped, then it says it settled). The last agent enrolls late."""
    scripts: list[list[Any]] = []
    for agent in range(n_agents):
        kept = int(rng.integers(2))
        others = [int(a) for a in rng.permutation(n_arms) if a != kept]
        steps: list[Any] = [("vote", agent, arm) for arm in others if not ce or rng.random() > 0.2]
        scripts.append([*steps, ("settle", agent, None)] if ce else steps)
    scripts[-1].insert(0, ("enroll", n_agents - 1, None))
    sequence: list[Any] = []
    while any(scripts):
        agent = int(rng.choice([i for i, s in enumerate(scripts) if s]))
        sequence.append(scripts[agent].pop(0))
    return sequence


@pytest.mark.parametrize(("algorithm", "seed"), [("de", 3), ("de", 9), ("ce", 1), ("ce", 6)])
def test_tied_appears_exactly_when_is_tied_holds(
    client: httpx.Client, algorithm: str, seed: int
) -> None:
    """After every vote, settled message and enrollment, the coordinator's status is the one
    common.votes gives for the same messages (tied exactly when is_tied holds)."""
    rng = np.random.default_rng(seed)
    threshold, n_arms, n_agents = 3, 3, 4  # the last one enrolls late
    params = ce_body(threshold, n_arms) if algorithm == "ce" else M3
    create_experiment(client, id="prop", arms=[f"v{i}" for i in range(n_arms)], **params)
    agents = enroll_agents(client, "prop", n_agents - 1)
    reference = GlobalState(n_arms=n_arms, threshold=threshold)
    seen = []
    for kind, agent, arm in agent_like_steps(rng, n_arms, n_agents, algorithm == "ce"):
        if kind == "vote":
            vote(client, "prop", agents[agent], arm)
            reference.vote(agents[agent].agent_id, arm)
        elif kind == "settle":
            settle(client, "prop", agents[agent])
            reference.settle(agents[agent].agent_id)
        else:
            agents += enroll_agents(client, "prop", 1)
        body = best_arm(client, "prop")
        if len(reference.remaining) == 1:
            expected = "identified"
        else:
            expected = "tied" if reference.tied(len(agents)) else "exploring"
        assert body["status"] == expected, (kind, agent, arm)
        if expected == "tied":
            assert [c["index"] for c in body["candidates"]] == sorted(reference.remaining)
        seen.append(expected)
    assert "exploring" in seen and "tied" in seen  # the seeds are chosen so


# -- settled messages --------------------------------------------------------------------------
@pytest.fixture
def ce_experiment(client: httpx.Client) -> tuple[list[Agent], Agent]:
    """A CE experiment "ce" (threshold 3, 3 arms) with 4 agents, and an agent of a DE one."""
    create_experiment(client, id="ce", arms=ARMS, **ce_body(3))
    create_experiment(client, id="de", arms=ARMS, **M3)
    agents = enroll_agents(client, "ce", 4)
    (outsider,) = enroll_agents(client, "de", 1)
    return agents, outsider


@pytest.mark.parametrize(
    ("case", "status", "named"),
    [
        ("no token", 401, "bearer"),
        ("garbage token", 401, "token"),
        ("another experiment's agent", 403, "not enrolled"),
        ("a DE experiment", 403, "not CE"),
        ("unknown experiment", 404, "nope"),
        ("no epoch", 422, "epoch"),
        ("negative epoch", 422, "epoch"),
        ("epoch as a string", 422, "epoch"),
        ("an arm", 422, "arm"),
    ],
)
def test_refused_settled_messages_change_nothing(
    client: httpx.Client,
    redis_state: RedisState,
    ce_experiment: tuple[list[Agent], Agent],
    case: str,
    status: int,
    named: str,
) -> None:
    agents, outsider = ce_experiment
    exp, headers, body = "ce", agents[0].headers, {"epoch": 0}
    if case == "no token":
        headers = {}
    elif case == "garbage token":
        headers = bearer(f"{agents[0].agent_id}.wrong")
    elif case == "another experiment's agent":
        headers = outsider.headers
    elif case == "a DE experiment":
        exp, headers = "de", outsider.headers
    elif case == "unknown experiment":
        exp = "nope"
    else:
        body = {
            "no epoch": {},
            "negative epoch": {"epoch": -1},
            "epoch as a string": {"epoch": "0"},
            "an arm": {"epoch": 0, "arm": 1},
        }[case]
    before = redis_state()
    response = client.post(f"/v1/experiments/{exp}/settled", json=body, headers=headers)
    assert response.status_code == status, response.text
    assert named in detail(response)
    assert redis_state() == before


def test_settled_messages_count_once_per_epoch_and_an_elimination_clears_the_others(
    client: httpx.Client, ce_experiment: tuple[list[Agent], Agent], clean_redis: str
) -> None:
    (a, b, c, d), _ = ce_experiment
    store = redis.Redis.from_url(clean_redis, decode_responses=True)
    try:
        vote(client, "ce", a, 2)
        first = settle(client, "ce", a)
        assert first == {
            "settled": True,
            "outcome": "settled",
            "remaining_arms": [0, 1, 2],
            "version": 0,
            "epoch": 0,
        }
        assert settle(client, "ce", a)["settled"] is False  # the flag is already there
        settle(client, "ce", b)  # b did not vote against arm 2: it may hold it
        assert store.smembers(keys.settled("ce")) == {a.agent_id, b.agent_id}
        state = client.get("/v1/experiments/ce").json()
        assert (state["settled_agents"], state["messages"], state["ignored_messages"]) == (2, 4, 0)
        vote(client, "ce", c, 2)
        assert vote(client, "ce", d, 2)["eliminated"] is True
        assert store.smembers(keys.settled("ce")) == {a.agent_id}  # a voted against 2: kept
        client.post("/v1/experiments/ce/reset", headers=admin_headers())
        assert store.smembers(keys.settled("ce")) == set()
        stale = settle(client, "ce", a, epoch=0)
        assert (stale["settled"], stale["outcome"], stale["epoch"]) == (False, "stale_epoch", 1)
        assert store.smembers(keys.settled("ce")) == set()
        state = client.get("/v1/experiments/ce").json()
        assert (state["messages"], state["ignored_messages"]) == (7, 1)
        assert settle(client, "ce", a, epoch=1)["settled"] is True
    finally:
        store.close()


def test_a_ce_tie_needs_the_settled_messages(
    client: httpx.Client, ce_experiment: tuple[list[Agent], Agent]
) -> None:
    """Under CE the votes alone do not show that an agent settled (its other votes may have been
    dropped): the tie appears once the agents say so."""
    (a, b, c, d), _ = ce_experiment
    for agent in (a, b, c):
        vote(client, "ce", agent, 2)  # d's vote against arm 2 was dropped
    vote(client, "ce", a, 0)
    vote(client, "ce", b, 0)
    vote(client, "ce", c, 1)  # d's vote against arm 0 or 1 was dropped too
    assert best_arm(client, "ce")["status"] == "exploring"
    settle(client, "ce", d)
    body = best_arm(client, "ce")
    assert body["status"] == "tied"
    assert [c["index"] for c in body["candidates"]] == [0, 1]


def test_a_ce_agent_says_it_settled_and_says_it_again_when_the_coordinator_forgot(
    client: httpx.Client, coordinator_url: str
) -> None:
    """agent.library under CE: once its local set holds one arm the agent sends one settled
    message; an arm it is not counted against leaves (its vote was dropped), the coordinator
    forgets the flag, and the agent sends it again; an arm it voted against leaves: it does not."""
    create_experiment(client, id="lib", arms=ARMS, **ce_body(3, xi=0.25))
    h1, h2, h3 = enroll_agents(client, "lib", 3)

    def settled_agents() -> int:
        return int(client.get("/v1/experiments/lib").json()["settled_agents"])

    http = CoordinatorClient(coordinator_url)
    try:
        view = GlobalView.fetch(http, "lib")
        agent = LibraryAgent.enroll(http, view, ENROLLMENT_SECRET, np.random.default_rng(0))
        rewards = np.array([1.0, 1.0, 0.0])
        while arms := agent.choose():
            agent.observe(arms, rewards[arms])
        assert agent.local.local_arms == [0]
        assert agent.local.voted == {1, 2}
        assert [v.arm for v in agent.record.acknowledged] == [2]  # the vote against 1 dropped
        assert (agent.settled_sent, settled_agents()) == (1, 1)
        agent.choose()
        assert agent.settled_sent == 1  # once per settle

        for helper in (h1, h2, h3):
            vote(client, "lib", helper, 1)
        assert settled_agents() == 0  # arm 1 left and the agent is not counted against it
        view.refresh(http)
        agent.choose()
        assert (agent.settled_sent, settled_agents()) == (2, 1)

        vote(client, "lib", h1, 2)
        assert vote(client, "lib", h2, 2)["eliminated"] is True
        assert settled_agents() == 1  # it voted against arm 2: the flag stays
        view.refresh(http)
        agent.choose()
        assert agent.settled_sent == 2
        assert best_arm(client, "lib")["best_arm"] == {"index": 0, "name": "A"}
    finally:
        http.close()


# -- refusing what cannot finish, and warnings -------------------------------------------------
def test_epsilon_above_1_is_refused_for_rewards_in_0_1_only(
    client: httpx.Client, redis_state: RedisState
) -> None:
    before = redis_state()
    response = client.post(
        "/v1/experiments",
        json={"id": "wide", "arms": ARMS, "epsilon": 1.5},
        headers=admin_headers(),
    )
    assert response.status_code == 422
    assert detail(response) == (
        "epsilon=1.5 is invalid: must be in (0, 1] for rewards in [0, 1] (every arm is within 1)"
    )
    assert redis_state() == before
    create_experiment(client, id="wide", arms=ARMS, epsilon=1.5, sigma=2.0)
    create_experiment(client, id="one", arms=ARMS, epsilon=1.0)


def test_ce_that_the_agent_cap_cannot_finish_is_refused(
    clean_redis: str, redis_state: RedisState
) -> None:
    """CE, 10 arms, xi=0.1: M = 11; a cap of 12 agents gives 12 x 0.9 = 10.8 expected votes."""
    settings = coordinator_settings(clean_redis, max_agents=12, experiment="")
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client,
    ):
        arms = [f"v{i}" for i in range(10)]
        before = redis_state()
        response = client.post(
            "/v1/experiments",
            json={"id": "ce", "arms": arms, "algorithm": "ce", "xi": 0.1},
            headers=admin_headers(),
        )
        assert response.status_code == 422
        assert detail(response) == (
            "xi=0.1 is invalid: CE drops each vote with probability xi, so at most "
            "DEXP_MAX_AGENTS x (1 - xi) = 12 x 0.9 = 10.8 votes against an arm arrive in "
            "expectation, below the threshold 11: no arm could leave in expectation"
        )
        assert redis_state() == before
        assert create_experiment(client, id="ce", arms=ARMS, **ce_body(3))["threshold"] == 3


def test_warnings_name_ties_ce_shortfalls_and_dser4_resets(client: httpx.Client) -> None:
    create_experiment(client, id="w", arms=ARMS, **M3)
    assert client.get("/v1/experiments/w").json()["warnings"] == [
        "0 agent(s) enrolled but an arm needs 3 distinct voters: no arm can be eliminated until "
        "enough agents enroll"
    ]
    enroll_agents(client, "w", 3)
    assert client.get("/v1/experiments/w").json()["warnings"] == [
        "3 agents < 2 x threshold - 1 = 5: arms within epsilon of each other can split the "
        "agents and end the experiment tied (several arms kept). To rule it out, enroll at "
        "least 5 agents, or create the experiment with a threshold of at most 2 (a lower eta or "
        "a higher delta: M = ceil(log delta / log eta))"
    ]
    enroll_agents(client, "w", 2)
    assert client.get("/v1/experiments/w").json()["warnings"] == []

    create_experiment(client, id="wce", arms=ARMS, **ce_body(3))
    enroll_agents(client, "wce", 3)
    warnings = client.get("/v1/experiments/wce").json()["warnings"]
    assert len(warnings) == 2 and "tied" in warnings[0]
    assert warnings[1] == (
        "3 agents x (1 - xi) = 2.85 < threshold 3: CE drops each vote with probability xi=0.05, "
        "so fewer than 3 votes against an arm arrive in expectation and the experiment cannot "
        "finish in expectation: enroll at least 4 agents"
    )

    create_experiment(client, id="w4", arms=ARMS, subroutine="ser4", phi=0.001, **M3)
    enroll_agents(client, "w4", 5)
    assert client.get("/v1/experiments/w4").json()["warnings"] == [
        "DSER4 (phi=0.001): each activation resets the whole experiment with probability phi, "
        "so about 1/phi = 1,000 activations pass between resets on average, and each reset "
        "clears every vote: a run that needs more activations than that rarely finishes"
    ]


# -- the load generator: too few agents for CE, and stalls -------------------------------------
@pytest.fixture
def generator_env(
    monkeypatch: pytest.MonkeyPatch, coordinator_url: str, clean_redis: str
) -> dict[str, str]:
    env = {
        "DEXP_COORDINATOR_URL": coordinator_url,
        "DEXP_REDIS_URL": clean_redis,
        "DEXP_PROBLEM": "",
        "DEXP_MEANS": "0.7,0.5,0.3",
        "DEXP_SEED": "1",
        "DEXP_SETTLE_SECONDS": "0",
        "DEXP_AGENT_WAIT_SECONDS": "0.3",
        "DEXP_MAX_SECONDS": "30",
        "DEXP_MAX_BACKLOG": "600",
        "DEXP_BATCH": "100",
        "DEXP_STALL_SECONDS": "1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def test_the_load_generator_exits_3_when_ce_cannot_finish_in_expectation(
    client: httpx.Client,
    generator_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_experiment(client, id="few", arms=ARMS, **ce_body(3))
    enroll_agents(client, "few", 3)  # 3 >= M, but 3 x 0.95 < 3
    monkeypatch.setenv("DEXP_EXPERIMENT", "few")
    assert load_generator_main([]) == 3
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (
        "error: experiment 'few' has 3 agent(s) and CE drops each vote with probability "
        "xi=0.05: 3 x (1 - xi) = 2.85 votes against an arm in expectation, below M=3, so it "
        "cannot end in expectation: run at least 4 agents"
    )


@pytest.fixture
def readers(clean_redis: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Starts fake agents on streams: one that reads (never acknowledging), one that read once
    and stopped. Yields a function taking the experiment and those two agent ids. The reading one
    reads every 0.2 s, and at the moment a load generator looks who reads (its Redis view of the
    streams, LoadGenerator._stream_readers): its last read is then fresh by any stall limit,
    where a thread's 0.2 s against a 1 s limit would bet on a loaded machine's scheduling."""
    stop = threading.Event()
    threads: list[threading.Thread] = []
    reads: list[Any] = []
    real_stream_readers = LoadGenerator._stream_readers

    def stream_readers(self: LoadGenerator, streams: list[str]) -> list[dict[str, Any]]:
        for read in reads:
            read()
        return real_stream_readers(self, streams)

    monkeypatch.setattr(LoadGenerator, "_stream_readers", stream_readers)

    def start(exp: str, reading: Agent, stopped: Agent) -> None:
        client = redis.Redis.from_url(clean_redis)  # the groups: made by enrollment
        group, consumer = keys.ACTIVATION_GROUP, "agent"
        # The stopped one reads (and acknowledges) one entry now, then nothing more.
        gone = stopped.stream(exp)
        client.xadd(gone, {"t": 0})
        ((_, [(entry, _)]),) = client.xreadgroup(group, consumer, {gone: ">"}, count=1)
        client.xack(gone, group, entry)  # the load generator deletes it (it only reads)

        def read() -> None:
            client.xreadgroup(group, consumer, {reading.stream(exp): ">"}, count=5)

        def keep_reading() -> None:
            while not stop.wait(0.2):
                read()

        reads.append(read)
        thread = threading.Thread(target=keep_reading, daemon=True)
        thread.start()
        threads.append(thread)

    yield start
    stop.set()
    for thread in threads:
        thread.join(timeout=5)


def test_a_stalled_run_says_what_it_sees_and_exits_5(
    client: httpx.Client,
    generator_env: dict[str, str],
    readers: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Three agents enrolled: one reads its stream but never acknowledges, one read once and
    stopped (its process gone), one is hosted by no process. Nothing is consumed: the load
    generator stops after DEXP_STALL_SECONDS and says so (exit 5), instead of running to its
    deadline (DEXP_MAX_SECONDS, exit 1)."""
    create_experiment(client, id="stall", arms=ARMS, **M3)
    reading, stopped, never = enroll_agents(client, "stall", 3)
    readers("stall", reading, stopped)
    # The stopped one's last read is older than the stall limit at the end: it came before the
    # run, which stalls DEXP_STALL_SECONDS (1 s) at least; this is margin for Redis's whole ms.
    time.sleep(0.2)
    monkeypatch.setenv("DEXP_EXPERIMENT", "stall")
    assert load_generator_main([]) == 5
    out = capsys.readouterr().out.splitlines()[1:-1]  # within the summary's rules
    assert out[0] == "experiment        stall: stalled"
    stall = out[out.index(next(line for line in out if line.startswith("stalled:"))) :]
    assert stall[0].startswith("stalled: no activation consumed for ")
    assert stall[0].endswith("s (DEXP_STALL_SECONDS=1) while 600 are pending")
    assert stall[1].startswith(
        "agents: 3 enrolled; of the 3 this run feeds, 1 read their stream (or have nothing to "
        "read), 1 have entries they have not read for "
    )
    assert stall[1].endswith(
        "s (their agent process is gone or stuck), 1 never read theirs (no agent process hosts "
        "them)"
    )
    assert stall[2].startswith("backlog per agent (largest 3 of 3): ")
    assert f"{never.agent_id} " in stall[2] and "read, not acknowledged" in stall[2]
    assert stall[3] == f"coordinator: {generator_env['DEXP_COORDINATOR_URL']} answers (ready)"


def test_a_run_whose_coordinator_stops_answering_ends_stalled(clean_redis: str) -> None:
    """The coordinator goes away mid-run (once the run delivered activations: it plays): after
    DEXP_UNREACHABLE_SECONDS of retries the run ends stalled, says so, and asks nothing more of
    the coordinator through its retrying client (no second wait): the request that gave up is
    the last one."""
    server = ThreadedCoordinator(coordinator_settings(clean_redis, experiment="")).start()
    raw = redis.Redis.from_url(clean_redis)
    try:
        with httpx.Client(base_url=server.url, timeout=10.0, trust_env=False) as client:
            create_experiment(client, id="gone", arms=ARMS, **M3)
            agents = enroll_agents(client, "gone", 3)
        streams = [a.stream("gone") for a in agents]
        load = LoadSettings(
            coordinator_url=server.url,
            redis_url=clean_redis,
            experiment="gone",
            problem="",
            means="0.7,0.5,0.3",
            settle_seconds=0,
            max_backlog=300,
            unreachable_seconds=1,
            stall_seconds=60,
        )

        played: list[bool] = []

        def stop_once_playing() -> None:
            deadline = time.monotonic() + 30  # a safety net
            while not any(raw.xlen(stream) for stream in streams):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            else:
                played.append(True)
            server.stop()

        with LoadGenerator(load, out=io.StringIO()) as generator:
            answered: list[bool] = []  # per request through the retrying client: answered?
            real_request = generator.client.request

            def request(method: str, path: str, *args: Any, **kwargs: Any) -> Any:
                try:
                    reply = real_request(method, path, *args, **kwargs)
                except ConnectionError:
                    answered.append(False)
                    raise
                answered.append(True)
                return reply

            generator.client.request = request  # type: ignore[method-assign]
            stopper = threading.Thread(target=stop_once_playing)
            stopper.start()
            try:
                summary = generator.run()
            finally:
                stopper.join()
    finally:
        raw.close()
        server.stop()
    assert played, "the run delivered no activation in 30 s"
    assert summary.status == "stalled" and exit_code(summary) == 5
    assert summary.stall[0].startswith(
        "stalled: the coordinator did not answer for 1 s (DEXP_UNREACHABLE_SECONDS): "
    )
    assert summary.stall[1].startswith(f"coordinator: {server.url} does not answer (")
    assert answered[-1] is False and answered.count(False) == 1, answered
    assert "stalled" in format_summary(summary, as_json=False)


# -- settled messages and the publication (issue 36, items 5 and 6) ------------------------------
TIE_WAIT_SECONDS = 30.0  # a safety net: the tie shows at the first tick (1 s) after the message


def test_every_coordinator_sees_a_ce_tie_within_the_cadence(clean_redis: str) -> None:
    """Item 5: the tie verdict is kept per process under the published counters, and a settled
    message published nothing: a coordinator that had answered "exploring" kept answering it
    (30 of 30 reads over 30 s) while another one on the same Redis answered "tied". A newly
    settled agent is now published at the cadence's next tick, which moves those counters."""
    settings = coordinator_settings(
        clean_redis, publish_batch=3, publish_cadence_seconds=1, experiment=""
    )
    with (
        coordinator(settings) as first,
        coordinator(settings) as second,
        httpx.Client(base_url=first.url, timeout=10, trust_env=False) as one,
        httpx.Client(base_url=second.url, timeout=10, trust_env=False) as other,
    ):
        create_experiment(one, id="ce2", arms=["A", "B"], **ce_body(3, n_arms=2))
        a, b, c, d = enroll_agents(one, "ce2", 4)
        for agent, arm in ((a, 0), (b, 0), (c, 1)):  # a batch of 3: published
            vote(one, "ce2", agent, arm)
        assert one.get("/v1/experiments/ce2").json()["votes"] == [2, 1]
        assert best_arm(one, "ce2")["status"] == "exploring"  # d may still vote against A
        settle(other, "ce2", d)  # d's votes were dropped: nobody can bring A or B to 3
        assert best_arm(other, "ce2")["status"] == "tied"  # decided from the live voter sets
        deadline = time.monotonic() + TIE_WAIT_SECONDS
        reads = []
        while time.monotonic() < deadline:
            reads.append(best_arm(one, "ce2")["status"])
            if reads[-1] == "tied":
                break
            time.sleep(0.05)
        assert reads[-1] == "tied", f"{len(reads)} reads, all {set(reads)}"


def test_a_settled_reply_shows_the_published_global_set(clean_redis: str) -> None:
    """Item 6: the reply to a settled message showed the live global set and version, so that an
    agent learned of an elimination before its publication, even with a message that changes
    nothing (a second one, or one of another epoch). It shows the published ones now."""
    settings = coordinator_settings(
        clean_redis, publish_batch=10, publish_cadence_seconds=3600, experiment=""
    )
    with (
        coordinator(settings) as server,
        httpx.Client(base_url=server.url, timeout=10, trust_env=False) as client,
    ):
        create_experiment(client, id="ce3", arms=ARMS, **ce_body(3))
        a, b, c, d = enroll_agents(client, "ce3", 4)
        for agent in (a, b, c):
            vote(client, "ce3", agent, 2)  # arm 2 leaves: published at the next tick, an hour on
        with redis.Redis.from_url(clean_redis, decode_responses=True) as store:
            assert store.smembers(keys.remaining("ce3")) == {"0", "1"}  # live: arm 2 left
        published = {"remaining_arms": [0, 1, 2], "version": 0, "epoch": 0}
        replies = [settle(client, "ce3", d), settle(client, "ce3", d), settle(client, "ce3", d, 3)]
        assert [r["outcome"] for r in replies] == ["settled", "settled", "stale_epoch"]
        for reply in replies:
            assert {k: reply[k] for k in published} == published, reply
        assert client.get("/v1/experiments/ce3").json()["remaining_arms"] == [0, 1, 2]
