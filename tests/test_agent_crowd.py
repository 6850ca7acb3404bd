"""The agent's LDP parts without services (agent/crowd.py, agent/state.py): the arm drawn follows
the published allocation over the arms still in play, and the report on record survives a restart
(the same report is sent again, never another draw)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from agent.crowd import draw_arm
from agent.state import AgentRecord


def test_the_arm_is_drawn_from_the_allocation_over_the_remaining_arms() -> None:
    rng = np.random.default_rng(5)
    allocation = (0.6, 0.3, 0.1)
    draws = Counter(draw_arm(allocation, frozenset({0, 1, 2}), rng) for _ in range(20_000))
    for arm, weight in enumerate(allocation):
        assert draws[arm] / 20_000 == pytest.approx(weight, abs=0.015)
    # an arm that left (the view moved before the allocation was read again) is never drawn:
    # the weights of the others, renormalized
    draws = Counter(draw_arm(allocation, frozenset({1, 2}), rng) for _ in range(20_000))
    assert set(draws) == {1, 2} and draws[1] / 20_000 == pytest.approx(0.75, abs=0.015)


@pytest.mark.parametrize("allocation", [(), (0.0, 0.0, 1.0)])
def test_without_weight_on_the_remaining_arms_the_draw_is_uniform(
    allocation: tuple[float, ...],
) -> None:
    """No allocation read yet, or one that puts all its weight on an arm that left."""
    rng = np.random.default_rng(6)
    draws = Counter(draw_arm(allocation, frozenset({0, 1}), rng) for _ in range(20_000))
    assert set(draws) == {0, 1} and draws[0] / 20_000 == pytest.approx(0.5, abs=0.015)


def test_the_private_report_on_record_round_trips() -> None:
    record = AgentRecord("a-1", "token", private_sent=1, private_pending=(2, 0, 2))
    again = AgentRecord.from_json(record.to_json())
    assert again == record and again.private_pending == (2, 0, 2)
    # a voting agent's file is as before: no private key
    assert "private" not in AgentRecord("a-2", "token").to_json()
    assert AgentRecord.from_json(AgentRecord("a-2", "token").to_json()).private_sent == 0
