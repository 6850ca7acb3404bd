"""Byzantine (lying) agents against the services, over real HTTP: the tolerance f of an experiment.

An experiment with M = 5 (eta = 0.5, delta = 0.05: ceil(log 0.05 / log 0.5) = ceil(4.32) = 5) and
3 arms, arm 0 the best. f = M attackers, enrolled through the API like any agent, vote against the
best arm; honest agents vote against the two others (what honest DE agents end up doing when
their local runs succeed). The attackers vote first, the worst case for the experiment.

- tolerance 0 (the papers' threshold M): the attackers alone bring the best arm to M votes and
  remove it, deterministically: the experiment returns a wrong arm;
- tolerance f (threshold M + f): the attackers' f votes never reach M + f, the honest votes
  remove the two other arms, and the best arm is identified; GET .../suspects lists exactly the
  attackers, the agents that voted against the identified arm.
"""

from __future__ import annotations

import httpx
import pytest

from .helpers import Agent, admin_headers, create_experiment, enroll_agents

M = 5
F = M  # attackers
ARMS = ["best", "middle", "worst"]
BEST = 0


def vote(client: httpx.Client, exp: str, agent: Agent, arm: int) -> dict:
    response = client.post(
        f"/v1/experiments/{exp}/votes", json={"arm": arm, "epoch": 0}, headers=agent.headers
    )
    assert response.status_code == 200, response.text
    body: dict = response.json()
    return body


def attack(client: httpx.Client, exp: str, tolerance: int) -> tuple[list[Agent], list[Agent]]:
    """Create `exp` with the tolerance, enroll F attackers and M + tolerance honest agents, let
    the attackers vote against the best arm, then the honest agents against the worst arms."""
    created = create_experiment(client, id=exp, arms=ARMS, eta=0.5, delta=0.05, tolerance=tolerance)
    assert created["threshold"] == M + tolerance
    assert created["params"]["tolerance"] == tolerance
    attackers = enroll_agents(client, exp, F)
    honest = enroll_agents(client, exp, M + tolerance)
    for agent in attackers:
        vote(client, exp, agent, BEST)
    for arm in (2, 1):
        for agent in honest:
            vote(client, exp, agent, arm)
    return attackers, honest


def test_without_tolerance_f_attackers_remove_the_best_arm(client: httpx.Client) -> None:
    attackers, honest = attack(client, "byz0", tolerance=0)
    state = client.get("/v1/experiments/byz0").json()
    first = state["eliminations"][0]
    assert (first["arm"], first["votes"]) == (BEST, M), "the attackers' votes alone remove it"
    voters = client.get("/v1/experiments/byz0/voters", headers=admin_headers()).json()
    assert voters["voters"][BEST] == sorted(a.agent_id for a in attackers)
    best = client.get("/v1/experiments/byz0/best-arm").json()
    assert best["status"] == "identified"
    assert best["best_arm"]["index"] != BEST  # a wrong answer
    # the honest agents voted against the arm returned: suspects point at them, not the liars
    suspects = client.get("/v1/experiments/byz0/suspects", headers=admin_headers()).json()
    assert suspects["reference_arm"] == best["best_arm"]
    assert {s["agent_id"] for s in suspects["suspects"]} <= {a.agent_id for a in honest}


def test_with_tolerance_f_the_best_arm_survives_and_the_attackers_are_suspects(
    client: httpx.Client,
) -> None:
    attackers, _ = attack(client, "byzf", tolerance=F)
    state = client.get("/v1/experiments/byzf").json()
    assert state["votes"][BEST] == F < state["threshold"] == M + F
    assert [e["arm"] for e in state["eliminations"]] == [2, 1]
    assert all(e["votes"] == M + F for e in state["eliminations"])
    best = client.get("/v1/experiments/byzf/best-arm").json()
    assert best["status"] == "identified"
    assert best["best_arm"] == {"index": BEST, "name": "best"}

    response = client.get("/v1/experiments/byzf/suspects", headers=admin_headers())
    assert response.status_code == 200
    suspects = response.json()
    assert suspects["status"] == "identified"
    assert suspects["reference_arm"] == {"index": BEST, "name": "best"}
    assert suspects["tolerance"] == F
    assert suspects["suspects"] == [
        {"agent_id": agent_id, "votes": 1, "voted_against": [BEST]}
        for agent_id in sorted(a.agent_id for a in attackers)
    ]


def test_suspects_while_exploring_are_the_voters_against_the_leading_arm(
    client: httpx.Client,
) -> None:
    create_experiment(client, id="lead", arms=ARMS, eta=0.5, delta=0.05, tolerance=2)
    a, b, c = enroll_agents(client, "lead", 3)
    empty = client.get("/v1/experiments/lead/suspects", headers=admin_headers()).json()
    assert empty["status"] == "exploring"
    assert empty["reference_arm"]["index"] == 0 and empty["suspects"] == []  # ties: lowest index
    vote(client, "lead", a, 0)
    vote(client, "lead", a, 2)
    vote(client, "lead", b, 0)
    vote(client, "lead", c, 2)
    vote(client, "lead", c, 1)
    # votes [2, 1, 2]: the leading arm is 1, and c voted against it
    body = client.get("/v1/experiments/lead/suspects", headers=admin_headers()).json()
    assert body["reference_arm"] == {"index": 1, "name": "middle"}
    assert body["suspects"] == [{"agent_id": c.agent_id, "votes": 2, "voted_against": [1, 2]}]


@pytest.mark.parametrize("tolerance", [-1, 1.5, True, "1", None])
def test_tolerance_must_be_a_non_negative_integer(client: httpx.Client, tolerance: object) -> None:
    response = client.post(
        "/v1/experiments",
        json={"id": "bad", "arms": ARMS, "tolerance": tolerance},
        headers=admin_headers(),
    )
    assert response.status_code == 422, response.text
    assert "tolerance" in response.json()["detail"]
    assert client.get("/v1/experiments/bad").status_code == 404
