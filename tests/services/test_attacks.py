"""The attacks of the trust-boundary review, replayed against a real coordinator and a real Redis.

Each test plays what an attacker did (as measured before the fix) and asserts that it now fails
with a 4xx or a 503 and that nothing changed in Redis. The edge attacks (a 100 MB body, spoofed
X-Forwarded-For, slow clients) are replayed in test_edges.py against the real server process.

| attack (before) | now |
|---|---|
| 29 identities from the shared enrollment secret eliminate the best arm in 58 requests | the secret is refused in production; one ticket enrolls one agent |
| anyone reads voter sets, vote vectors and suspects | aggregates only; the rest needs the admin token |
| one DSER4 agent resets the experiment 800 times a second | 429 beyond DEXP_RESET_RATE; the admin sees its resets |
| votes during a Redis outage get `500 text/plain` | JSON 503 with Retry-After, on the fast path too |
| arm names with NUL, newlines, right-to-left overrides; "A" and "A " both accepted | 422 |
| a threshold M + f above the agent cap accepted with a warning | 422 |
| GET /v1/experiments unpaged: 766 KB for 21 experiments | paged summaries |
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from common import redis_keys as keys

from .helpers import (
    ADMIN_TOKEN,
    ENROLLMENT_SECRET,
    Agent,
    RedisState,
    admin_headers,
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    redis_server,
    snapshot,
)

ARMS = ["A", "B", "C"]
PROBLEM_1 = [chr(ord("A") + k) for k in range(10)]  # `demo`'s arms: M = 29 with the defaults
STRONG_ADMIN = "Hq7Zt-2mWx9KpV4cNb8LsR3e"  # random, as production needs


def detail(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return str(response.json()["detail"])


def tickets(client: httpx.Client, exp: str, count: int, **body: Any) -> list[str]:
    response = client.post(
        f"/v1/experiments/{exp}/tickets",
        json={"count": count, **body},
        headers=bearer(STRONG_ADMIN),
    )
    assert response.status_code == 201, response.text
    assert response.json()["experiment"] == exp
    issued: list[str] = response.json()["tickets"]
    assert len(issued) == count == len(set(issued))
    return issued


def enroll(client: httpx.Client, credential: str, exp: str) -> httpx.Response:
    return client.post("/v1/agents", json={"experiment": exp}, headers=bearer(credential))


@pytest.fixture(scope="module")
def production_server(redis_url: str) -> Iterator[str]:
    """A production-mode coordinator: strong secrets, open enrollment off (its default there)."""
    settings = coordinator_settings(
        redis_url,
        environment="production",
        admin_token=STRONG_ADMIN,
        enrollment_secret="Ue5Yk-8rTa2QnM7wXc4JvB9d",
        experiment="",
        max_agents=500,
    )
    assert not settings.open_enrollment_enabled
    with coordinator(settings) as server:
        yield server.url


@pytest.fixture
def production(production_server: str, clean_redis: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=production_server, timeout=10.0, trust_env=False) as http:
        yield http


def create(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/experiments", json=body, headers=bearer(STRONG_ADMIN))
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


# -- Sybil: one credential, one voter ----------------------------------------------------------
def test_the_shared_enrollment_secret_enrolls_nobody_in_production(
    production: httpx.Client, redis_state: RedisState
) -> None:
    """Before: 29 identities from the secret every device holds removed `demo`'s best arm."""
    create(production, id="demo", arms=PROBLEM_1)
    before = redis_state()
    for _ in range(29):
        refused = enroll(production, "a-strong-enrollment-secret-0123456789", "demo")
        assert refused.status_code == 401, refused.text
        assert "open enrollment is off" in detail(refused)
    assert redis_state() == before
    assert production.get("/v1/experiments/demo").json()["agents"] == 0


def test_one_ticket_buys_one_voter_and_nothing_more(
    production: httpx.Client, redis_state: RedisState
) -> None:
    """An attacker holding a device's ticket replays it 29 times: one agent, 28 refusals, and its
    one vote against the best arm stays one vote of the M = 29 an elimination needs."""
    state = create(production, id="demo", arms=PROBLEM_1)
    assert state["threshold"] == 29
    (ticket,) = tickets(production, "demo", 1)
    first = enroll(production, ticket, "demo")
    assert first.status_code == 201, first.text
    agent = Agent(first.json()["agent_id"], first.json()["token"], first.json()["index"])
    before = redis_state()
    for _ in range(28):
        again = enroll(production, ticket, "demo")
        assert again.status_code == 401 and "unknown, already used or expired" in detail(again)
    assert redis_state() == before
    for _ in range(3):  # its vote counts once, however often it is sent
        production.post(
            "/v1/experiments/demo/votes", json={"arm": 0, "epoch": 0}, headers=agent.headers
        )
    after = production.get("/v1/experiments/demo").json()
    assert (after["agents"], after["votes"][0], after["remaining_arms"]) == (1, 1, list(range(10)))


def test_used_expired_and_foreign_tickets_get_401_and_change_nothing(
    production: httpx.Client, redis_state: RedisState
) -> None:
    create(production, id="t1", arms=ARMS)
    create(production, id="t2", arms=ARMS)
    used, foreign_here = tickets(production, "t1", 2)
    (short,) = tickets(production, "t1", 1, ttl_seconds=1)
    assert enroll(production, used, "t1").status_code == 201
    time.sleep(1.1)  # `short` expires
    forged = used[:-4] + "AAAA"
    before = redis_state()
    cases = {
        "used": (used, "t1", "unknown, already used or expired"),
        "expired": (short, "t1", "unknown, already used or expired"),
        "another experiment's": (foreign_here, "t2", "not a ticket of experiment 't2'"),
        "forged": (forged, "t1", "unknown, already used or expired"),
        "an agent token": (enroll_agent_token(production, "t2"), "t2", "neither a ticket"),
    }
    before = redis_state()
    for case, (credential, exp, says) in cases.items():
        response = enroll(production, credential, exp)
        assert response.status_code == 401, (case, response.text)
        assert says in detail(response), case
        assert response.headers["www-authenticate"] == "Bearer"
    assert redis_state() == before
    # the unused one still works where it belongs, once
    assert enroll(production, foreign_here, "t1").status_code == 201


def enroll_agent_token(client: httpx.Client, exp: str) -> str:
    (ticket,) = tickets(client, exp, 1)
    response = enroll(client, ticket, exp)
    assert response.status_code == 201
    token: str = response.json()["token"]
    return token


def test_tickets_are_admin_only_stored_as_digests_and_bounded(
    production: httpx.Client, redis_state: RedisState
) -> None:
    create(production, id="tk", arms=ARMS)
    before = redis_state()
    for headers in ({}, bearer("x" * 30), bearer("a-strong-enrollment-secret-0123456789")):
        response = production.post("/v1/experiments/tk/tickets", json={"count": 5}, headers=headers)
        assert response.status_code == 401, response.text
    for body in ({"count": 0}, {"count": 10_001}, {"count": 1, "ttl_seconds": 0}, {"count": "1"}):
        response = production.post(
            "/v1/experiments/tk/tickets", json=body, headers=bearer(STRONG_ADMIN)
        )
        assert response.status_code == 422, (body, response.text)
    missing = production.post(
        "/v1/experiments/nope/tickets", json={"count": 1}, headers=bearer(STRONG_ADMIN)
    )
    assert missing.status_code == 404
    assert redis_state() == before
    issued = tickets(production, "tk", 3)
    stored = redis_state()[keys.tickets("tk")]
    assert len(stored) == 3
    assert not [t for t in issued if t in str(stored)]  # digests only


def test_enrollment_stops_at_the_agent_cap_even_with_tickets(
    production: httpx.Client, redis_state: RedisState
) -> None:
    create(production, id="full", arms=ARMS, delta=0.2, eta=0.5)
    issued = tickets(production, "full", 501)
    for ticket in issued[:500]:
        assert enroll(production, ticket, "full").status_code == 201
    before = redis_state()
    refused = enroll(production, issued[500], "full")
    assert refused.status_code == 403 and "maximum of 500 agents" in detail(refused)
    assert redis_state() == before  # the ticket is not used up by a refusal


# -- votes are the coordinator's to see -----------------------------------------------------------
def test_an_anonymous_reader_sees_aggregates_only(
    client: httpx.Client, redis_state: RedisState
) -> None:
    """Before: GET /v1/experiments, GET /v1/experiments/{id} and .../suspects named every voter."""
    create_experiment(client, id="pv", arms=ARMS, delta=0.2, eta=0.5)  # M = 3
    agents = enroll_agents(client, "pv", 4)
    for agent, arm in zip(agents, [1, 1, 1, 2], strict=True):
        response = client.post(
            "/v1/experiments/pv/votes", json={"arm": arm, "epoch": 0}, headers=agent.headers
        )
        assert response.status_code == 200
    before = redis_state()
    public = {
        path: client.get(path)
        for path in (
            "/v1/experiments",
            "/v1/experiments/pv",
            "/v1/experiments/pv/best-arm",
            "/metrics",
        )
    }
    for path, response in public.items():
        assert response.status_code == 200, (path, response.text)
        for agent in agents:
            assert agent.agent_id not in response.text, path
            assert agent.token not in response.text, path
    state = public["/v1/experiments/pv"].json()
    assert state["votes"] == [0, 3, 1] and state["remaining_arms"] == [0, 2]
    assert [(e["arm"], e["votes"], e["order"]) for e in state["eliminations"]] == [(1, 3, 1)]
    assert "voters" not in state
    for path in ("voters", "suspects", "agents"):
        for headers in ({}, bearer(ENROLLMENT_SECRET), agents[0].headers):
            refused = client.get(f"/v1/experiments/pv/{path}", headers=headers)
            assert refused.status_code == 401, (path, refused.text)
        allowed = client.get(f"/v1/experiments/pv/{path}", headers=admin_headers())
        assert allowed.status_code == 200, allowed.text
    assert redis_state() == before
    by_agent = client.get("/v1/experiments/pv/voters", headers=admin_headers()).json()["by_agent"]
    assert by_agent == {a.agent_id: [arm] for a, arm in zip(agents, [1, 1, 1, 2], strict=True)}


def test_an_agent_reads_its_own_votes_and_nobody_elses(client: httpx.Client) -> None:
    create_experiment(client, id="me", arms=ARMS)
    a, b = enroll_agents(client, "me", 2)
    client.post("/v1/experiments/me/votes", json={"arm": 2, "epoch": 0}, headers=a.headers)
    mine = client.get("/v1/agents/me", headers=a.headers)
    assert mine.status_code == 200, mine.text
    started = client.get("/v1/experiments/me").json()["epoch_started_at"]
    assert mine.json() == {
        "agent_id": a.agent_id,
        "experiment": "me",
        "index": 1,
        "epoch": 0,
        "epoch_started_at": started,  # public too: the experiment's state says it
        "version": 0,
        "voted_against": [2],
    }
    assert client.get("/v1/agents/me", headers=b.headers).json()["voted_against"] == []
    for headers in ({}, admin_headers(), bearer(a.agent_id + ".forged"), bearer(ENROLLMENT_SECRET)):
        assert client.get("/v1/agents/me", headers=headers).status_code == 401


# -- resets -------------------------------------------------------------------------------------
def test_with_a_tolerance_one_dser4_agent_cannot_reset_alone(
    client: httpx.Client, clean_redis: str
) -> None:
    """Before: one agent's resets were accepted at t = 0, 10.1 and 20.2 s, each clearing every
    vote (the per-experiment limit does not help), so a DSER4 experiment never ended. With a
    tolerance f = 1 its request is counted and `pending`: the honest votes stay; a second agent's
    request (f + 1 within DEXP_RESET_QUORUM_SECONDS) makes the reset."""
    create_experiment(
        client, id="rq", arms=ARMS, subroutine="ser4", phi=0.01, tolerance=1, delta=0.25, eta=0.5
    )
    liar, honest, other = enroll_agents(client, "rq", 3)
    vote = client.post(
        "/v1/experiments/rq/votes", json={"arm": 2, "epoch": 0}, headers=honest.headers
    )
    assert vote.json()["counted"]
    alone = client.post("/v1/experiments/rq/reset", json={"epoch": 0}, headers=liar.headers)
    assert alone.status_code == 200, alone.text
    assert alone.json() == {
        "reset": False,
        "version": 0,
        "epoch": 0,
        "pending": True,
        "requests": 1,
        "needed": 2,
    }
    state = client.get("/v1/experiments/rq").json()
    assert (state["epoch"], state["votes"][2]) == (0, 1)  # nothing cleared
    again = client.post("/v1/experiments/rq/reset", json={"epoch": 0}, headers=liar.headers)
    assert again.status_code == 429  # its own rate limit, and still one request if it were not
    second = client.post("/v1/experiments/rq/reset", json={"epoch": 0}, headers=other.headers)
    assert (second.json()["reset"], second.json()["epoch"], second.json()["requests"]) == (
        True,
        1,
        2,
    )


def test_a_dser4_agent_cannot_flood_resets(
    client: httpx.Client, clean_redis: str, redis_state: RedisState
) -> None:
    """Before: one agent reset the experiment 800 times a second, erasing the honest votes each
    time. Now one reset per agent per DEXP_RESET_RATE (0.1/s, burst 1 by default), 429 beyond: a
    flood of 20 more, sent before the next one is allowed (by Redis's clock, the limit's own), is
    refused whole."""
    settings = coordinator_settings(clean_redis)  # as the session's coordinator was given
    assert (settings.reset_rate, settings.reset_burst) == (0.1, 1)
    clock = redis.Redis.from_url(clean_redis)

    def now() -> float:
        seconds, micros = clock.time()
        return float(seconds) + micros / 1e6

    create_experiment(client, id="rs", arms=ARMS, subroutine="ser4", phi=0.01)
    attacker, honest = enroll_agents(client, "rs", 2)
    try:
        refill = now() + 1 / settings.reset_rate  # no second reset of the attacker before
        first = client.post("/v1/experiments/rs/reset", json={"epoch": 0}, headers=attacker.headers)
        assert first.json() | {"requests": 1} == {
            "reset": True,
            "version": 1,
            "epoch": 1,
            "pending": False,
            "requests": 1,
            "needed": 1,
        }
        vote = client.post(
            "/v1/experiments/rs/votes", json={"arm": 1, "epoch": 1}, headers=honest.headers
        )
        assert vote.json()["counted"] is True
        before = redis_state()
        for _ in range(20):
            response = client.post(
                "/v1/experiments/rs/reset", json={"epoch": 1}, headers=attacker.headers
            )
            assert response.status_code == 429, response.text
            assert 1 <= int(response.headers["retry-after"]) <= 10
            assert "resets too fast" in detail(response)
        assert now() < refill  # 20 requests in 10 s: a safety net, not a bet
    finally:
        clock.close()
    assert redis_state() == before  # the honest vote stands; nothing recorded
    agents = client.get("/v1/experiments/rs/agents", headers=admin_headers()).json()["agents"]
    seen = {a["agent_id"]: (a["resets"], a["last_reset_at"] is not None) for a in agents}
    assert seen == {attacker.agent_id: (1, True), honest.agent_id: (0, False)}
    # the admin is never limited
    for _ in range(3):
        assert client.post("/v1/experiments/rs/reset", headers=admin_headers()).status_code == 200


def test_resets_are_limited_per_experiment_too(redis_url: str, clean_redis: str) -> None:
    """Many colluding agents: the experiment's own limit (here 2 at once, then one a minute: no
    refill during the test, however slow the machine) holds whatever their number, and a refusal
    changes nothing."""
    settings = coordinator_settings(
        redis_url, experiment_reset_rate=1 / 60, experiment_reset_burst=2, reset_rate=10.0
    )
    with coordinator(settings) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        create_experiment(client, id="rx", arms=ARMS, subroutine="ser4", phi=0.01)
        agents = enroll_agents(client, "rx", 6)
        statuses = []
        for epoch, agent in enumerate(agents):
            response = client.post(
                "/v1/experiments/rx/reset", json={"epoch": min(epoch, 2)}, headers=agent.headers
            )
            statuses.append(response.status_code)
        assert statuses == [200, 200, 429, 429, 429, 429]
        assert client.get("/v1/experiments/rx").json()["epoch"] == 2


# -- Redis down ---------------------------------------------------------------------------------
def test_while_redis_is_down_requests_get_a_json_503_with_retry_after() -> None:
    """Before: votes got `500 text/plain` without Retry-After while Redis was down."""
    with redis_server() as server:
        settings = coordinator_settings(server.url, experiment="")
        with coordinator(settings) as coord, httpx.Client(base_url=coord.url, timeout=30) as client:
            create_experiment(client, id="down", arms=ARMS)
            (agent,) = enroll_agents(client, "down", 1)
            server.process.kill()  # type: ignore[union-attr]
            server.process.wait()  # type: ignore[union-attr]
            padded = b'{"arm": 1, "epoch": 0' + b" " * 2000 + b"}"
            requests = {
                "vote (fast path)": (
                    "POST",
                    "/v1/experiments/down/votes",
                    agent.headers,
                    b'{"arm": 1}',
                ),
                "vote (route)": ("POST", "/v1/experiments/down/votes", agent.headers, padded),
                "best arm": ("GET", "/v1/experiments/down/best-arm", {}, b""),
                "enrollment": (
                    "POST",
                    "/v1/agents",
                    bearer(ENROLLMENT_SECRET),
                    b'{"experiment": "down"}',
                ),
                "creation": (
                    "POST",
                    "/v1/experiments",
                    bearer(ADMIN_TOKEN),
                    b'{"id": "x", "arms": ["A", "B"]}',
                ),
            }
            for what, (method, path, headers, body) in requests.items():
                response = client.request(
                    method,
                    path,
                    content=body,
                    headers={**headers, "content-type": "application/json"},
                )
                assert response.status_code == 503, (what, response.text)
                assert "the store (Redis) is unavailable" in detail(response), what
                assert response.headers["retry-after"] == "1", what
            assert client.get("/readyz").status_code == 503


# -- input -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arms", "says"),
    [
        (["A\x00", "B"], "U+0000"),
        (["A\nB", "C"], "U+000A"),
        (["\u202eA", "B"], "U+202E"),
        (["A\u200b", "B"], "U+200B"),
        (["A", "A "], "'A' and 'A' look the same"),
        # A page draws a run of spaces as one: the dashboard showed "A B" and "A  B" alike
        (["A B", "A  B"], "'A B' and 'A B' look the same"),
        (["A B", "A\u3000\u00a0B"], "'A B' and 'A B' look the same"),  # NFKC spaces, one run
        (["Café", "Cafe\u0301"], "look the same"),  # NFC and NFD spellings of one name
        (["arm", "ARM"], "look the same"),
        # The audit's look-alikes (issue 23, point 7): UTS #39 skeletons, named character by
        # character; fillers and a blank glyph that draw nothing; stacked marks; mixed scripts.
        (["A", "\u0410"], "U+0410 (CYRILLIC CAPITAL LETTER A)"),
        (["A", "B", "\u0391"], "U+0391 (GREEK CAPITAL LETTER ALPHA)"),
        (["I", "l"], "look the same"),
        (["Arm1", "Arml"], "look the same"),
        (["rn", "m"], "look the same"),
        (["A\u1160", "B"], "U+1160 (HANGUL JUNGSEONG FILLER) draws nothing"),
        (["A\u2800", "B"], "U+2800 (BRAILLE PATTERN BLANK) draws nothing"),
        (["\u115f", "B"], "U+115F (HANGUL CHOSEONG FILLER) draws nothing"),
        (["A\uffa0B", "B"], "U+1160 (HANGUL JUNGSEONG FILLER)"),  # NFKC of U+FFA0
        (["A\ufe0f", "B"], "U+FE0F (VARIATION SELECTOR-16) draws nothing"),
        (["A" + "".join(chr(0x300 + i) for i in range(60)), "B"], "at most 4 nonspacing marks"),
        (["e\u0301\u0301", "B"], "U+0301 (COMBINING ACUTE ACCENT) twice in a row"),
        (["p\u0430ypal", "B"], "mixes Latin and Cyrillic"),
        (["1\u0663", "B"], "one set of digits"),
        (["   ", "B"], "empty or blank"),
        (["x" * 65, "B"], "at most 64 characters"),
    ],
)
def test_unreadable_or_indistinct_arm_names_are_refused(
    client: httpx.Client, redis_state: RedisState, arms: list[str], says: str
) -> None:
    before = redis_state()
    response = client.post(
        "/v1/experiments", json={"id": "names", "arms": arms}, headers=admin_headers()
    )
    assert response.status_code == 422, response.text
    assert says in detail(response) or says in response.text
    assert redis_state() == before


def test_arm_names_are_stored_trimmed_and_normalized(client: httpx.Client) -> None:
    state = create_experiment(client, id="norm", arms=["  A ", "Cafe\u0301", "ﬁve", "B  \u2003C"])
    assert state["arms"] == ["A", "Café", "five", "B C"]


def test_names_in_any_one_script_and_symbols_are_accepted(client: httpx.Client) -> None:
    """The look-alike rules refuse what misleads, not what is foreign: each name below is in one
    script (or Latin with Han, as UTS #39's moderately restrictive level allows), marks included."""
    arms = [
        "Москва",
        "Αθήνα",
        "東京 Tokyo",
        "हिन्दी",
        "ภาษาไทย",
        "Tiếng Việt",
        "😀 smile",
        "v2 (blue)!",
    ]
    state = create_experiment(client, id="scripts", arms=arms)
    assert state["arms"] == arms


def test_a_threshold_above_the_agent_cap_is_refused(redis_url: str, clean_redis: str) -> None:
    """Before: M + f far above DEXP_MAX_AGENTS was accepted with a warning; no arm could ever go."""
    settings = coordinator_settings(redis_url, max_agents=40)
    with coordinator(settings) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        before = snapshot(clean_redis)
        response = client.post(
            "/v1/experiments",
            json={"id": "big", "arms": ARMS, "tolerance": 29},  # M + f = 29 + 29 = 58 > 40
            headers=admin_headers(),
        )
        assert response.status_code == 422, response.text
        assert "M + f = 58" in detail(response) and "DEXP_MAX_AGENTS = 40" in detail(response)
        assert snapshot(clean_redis) == before
        assert create_experiment(client, id="fits", arms=ARMS, tolerance=11)["threshold"] == 40


def test_the_experiment_list_is_paged_and_summary_only(
    client: httpx.Client, redis_state: RedisState
) -> None:
    """Before: 21 experiments of 1,000 arms made a 766 KB answer."""
    ids = [f"big{i:02d}" for i in range(21)]
    for exp in ids:
        create_experiment(client, id=exp, arms=[f"arm-{k}" for k in range(1000)])
    before = redis_state()
    seen: list[str] = []
    after, pages = "", 0
    while True:
        response = client.get("/v1/experiments", params={"limit": 8, "after": after})
        assert response.status_code == 200
        assert len(response.content) < 2_000  # a summary: no arm names, votes or voters
        page = response.json()
        assert len(page["experiments"]) <= 8
        seen += [e["id"] for e in page["experiments"]]
        pages += 1
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == ids and pages == 3
    default = client.get("/v1/experiments").json()
    assert len(default["experiments"]) == 21 and default["next"] is None
    for bad in ({"limit": 0}, {"limit": 101}, {"after": "a b"}):
        assert client.get("/v1/experiments", params=bad).status_code == 422
    assert redis_state() == before


# -- a stolen token (issue 36, point 9) ---------------------------------------------------------
def test_a_revoked_token_is_refused_on_every_route(
    client: httpx.Client, redis_state: RedisState
) -> None:
    """A lost device's state file holds its agent's token: the admin revokes that one token
    (DELETE .../agents/{agent}), and every route refuses it from then on (401), the fast vote path
    included, with nothing changed. Its vote stays counted; the other agents go on."""
    create_experiment(client, id="stolen", arms=["A", "B", "C"])
    thief, honest = enroll_agents(client, "stolen", 2)
    cast = client.post("/v1/experiments/stolen/votes", json={"arm": 0}, headers=thief.headers)
    assert cast.json()["outcome"] == "counted", cast.text
    path = f"/v1/experiments/stolen/agents/{thief.agent_id}"
    before = redis_state()
    for refused, status in [
        (client.delete(path, headers=honest.headers), 401),  # admin only
        (
            client.delete(
                "/v1/experiments/stolen/agents/stolen-0000000000", headers=admin_headers()
            ),
            404,
        ),
        (
            client.delete(f"/v1/experiments/gone/agents/{thief.agent_id}", headers=admin_headers()),
            404,
        ),
    ]:
        assert refused.status_code == status, refused.text
        assert refused.json()["detail"]
    assert redis_state() == before

    revoked = client.delete(path, headers=admin_headers())
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked"] is True
    again = client.delete(path, headers=admin_headers()).json()
    assert (again["revoked"], again["revoked_at"]) == (False, revoked.json()["revoked_at"])

    after = redis_state()
    padded = b'{"arm": 1,    "epoch": 0}' + b" " * 2000  # too long for the fast path: the route
    for method, route, body in [
        ("POST", "/v1/experiments/stolen/votes", b'{"arm": 1}'),  # the fast path
        ("POST", "/v1/experiments/stolen/votes", padded),
        ("POST", "/v1/experiments/stolen/settled", b'{"epoch": 0}'),
        ("POST", "/v1/experiments/stolen/report", b'{"arm": 1}'),
        ("POST", "/v1/experiments/stolen/reports", b'{"arm": 1, "bit": 1, "seq": 1}'),
        ("POST", "/v1/experiments/stolen/reset", b'{"epoch": 0}'),
        ("GET", "/v1/agents/me", b""),
    ]:
        headers = {**thief.headers, "content-type": "application/json"}
        response = client.request(method, route, content=body, headers=headers)
        assert response.status_code == 401, (route, response.text)
        assert response.json()["detail"] == "invalid agent token"
    assert redis_state() == after

    state = client.get("/v1/experiments/stolen").json()
    assert state["votes"][0] == 1 and state["agents"] == 2  # kept: it was honest when cast
    listed = client.get("/v1/experiments/stolen/agents", headers=admin_headers()).json()
    revoked_at = {a["agent_id"]: a["revoked_at"] for a in listed["agents"]}
    assert revoked_at == {thief.agent_id: revoked.json()["revoked_at"], honest.agent_id: None}
    vote = client.post("/v1/experiments/stolen/votes", json={"arm": 0}, headers=honest.headers)
    assert vote.json()["outcome"] == "counted"
