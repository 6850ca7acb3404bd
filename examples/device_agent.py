"""A device agent, end to end: a shop's web page testing banners on its visitors.

Each run of this program is one device (one agent). Its rewards come from a source of its own: a
simulated visitor who clicks each banner with the probability that click_rates.csv gives. The
rewards and the local statistics stay in this process; what leaves it is the enrollment, votes
(an arm index and an epoch) and reads of the experiment's public state (docs/DEVICES.md).

    python examples/device_agent.py --coordinator http://127.0.0.1:8000 --experiment banners \\
        --ticket ticket.banners.… --state-file banners-agent.json

Run again with the same --state-file, it is the same agent (no ticket needed). It needs the
coordinator only: no Redis. It prints one JSON line with what the coordinator counted of its votes
(GET /v1/agents/me) when it ends: by default (--until settled) once it has its own answer (one
banner left in its local set, the two others voted against), which one device reaches alone
within seconds; with --until done, once the experiment ends (the best banner identified, a tie,
or the experiment deleted), which takes `threshold` devices voting against each other banner; or
after --max-visits visits. What to expect of one device: its votes `counted` while the experiment
is still `exploring`, and the public counts (the dashboard) not moving yet: they are published
`publish_batch` counted messages at a time, `waiting` says how many wait.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from agent.device import DeviceAgent, ExperimentGone


def click_rates(path: Path) -> dict[str, float]:
    """The simulated visitor: each banner's click probability, by name."""
    with path.open(newline="") as rows:
        return {row["arm"]: float(row["click_rate"]) for row in csv.DictReader(rows)}


def main() -> None:
    here = Path(__file__).parent
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Prints one JSON line when --until is met or after --max-visits visits. "
        "docs/DEVICES.md is the guide.",
    )
    parser.add_argument(
        "--coordinator",
        default=os.environ.get("DEXP_COORDINATOR_URL", ""),
        help="the coordinator's URL (required; default: DEXP_COORDINATOR_URL)",
    )
    parser.add_argument(
        "--experiment",
        default="banners",
        help="the experiment this device joins (default: banners)",
    )
    parser.add_argument(
        "--ticket",
        default=os.environ.get("DEXP_TICKET"),
        help="a one-time enrollment ticket for the experiment (`dexp tickets issue`; default: "
        "DEXP_TICKET); not needed once the state file holds the agent",
    )
    parser.add_argument(
        "--state-file",
        type=Path,
        default=Path("banners-agent.json"),
        help="where the agent keeps its id, token and votes (never a reward): run again with the "
        "same file, it is the same agent (default: banners-agent.json)",
    )
    parser.add_argument(
        "--rates",
        type=Path,
        default=here / "click_rates.csv",
        help="the simulated visitor: a CSV of arm,click_rate (each banner's click probability; default: examples/click_rates.csv)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed of the visitor's clicks (default: fresh)"
    )
    parser.add_argument(
        "--max-visits",
        type=int,
        default=1_000_000,
        help="stop after this many visits (default: 1,000,000)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=30.0,
        help="how often the global set is polled while its event stream is down (default: 30)",
    )
    parser.add_argument(
        "--until",
        choices=("settled", "done"),
        default="settled",
        help="settled (default): stop at this device's own answer, which one device reaches; "
        "done: stop when the experiment is identified or tied, which takes threshold devices",
    )
    args = parser.parse_args()
    if not args.coordinator:
        parser.error("--coordinator (or DEXP_COORDINATOR_URL) is required")
    rates = click_rates(args.rates)
    visitor = np.random.default_rng(args.seed)

    agent = DeviceAgent.enroll(
        args.coordinator,
        args.experiment,
        ticket=args.ticket,
        state_file=args.state_file,
        poll_seconds=args.poll_seconds,
    )
    visits = 0
    counted: dict[str, Any] = {}
    try:
        while not agent.done and visits < args.max_visits:
            arms = agent.choose()  # the banners to show this visitor (usually one)
            if agent.settled:  # one banner left locally: nothing to learn until the rest moves
                if args.until == "settled":
                    break
                agent.wait_for_change(timeout=5.0)
                continue
            clicks = [float(visitor.random() < rates[agent.arms[arm]]) for arm in arms]
            agent.observe(arms, clicks)  # the clicks stay here; maybe a vote leaves
            visits += 1
        counted = agent.me()  # its own votes as counted, published or not yet
    except ExperimentGone:
        pass
    finally:
        agent.close()
    follower = agent.follower
    best = agent.best_arm
    print(
        json.dumps(
            {
                "agent_id": agent.agent_id,
                "resumed": agent.resumed,
                "status": agent.status,
                "best_arm": None if best is None else agent.arms[best],
                "visits": visits,
                "votes_sent": agent.votes_sent,
                "settled": agent.settled,
                "counted": [
                    {"arm": agent.arms[vote["arm"]], "outcome": vote["outcome"]}
                    for vote in counted.get("votes", [])
                ],
                "waiting": counted.get("waiting"),
                "publish_batch": counted.get("publish_batch"),
                "follower": None
                if follower is None
                else {
                    "streams": follower.streams,
                    "events": follower.events,
                    "polls": follower.polls,
                    "not_modified": follower.not_modified,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
