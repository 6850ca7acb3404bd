"""The timing attack on the public counters, replayed: can a reader who polls tell what one device
voted, knowing only when it sent its vote?

    python benchmarks/bench_timing_attack.py                  # 3 runs of 60 votes per setting
    python benchmarks/bench_timing_attack.py --runs 5 --json

Starts a real redis-server and one coordinator process per setting (benchmarks/bench_vote_path.py's
helpers), creates an experiment of 10 arms whose threshold no arm reaches, and enrolls 60 agents.
Each agent sends one vote, against an arm drawn with probabilities proportional to 1, 2, ..., 10
(worse arms get more votes, as in a real test), at exponential gaps (mean 0.1 s). Meanwhile the
attacker polls GET /v1/experiments/{id} as fast as one connection allows and records each change
of the votes per arm. For each vote it looks at the first change it saw after the vote was sent,
and guesses an arm in proportion to the increments of that change; its score for the vote is the
probability of guessing right (1: singled out). A vote after which it saw no change gets a blind
guess (0.10).

Two references: a blind guess (0.10), and the same guess from the final totals alone, what any
reader learns once the experiment is over (the votes' law, not their timing). Settings:

- every vote published at once (DEXP_PUBLISH_BATCH=1): what the audit measured (issue 23, point 5);
- the defaults (DEXP_PUBLISH_BATCH=10, DEXP_PUBLISH_CADENCE_SECONDS=5).

Prints, per setting, the mean score with a 95 % bootstrap interval over the votes of every run, and
the votes guessed exactly (a change that showed only the device's arm).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vote_path import EXPERIMENT, prepare, start_coordinator, start_redis, stop

ARMS, AGENTS = 10, 60
SETTINGS = {
    "every vote at once": {"DEXP_PUBLISH_BATCH": "1", "DEXP_PUBLISH_CADENCE_SECONDS": "0"},
    "defaults (batch 10, cadence 5 s)": {
        "DEXP_PUBLISH_BATCH": "10",
        "DEXP_PUBLISH_CADENCE_SECONDS": "5",
    },
}


class Poller(threading.Thread):
    """The attacker: polls the public state and keeps (time, votes per arm) at each change."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.changes: list[tuple[float, list[int]]] = []
        self.polls = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10, trust_env=False) as client:
            last: list[int] | None = None
            while not self.stopped.is_set():
                votes = client.get(f"/v1/experiments/{EXPERIMENT}").json()["votes"]
                self.polls += 1
                if votes != last:
                    self.changes.append((time.monotonic(), votes))
                    last = votes


def scores(
    sent: list[tuple[float, int]], changes: list[tuple[float, list[int]]]
) -> tuple[list[float], int]:
    """Each vote's score (module docstring) and the votes guessed exactly."""
    result, exact = [], 0
    for at, arm in sent:
        after = [i for i, (seen, _) in enumerate(changes) if seen > at and i > 0]
        if not after:
            result.append(1 / ARMS)
            continue
        i = after[0]
        delta = np.array(changes[i][1]) - np.array(changes[i - 1][1])
        delta = np.clip(delta, 0, None)
        if delta.sum() == 0:
            result.append(1 / ARMS)
            continue
        result.append(float(delta[arm] / delta.sum()))
        exact += int(delta[arm] == delta.sum())
    return result, exact


def one_run(env: dict[str, str], seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    law = np.arange(1, ARMS + 1) / np.arange(1, ARMS + 1).sum()
    os.environ.update(env)
    with tempfile.TemporaryDirectory() as directory:
        redis_process, redis_url = start_redis(directory)
        coordinator, url = start_coordinator(redis_url, None)
        try:
            tokens = prepare(url, ARMS, AGENTS)
            poller = Poller(url)
            poller.start()
            while not poller.changes:
                time.sleep(0.01)
            sent: list[tuple[float, int]] = []
            with httpx.Client(base_url=url, timeout=10, trust_env=False) as device:
                for token in tokens:
                    time.sleep(float(rng.exponential(0.1)))
                    arm = int(rng.choice(ARMS, p=law))
                    sent.append((time.monotonic(), arm))
                    device.post(
                        f"/v1/experiments/{EXPERIMENT}/votes",
                        json={"arm": arm},
                        headers={"Authorization": f"Bearer {token}"},
                    ).raise_for_status()
            time.sleep(0.5)
            poller.stopped.set()
            poller.join()
            run_scores, exact = scores(sent, poller.changes)
            totals = np.bincount([arm for _, arm in sent], minlength=ARMS)
            prior = [float(totals[arm] / totals.sum()) for _, arm in sent]
            return {
                "scores": run_scores,
                "exact": exact,
                "prior": prior,
                "changes": len(poller.changes) - 1,
                "polls_per_second": poller.polls / max(1e-9, sent[-1][0] - sent[0][0] + 0.5),
            }
        finally:
            stop(coordinator)
            stop(redis_process)


def interval(values: list[float], rng: np.random.Generator) -> tuple[float, float, float]:
    data = np.array(values)
    means = rng.choice(data, size=(2000, len(data))).mean(axis=1)
    return float(data.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    report: dict[str, Any] = {}
    for name, env in SETTINGS.items():
        runs = [one_run(env, seed) for seed in range(args.runs)]
        all_scores = [s for run in runs for s in run["scores"]]
        prior = [s for run in runs for s in run["prior"]]
        report[name] = {
            "votes": len(all_scores),
            "score": interval(all_scores, rng),
            "exact": sum(run["exact"] for run in runs),
            "from the totals": interval(prior, rng),
            "changes seen": sum(run["changes"] for run in runs),
            "polls per second": round(float(np.mean([r["polls_per_second"] for r in runs]))),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{ARMS} arms, {AGENTS} votes per run, {args.runs} runs; a blind guess scores 0.10")
    for name, row in report.items():
        mean, low, high = row["score"]
        prior_mean, prior_low, prior_high = row["from the totals"]
        print(
            f"{name}: mean score {mean:.2f} [{low:.2f}, {high:.2f}], {row['exact']} of "
            f"{row['votes']} votes exactly, {row['changes seen']} changes seen at "
            f"{row['polls per second']} polls/s; from the totals alone {prior_mean:.2f} "
            f"[{prior_low:.2f}, {prior_high:.2f}]"
        )


if __name__ == "__main__":
    main()
