"""What an experiment certifies, in the coordinator's documents, over real HTTP and real Redis:
GET /v1/experiments/{id} and .../best-arm carry `certified_failure` for the agents enrolled (and
at DEXP_MAX_AGENTS), its sentence, and a warning naming what would certify delta once it is above
it; every enrollment changes the number and moves both ETags."""

from __future__ import annotations

import math
import re
from typing import Any

import httpx

from common.algorithms import AlgorithmConfig
from common.certificate import certified_failure, certify

from .helpers import create_experiment, enroll_agents

M3 = {"delta": 0.2, "eta": 0.5}  # DE-SER3: M = ceil(log 0.2 / log 0.5) = 3
P = math.pi**2 / 24 * 0.5  # each agent's error bound: (pi^2 / 24) eta
FIELDS = ("certified_failure", "certified_agents", "certified_failure_at_max_agents", "certificate")


def read(client: httpx.Client, path: str) -> tuple[dict[str, Any], str]:
    response = client.get(path, headers={"Accept-Encoding": "identity"})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body, response.headers["etag"]


def exact_tail(n: int, m: int, p: float) -> float:
    return sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(m, n + 1))


def bounds(value: float, exact: float) -> bool:
    """`value` is `exact`, rounded up by at most the certificate's margin (it stays a bound)."""
    return exact * (1 - 1e-12) <= value <= exact * (1 + 2e-8)


def test_the_certificate_follows_the_agents_enrolled_and_moves_the_tags(
    client: httpx.Client,
) -> None:
    created = create_experiment(client, id="cert", arms=["A", "B", "C"], **M3)
    assert (created["certified_agents"], created["certified_failure"]) == (0, 0.0)
    assert created["certificate"].startswith("The best arm cannot be voted out by error")
    # at the cap (DEXP_MAX_AGENTS, 10,000 by default) 3 of 10,000 agents erring is certain
    assert created["certified_failure_at_max_agents"] == 1.0

    doc, doc_tag = read(client, "/v1/experiments/cert")
    best, best_tag = read(client, "/v1/experiments/cert/best-arm")
    for count, total in ((4, 4), (8, 12)):
        enroll_agents(client, "cert", count)
        doc, new_doc_tag = read(client, "/v1/experiments/cert")
        best, new_best_tag = read(client, "/v1/experiments/cert/best-arm")
        assert new_doc_tag != doc_tag and new_best_tag != best_tag  # an enrollment moves them
        doc_tag, best_tag = new_doc_tag, new_best_tag
        assert doc["agents"] == doc["certified_agents"] == total
        assert bounds(doc["certified_failure"], exact_tail(total, 3, P))
        assert f"3 of the {total} agents to err" in doc["certificate"]
        assert {f: best[f] for f in FIELDS} == {f: doc[f] for f in FIELDS}

    # 4 agents: P(Bin(4, p) >= 3) = 0.029 <= delta; 12 agents: 0.46 > delta, and a warning says
    # what would certify it, each fix checked against the bound
    assert doc["certified_failure"] > 0.2
    (warning,) = [w for w in doc["warnings"] if w.startswith("certified failure")]
    assert warning == certify(AlgorithmConfig(**M3), 3, 12).warning()
    found = re.search(r"a threshold of (\d+) votes, .* or at most (\d+) agents would", warning)
    assert found is not None, warning
    threshold, agents = int(found.group(1)), int(found.group(2))
    assert certified_failure(12, threshold, P) <= 0.2 < certified_failure(12, threshold - 1, P)
    assert certified_failure(agents, 3, P) <= 0.2 < certified_failure(agents + 1, 3, P)


def test_a_tolerance_ce_and_dp_mase_get_their_own_bound(client: httpx.Client) -> None:
    create_experiment(client, id="tol", arms=["A", "B"], tolerance=1, **M3)  # threshold 3 + 1
    create_experiment(client, id="ce", arms=["A", "B", "C"], algorithm="ce", xi=0.05, **M3)
    create_experiment(client, id="dp", arms=["A", "B"], algorithm="dp-mase", delta=0.2)
    for experiment in ("tol", "ce", "dp"):
        enroll_agents(client, experiment, 6)
    tol, _ = read(client, "/v1/experiments/tol")
    # at most f = 1 liar: 3 of the 5 honest agents must err
    assert bounds(tol["certified_failure"], exact_tail(5, 3, P))
    assert "3 of the 5 honest agents (1 may lie)" in tol["certificate"]
    ce, _ = read(client, "/v1/experiments/ce")
    expected = certify(AlgorithmConfig(algorithm="ce", xi=0.05, **M3), 3, 6)
    assert ce["certified_failure"] == expected.failure
    assert "err and send that vote" in ce["certificate"]
    dp, _ = read(client, "/v1/experiments/dp/best-arm")  # beta = 0.5: M = 3
    assert bounds(dp["certified_failure"], exact_tail(6, 3, P))
    assert "That is the probability of a wrong answer." in dp["certificate"]


def test_a_decided_experiment_keeps_the_certificate_it_was_decided_with(
    client: httpx.Client,
) -> None:
    """Issue 37: identified with 3 agents, then 20 more enroll (a scale-up): the documents still
    certify the decision with its 3 agents, as its kept result says, not with 23."""
    create_experiment(client, id="kept", arms=["A", "B"], **M3)
    agents = enroll_agents(client, "kept", 3)
    for agent in agents:
        response = client.post(
            "/v1/experiments/kept/votes", json={"arm": 0, "epoch": 0}, headers=agent.headers
        )
        assert response.status_code == 200, response.text
    decided, _ = read(client, "/v1/experiments/kept")
    assert decided["status"] == "identified" and decided["certified_agents"] == 3
    enroll_agents(client, "kept", 20)
    doc, _ = read(client, "/v1/experiments/kept")
    best, _ = read(client, "/v1/experiments/kept/best-arm")
    assert doc["agents"] == 23 and doc["result"] == decided["result"]
    for fields in (doc, best):
        assert {f: fields[f] for f in FIELDS} == {f: decided[f] for f in FIELDS}
    assert bounds(doc["certified_failure"], exact_tail(3, 3, P)) and doc["certified_failure"] < 0.2
    assert not any(w.startswith("certified failure") for w in doc["warnings"])
    # the result says what it certified
    assert doc["result"]["certified_failure"] == decided["certified_failure"]
    assert doc["result"]["certificate"] == decided["certificate"]
