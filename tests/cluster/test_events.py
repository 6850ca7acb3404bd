"""The device path on a Redis Cluster: the event stream (one subscription, classic pub/sub, which a
cluster forwards to every node) and the cacheable reads (no revision cache there: each conditional
read asks the experiment's master)."""

from __future__ import annotations

import httpx

from tests.services.helpers import ThreadedCoordinator, admin_headers, create_experiment
from tests.services.helpers import enroll_agents as enroll
from tests.services.sse import Stream

ARMS = ["A", "B", "C"]
M2 = {"delta": 0.5**1.5, "eta": 0.5}  # DE: M = 2


def test_events_and_304s_on_the_cluster(
    client: httpx.Client, coordinator_server: ThreadedCoordinator
) -> None:
    exp = "events-cluster"
    create_experiment(client, id=exp, arms=ARMS, **M2)
    a, b = enroll(client, exp, 2)
    assert coordinator_server.server.config.app.state.revisions.url is None  # no tracking here
    path = f"/v1/experiments/{exp}"
    tag = client.get(path).headers["etag"]
    assert client.get(path, headers={"If-None-Match": tag}).status_code == 304
    with Stream(coordinator_server.url, path + "/events") as stream:
        first = stream.next_event()
        assert first.json()["remaining_arms"] == [0, 1, 2]
        for agent in (a, b):
            answer = client.post(
                path + "/votes", json={"arm": 2, "epoch": 0}, headers=agent.headers
            )
            assert answer.status_code == 200, answer.text
        after = stream.next_event()
        assert (after.json()["version"], after.json()["remaining_arms"]) == (1, [0, 1])
        assert client.get(path, headers={"If-None-Match": tag}).status_code == 200
        assert client.delete(path, headers=admin_headers()).status_code == 204
        assert [b.event for b in stream.ended() if b.is_event] == ["deleted"]
