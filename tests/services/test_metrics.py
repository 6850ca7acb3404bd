"""/metrics read directly, on the faults Prometheus alone would not provoke: a Redis that goes away
is seen as Redis errors, 503 refusals and `dexp_store_up 0` (and /metrics itself still answers),
and paths no route takes, however many, add no series (the label is `other`)."""

from __future__ import annotations

import secrets

import httpx
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from coordinator.app import create_app
from coordinator.metrics import route_templates

from .helpers import (
    config_for_threshold,
    coordinator,
    coordinator_settings,
    create_experiment,
    enroll_agents,
    redis_server,
)


def samples(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape of /metrics: (name, sorted labels) -> value."""
    scrape = client.get("/metrics")
    assert scrape.status_code == 200, scrape.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
    }


def now(name: str, **labels: str) -> float:
    """A sample's value in this process's registry (the coordinator runs in a thread here),
    read without a scrape, so that the next scrape reads the store afresh."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_redis_that_goes_away_shows_as_errors_refusals_and_store_down() -> None:
    route = "/v1/experiments/{experiment}/votes"
    answered = {"route": route, "method": "POST", "code": "503"}
    with redis_server() as server:
        settings = coordinator_settings(server.url, experiment="")
        with coordinator(settings) as coord, httpx.Client(base_url=coord.url, timeout=30) as client:
            config = config_for_threshold(2)
            create_experiment(
                client, id="gone", arms=["A", "B"], delta=config.delta, eta=config.eta
            )
            (agent,) = enroll_agents(client, "gone", 1)
            before = {
                "503": now("dexp_http_requests_total", **answered),
                "unavailable": now("dexp_refusals_total", reason="unavailable"),
                "connection": now("dexp_redis_errors_total", error="connection"),
            }
            server.process.kill()  # type: ignore[union-attr]
            server.process.wait()  # type: ignore[union-attr]
            vote = client.post(
                "/v1/experiments/gone/votes", json={"arm": 1, "epoch": 0}, headers=agent.headers
            )
            assert vote.status_code == 503
            after = samples(client)  # /metrics answers while Redis is away
    key = tuple(sorted(answered.items()))
    assert after[("dexp_http_requests_total", key)] == before["503"] + 1
    assert after[("dexp_refusals_total", (("reason", "unavailable"),))] == before["unavailable"] + 1
    assert after[("dexp_redis_errors_total", (("error", "connection"),))] > before["connection"]
    assert after[("dexp_store_up", ())] == 0


def test_paths_no_route_takes_add_no_series(coordinator_url: str, client: httpx.Client) -> None:
    probes = [f"/v1/{secrets.token_hex(8)}/{secrets.token_hex(8)}" for _ in range(50)]
    for path in probes:
        assert client.get(path).status_code == 404
    found = samples(client)
    routes = {dict(labels)["route"] for name, labels in found if name.startswith("dexp_http_")}
    templates = set(route_templates(create_app(coordinator_settings("redis://unused")).routes))
    assert "other" in routes
    assert routes - templates == {"other"}
    assert not [r for r in routes if any(p.split("/")[2] in r for p in probes)]
