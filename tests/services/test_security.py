"""Security of the coordinator over real HTTP: replayed and forged votes, votes for arms or
experiments that do not exist, rate limits and enrollment caps, and production settings.

A vote that is refused changes nothing; a replayed vote is a duplicate message: it changes no vote
count, arm or version (only the message counters and the agent's rate-limit state).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from pydantic import ValidationError

from common import redis_keys as keys
from coordinator.errors import Forbidden, RateLimited
from coordinator.settings import Settings
from coordinator.store import Limits

from .helpers import (
    ENROLLMENT_SECRET,
    Agent,
    RedisState,
    ThreadedCoordinator,
    admin_headers,
    bearer,
    config_for_threshold,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    open_store,
)

ROOT = Path(__file__).resolve().parents[2]
ARMS = ["A", "B", "C"]


def vote(
    client: httpx.Client, exp: str, token: str, arm: int, epoch: int = 0, route: bool = False
) -> httpx.Response:
    """A vote; `route=True` pads the body past the fast path's limit so the FastAPI route answers."""
    if not route:
        return client.post(
            f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": epoch}, headers=bearer(token)
        )
    body = b'{"arm": %d, "epoch": %d' % (arm, epoch) + b" " * 2000 + b"}"
    return client.post(
        f"/v1/experiments/{exp}/votes",
        content=body,
        headers={**bearer(token), "content-type": "application/json"},
    )


def detail(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json"), response.text
    return str(response.json()["detail"])


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The keys whose content differs, with (before, after); for hashes, the fields that differ."""
    diff: dict[str, Any] = {}
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            diff[key] = {f: (old.get(f), new.get(f)) for f in old.keys() | new.keys()}
            diff[key] = {f: v for f, v in diff[key].items() if v[0] != v[1]}
        else:
            diff[key] = (old, new)
    return diff


# -- replayed votes ----------------------------------------------------------------------------
@pytest.mark.parametrize("route", [False, True], ids=["fast-path", "route"])
def test_a_replayed_vote_is_a_duplicate_and_changes_no_count(
    client: httpx.Client, redis_state: RedisState, route: bool
) -> None:
    create_experiment(client, id="rp", arms=ARMS, delta=0.2, eta=0.5)  # M = 3
    a, b = enroll_agents(client, "rp", 2)
    first = vote(client, "rp", a.token, 1, route=route)
    assert first.status_code == 200 and first.json()["counted"] is True
    before = redis_state()
    for _ in range(3):
        replay = vote(client, "rp", a.token, 1, route=route)
        assert replay.status_code == 200, replay.text
        assert replay.json() == {
            "counted": False,
            "outcome": "duplicate",
            "eliminated": False,
            "arm_out": False,
            "votes": 1,
            "version": 0,
            "epoch": 0,
        }
    diff = changed(before, redis_state())
    meta = keys.meta("rp")
    # only the message counters and the agent's rate-limit state: no voter, arm or version
    assert diff.keys() == {meta, keys.vote_rate("rp")}, diff
    published_at = diff[meta].pop("published_at")  # Redis's clock: '<s>.<us>', us not padded
    assert [tuple(map(int, t.split("."))) for t in published_at] == sorted(
        tuple(map(int, t.split("."))) for t in published_at
    )
    assert published_at[0] != published_at[1]
    assert diff[meta] == {
        "messages": ("1", "4"),
        "epoch_messages": ("1", "4"),
        "ignored": ("0", "3"),
        # each message published at once (DEXP_PUBLISH_BATCH 1): the counters, no vote
        "p_messages": ("1", "4"),
        "p_epoch_messages": ("1", "4"),
        "p_ignored": ("0", "3"),
        "published": ("2", "5"),
    }
    assert diff[keys.vote_rate("rp")].keys() == {a.agent_id}
    state = client.get("/v1/experiments/rp/voters", headers=admin_headers()).json()
    assert state["voters"] == [[], [a.agent_id], []]
    assert vote(client, "rp", b.token, 1).json()["votes"] == 2  # others still count


# -- forged votes ------------------------------------------------------------------------------
def forged_tokens(a: Agent, b: Agent, outsider: Agent) -> dict[str, tuple[str, int]]:
    secret_a = a.token.split(".", 1)[1]
    changed = "y" if secret_a.endswith("x") else "x"  # its last character, changed (1 in 64 is x)
    return {
        "A's secret under B's id": (f"{b.agent_id}.{secret_a}", 401),
        "A's secret under a made-up id": (f"rf-0000000000.{secret_a}", 401),
        "A's id with a changed secret": (f"{a.agent_id}.{secret_a[:-1]}{changed}", 401),
        "A's id alone": (a.agent_id, 401),
        "A's token with a suffix": (a.token + "x", 401),
        "a token of another experiment": (outsider.token, 403),
    }


@pytest.mark.parametrize("route", [False, True], ids=["fast-path", "route"])
def test_forged_votes_are_refused_and_change_nothing(
    client: httpx.Client, redis_state: RedisState, route: bool
) -> None:
    create_experiment(client, id="rf", arms=ARMS)
    create_experiment(client, id="other", arms=ARMS)
    a, b = enroll_agents(client, "rf", 2)
    (outsider,) = enroll_agents(client, "other", 1)
    before = redis_state()
    for case, (token, status) in forged_tokens(a, b, outsider).items():
        response = vote(client, "rf", token, 0, route=route)
        assert response.status_code == status, (case, response.text)
        assert detail(response), case
        if status == 401:
            assert response.headers["www-authenticate"] == "Bearer", case
        assert redis_state() == before, case
    assert client.get("/v1/experiments/rf").json()["messages"] == 0


@pytest.mark.parametrize("route", [False, True], ids=["fast-path", "route"])
def test_votes_for_a_missing_arm_or_experiment_change_nothing(
    client: httpx.Client, redis_state: RedisState, route: bool
) -> None:
    create_experiment(client, id="rm", arms=ARMS)
    (a,) = enroll_agents(client, "rm", 1)
    before = redis_state()
    no_arm = vote(client, "rm", a.token, 3, route=route)
    assert no_arm.status_code == 422 and detail(no_arm) == "arm=3 is invalid: must be in [0, 2]"
    no_experiment = vote(client, "gone", a.token, 0, route=route)
    assert no_experiment.status_code == 404 and "gone" in detail(no_experiment)
    assert redis_state() == before


# -- rate limits -------------------------------------------------------------------------------
def redis_clock(raw: redis.Redis) -> float:
    """Redis's own clock (TIME), in seconds: the one its rate limits read (lua/gcra.lua)."""
    seconds, micros = raw.time()
    return float(seconds) + micros / 1e6


RETRY_IN = re.compile(r"; retry in ([\d.]+) s$")


@pytest.mark.parametrize("route", [False, True], ids=["fast-path", "route"])
def test_votes_beyond_an_agents_rate_are_429_and_change_nothing(
    client: httpx.Client, clean_redis: str, redis_state: RedisState, route: bool
) -> None:
    """The coordinator's default vote limits (docs/RELIABILITY.md: DEXP_VOTE_RATE 20/s,
    DEXP_VOTE_BURST 50), as the settings give them, on the real vote path. An agent voting as fast
    as it can: its first 50 votes pass (new votes and replays alike count), and never more than 50
    plus 20 a second of the flood, timed by Redis's clock, the limit's own; the first refused is a
    429 with Retry-After, waits one interval (50 ms) at most, and changes nothing, not even the
    message count; another agent is not limited; that interval later the agent's votes pass again,
    within the same bound. Nothing here bets on the machine's speed but one: a loop of votes
    faster than 20 a second."""
    settings = coordinator_settings(clean_redis)  # as the session's coordinator was given
    rate, burst = settings.vote_rate, settings.vote_burst
    assert (rate, burst) == (20.0, 50)
    create_experiment(client, id="rl", arms=[f"a{i}" for i in range(8)])
    a, b = enroll_agents(client, "rl", 2)
    raw = redis.Redis.from_url(clean_redis)

    def flood(checked_from: int) -> tuple[int, httpx.Response]:
        """A's votes one after another until one is refused: how many passed, and the refusal,
        which changed nothing (checked from vote `checked_from` on)."""
        passed, deadline = 0, time.monotonic() + 60  # a safety net
        while True:
            assert time.monotonic() < deadline, f"{passed} votes passed, none refused"
            before = redis_state() if passed >= checked_from else None
            response = vote(client, "rl", a.token, passed % 8, route=route)
            if response.status_code == 429:
                assert before is not None, f"refused after {passed} votes"
                assert redis_state() == before  # a refused vote is not even a message
                return passed, response
            assert response.status_code == 200, response.text
            passed += 1

    try:
        started = redis_clock(raw)
        first, refused = flood(checked_from=burst)
        assert burst <= first <= burst + rate * (redis_clock(raw) - started)
        assert retry_after(refused) == 1
        says = detail(refused)
        assert f"votes too fast: at most {rate:g} votes per second (burst {burst})" in says
        found = RETRY_IN.search(says)
        assert found is not None and 0 <= float(found.group(1)) <= 1 / rate, says
        assert vote(client, "rl", b.token, 5, route=route).status_code == 200  # per agent
        time.sleep(2 / rate)  # beyond the refusal's wait: one vote at least passes again
        again, _ = flood(checked_from=0)
        assert again >= 1 and first + again <= burst + rate * (redis_clock(raw) - started)
    finally:
        raw.close()


# 2 votes or enrollments per second, 3 at once; a client may enroll 4 agents per experiment.
LIMITS = {
    "vote_rate": 2.0,
    "vote_burst": 3,
    "enroll_rate": 2.0,
    "enroll_burst": 3,
    "max_agents_per_client": 4,
}


@pytest.fixture(scope="module")
def limited_server(redis_url: str) -> Iterator[ThreadedCoordinator]:
    with coordinator(coordinator_settings(redis_url, **LIMITS)) as server:
        yield server


@pytest.fixture
def limited(limited_server: ThreadedCoordinator, clean_redis: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=limited_server.url, timeout=10.0, trust_env=False) as http:
        yield http


def retry_after(response: httpx.Response) -> int:
    assert response.status_code == 429, response.text
    return int(response.headers["retry-after"])


def test_the_agent_client_waits_out_a_429(limited: httpx.Client) -> None:
    """The agent's client votes beyond its burst (3 at 2 a second): a 429 is waited out, as long
    as Retry-After asks at least, and the vote is sent again and answered, never raised."""
    from clients.coordinator import CoordinatorClient

    create_experiment(limited, id="rc", arms=[f"a{i}" for i in range(8)])
    (a,) = enroll_agents(limited, "rc", 1)
    client = CoordinatorClient(str(limited.base_url), retry_max_seconds=2.0, give_up_after=20)
    outcomes = []
    try:
        while client.rate_limited == 0:  # the burst, then as many as it takes to be refused
            assert len(outcomes) < 50, "never refused"  # a safety net: 4 in 0.5 s are enough
            outcomes.append(client.vote("rc", a.token, len(outcomes) % 8, 0)["outcome"])
    finally:
        client.close()
    assert len(outcomes) > LIMITS["vote_burst"]
    assert outcomes == ["counted" if i < 8 else "duplicate" for i in range(len(outcomes))]
    assert client.retries == client.rate_limited >= 1  # only 429s were retried
    assert client.rate_limited_seconds >= client.rate_limited * 1.0  # Retry-After: 1 s


def test_enrollments_beyond_a_clients_rate_or_cap_are_refused(
    limited: httpx.Client, clean_redis: str, redis_state: RedisState
) -> None:
    """Open enrollment from one address: 3 at once, then 2 a second, per experiment; 4 agents at
    most per experiment, checked before the rate. A refused enrollment changes nothing. The
    refusal beyond the burst is certain only if the burst and the next one land within one refill
    interval (0.5 s) by Redis's clock: a try that a loaded machine stretched beyond it (the
    fourth then passes) is made again on a fresh experiment."""
    interval = 1 / LIMITS["enroll_rate"]
    raw = redis.Redis.from_url(clean_redis)
    try:
        for attempt in itertools.count():
            exp = f"re{attempt}"
            create_experiment(limited, id=exp, arms=ARMS)
            started = redis_clock(raw)
            enroll_agents(limited, exp, 3)  # the burst
            before = redis_state()
            refused = limited.post(
                "/v1/agents", json={"experiment": exp}, headers=bearer(ENROLLMENT_SECRET)
            )
            if refused.status_code == 429:
                break
            assert refused.status_code == 201, refused.text
            assert redis_clock(raw) - started >= interval  # only a refill lets the fourth in
            assert attempt < 10, "no burst within one refill interval in 10 tries"
    finally:
        raw.close()
    assert retry_after(refused) == 1 and "too many enrollments" in detail(refused)
    assert redis_state() == before
    create_experiment(limited, id="other", arms=ARMS)
    enroll_agents(limited, "other", 1)  # per experiment
    time.sleep(interval + 0.01)  # a refill since the third (Redis's clock is not quite ours)
    enroll_agents(limited, exp, 1)  # the fourth, the client's maximum in exp
    before = redis_state()
    capped = limited.post("/v1/agents", json={"experiment": exp}, headers=bearer(ENROLLMENT_SECRET))
    assert capped.status_code == 403, capped.text  # the cap, whatever the rate
    assert "maximum of 4 agents" in detail(capped) and "DEXP_MAX_AGENTS_PER_CLIENT" in detail(
        capped
    )
    assert redis_state() == before
    assert limited.get(f"/v1/experiments/{exp}").json()["agents"] == 4


def test_an_experiment_takes_at_most_max_agents_from_all_clients(clean_redis: str) -> None:
    """DEXP_MAX_AGENTS caps an experiment whatever the clients; the per-client cap and rate hold
    for each client address separately (the store, as the enrollment route calls it)."""

    async def body() -> None:
        limits = Limits(max_agents=5, max_agents_per_client=3, enroll_rate=1.0, enroll_burst=10)
        async with open_store(clean_redis) as store:
            store.limits = limits
            await store.create("cap", ARMS, config_for_threshold(2))
            for _ in range(3):
                await store.enroll("cap", "10.0.0.1")
            with pytest.raises(Forbidden, match="this client enrolled its maximum of 3"):
                await store.enroll("cap", "10.0.0.1")
            for _ in range(2):
                await store.enroll("cap", "10.0.0.2")
            with pytest.raises(Forbidden, match=r"'cap' is full: .* 5 agents"):
                await store.enroll("cap", "10.0.0.3")
            assert (await store.get("cap")).agents == 5
            store.limits = Limits(enroll_rate=1.0, enroll_burst=2)
            await store.create("fast", ARMS, config_for_threshold(2))
            await store.enroll("fast", "10.0.0.1")
            await store.enroll("fast", "10.0.0.1")
            with pytest.raises(RateLimited) as refused:
                await store.enroll("fast", "10.0.0.1")
            assert 0 < refused.value.retry_after <= 1.0
            await store.enroll("fast", "10.0.0.2")

    asyncio.run(body())


# -- production settings -----------------------------------------------------------------------
STRONG = {
    # random, as production needs (coordinator/settings.py MIN_GUESSES_LOG10)
    "admin_token": "Jx8q2VbN-rT5mWk0zLp3sYh7",
    "enrollment_secret": "eN4c-Qw9tUz6Rk1vXa8Pm2Lj",
    "redis_url": "redis://:R7g-Kd2xWq9Zm4Tb8Vn1Ys5c@redis:6379/0",
}


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({}, "DEXP_ADMIN_TOKEN is the development default"),
        ({"admin_token": "dev-admin-token"}, "DEXP_ADMIN_TOKEN is the development default"),
        (
            {"enrollment_secret": "dev-enrollment-secret", "open_enrollment": True},
            "DEXP_ENROLLMENT_SECRET",
        ),
        ({"admin_token": "short-token-15c"}, "DEXP_ADMIN_TOKEN is shorter than 16"),
        (
            {"enrollment_secret": "0123456789abcde", "open_enrollment": True},
            "DEXP_ENROLLMENT_SECRET is shorter than 16",
        ),
        ({"enrollment_secret": STRONG["admin_token"], "open_enrollment": True}, "must differ"),
        ({"redis_url": "redis://:dexp-dev-redis@redis:6379/0"}, "Redis password"),
        ({"redis_url": "redis://:short@redis:6379/0"}, "Redis password"),
    ],
)
def test_production_refuses_placeholder_or_weak_secrets(
    overrides: dict[str, Any], named: str
) -> None:
    values = {**STRONG, **overrides} if overrides else {}
    with pytest.raises(ValidationError, match=named):
        Settings(environment="production", **values)
    Settings(environment="development", **values)  # development takes them


def test_production_takes_strong_secrets() -> None:
    settings = Settings(environment="production", **STRONG)
    assert settings.insecure() == []
    assert Settings().environment == "development"


def test_open_enrollment_is_on_in_development_and_off_in_production_unless_enabled() -> None:
    assert Settings().open_enrollment_enabled
    assert not Settings(environment="development", open_enrollment=False).open_enrollment_enabled
    production = Settings(environment="production", **STRONG)
    assert not production.open_enrollment_enabled
    # the shared secret is not used then, so its placeholder is no weakness
    unused = Settings(environment="production", **{**STRONG, "enrollment_secret": "dev-x-secret"})
    assert unused.insecure() == [] and not unused.open_enrollment_enabled
    assert Settings(
        environment="production", open_enrollment=True, **STRONG
    ).open_enrollment_enabled


def test_a_production_coordinator_with_dev_secrets_does_not_start() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEXP_")}
    env.update({"DEXP_ENVIRONMENT": "production", "PYTHONPATH": str(ROOT)})
    started = subprocess.run(
        [sys.executable, "-m", "coordinator"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert "invalid configuration, not starting" in started.stderr
    assert "DEXP_ADMIN_TOKEN is the development default" in started.stderr
    assert "Traceback" not in started.stderr


def test_admin_calls_need_the_admin_token(client: httpx.Client, redis_state: RedisState) -> None:
    """Reset by a wrong or missing token: 401, nothing changes (create/delete: test_api)."""
    create_experiment(client, id="ad", arms=ARMS)
    before = redis_state()
    for headers in ({}, bearer("x" * 20), bearer(ENROLLMENT_SECRET)):
        response = client.post("/v1/experiments/ad/reset", headers=headers)
        assert response.status_code == 401, response.text
    assert redis_state() == before
    assert client.post("/v1/experiments/ad/reset", headers=admin_headers()).status_code == 200
