"""Failed credential checks are throttled per client address (coordinator/throttle.py), and
production refuses guessable secrets (coordinator/settings.py).

The attack replayed: one client guessing admin tokens (7,915 in 3 s before the throttle). After
DEXP_AUTH_FAILURE_LIMIT failures its credentialed requests get 429 with Retry-After, even with the
right token, before any check; its anonymous reads, and every request of another address (a
client bound to 127.0.0.2), are served as before; wrong agent tokens on the vote fast path count
too.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from pydantic import ValidationError

from coordinator.settings import Settings
from tests.services.helpers import (
    ThreadedCoordinator,
    admin_headers,
    bearer,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
)

LIMIT = 5


@pytest.fixture
def server(redis_url: str, clean_redis: str) -> Iterator[ThreadedCoordinator]:
    settings = coordinator_settings(redis_url, auth_failure_limit=f"{LIMIT}/minute")
    with coordinator(settings) as running:
        yield running


def from_address(url: str, address: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=url, timeout=10.0, trust_env=False, transport=transport)


def test_a_guesser_is_throttled_and_nobody_else(server: ThreadedCoordinator) -> None:
    with (
        from_address(server.url, "127.0.0.1") as guesser,
        from_address(server.url, "127.0.0.2") as other,
    ):
        create_experiment(other, id="guarded", arms=["A", "B", "C"], delta=0.25, eta=0.5)
        (agent,) = enroll_agents(other, "guarded", 1)
        for attempt in range(LIMIT):
            wrong = guesser.post(
                "/v1/experiments/guarded/tickets",
                json={"count": 1},
                headers=bearer(f"wrong-admin-token-{attempt}"),
            )
            assert wrong.status_code == 401, wrong.text
        # over the limit: even the right token is refused before it is checked
        refused = guesser.post(
            "/v1/experiments/guarded/tickets", json={"count": 1}, headers=admin_headers()
        )
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        assert "failed credential checks" in refused.json()["detail"]
        refused_vote = guesser.post(
            "/v1/experiments/guarded/votes", json={"arm": 2, "epoch": 0}, headers=agent.headers
        )
        assert refused_vote.status_code == 429
        # anonymous reads of the same address are served; nothing changed
        state = guesser.get("/v1/experiments/guarded")
        assert state.status_code == 200 and state.json()["messages"] == 0
        # another address is not affected: the admin and the agent are served
        tickets = other.post(
            "/v1/experiments/guarded/tickets", json={"count": 1}, headers=admin_headers()
        )
        assert tickets.status_code == 201, tickets.text
        vote = other.post(
            "/v1/experiments/guarded/votes", json={"arm": 2, "epoch": 0}, headers=agent.headers
        )
        assert vote.status_code == 200 and vote.json()["counted"]
        # wrong agent tokens on the vote fast path count against their address too
        for attempt in range(LIMIT):
            junk = other.post(
                "/v1/experiments/guarded/votes",
                json={"arm": 1, "epoch": 0},
                headers=bearer(f"{agent.agent_id}.wrong{attempt}"),
            )
            assert junk.status_code == 401, junk.text
        after = other.post(
            "/v1/experiments/guarded/votes", json={"arm": 1, "epoch": 0}, headers=agent.headers
        )
        assert after.status_code == 429
    assert state.json()["votes"] == [0, 0, 0]


@pytest.mark.parametrize(
    "weak", ["aaaaaaaaaaaaaaaa", "passwordpassword", "abcdefghijklmnopqrst", "1234567890123456"]
)
def test_production_refuses_guessable_secrets(weak: str) -> None:
    strong = "Vq3xN9rT_k2LwZp8sYe4Hb6Ud"
    cases = [
        {"admin_token": weak, "redis_url": f"redis://coordinator:{strong}@redis:6379/0"},
        {"admin_token": strong, "redis_url": f"redis://coordinator:{weak}@redis:6379/0"},
        {
            "admin_token": strong,
            "open_enrollment": True,
            "enrollment_secret": weak,
            "redis_url": f"redis://coordinator:{strong}x@redis:6379/0",
        },
    ]
    for values in cases:
        with pytest.raises(ValidationError, match="too easy to guess"):
            Settings(environment="production", **values)
    Settings(
        environment="production",
        admin_token=strong,
        redis_url=f"redis://coordinator:{strong}x@redis:6379/0",
    )


def test_a_bad_failure_limit_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="DEXP_AUTH_FAILURE_LIMIT"):
        Settings(auth_failure_limit="often")
    assert Settings().auth_failure_limit == "20/minute"
