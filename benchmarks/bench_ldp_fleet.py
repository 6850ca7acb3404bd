"""LDP with one-visit devices over HTTP only: each reports once, to an identified arm (docs/LDP.md).

    python benchmarks/bench_ldp_fleet.py                       # 100,000 devices, 1,000 subscribers
    python benchmarks/bench_ldp_fleet.py --devices 3000 --subscribers 200 --compare 5000  # a look
    python benchmarks/bench_ldp_fleet.py --devices 100000 --json

bench_fleet.py's set-up, reused by import: a real redis-server and ONE coordinator process
(`python -m coordinator`, one uvicorn worker, bench_vote_path.py's helpers) set up as in
production (DEXP_ENVIRONMENT=production: open enrollment off, one-time tickets from the admin API),
and --processes client processes (bench_fleet's: no Redis variable in their environment, no Redis
client imported, both asserted; asyncio on raw sockets, keep-alive pools). Three phases:

1. Subscribers. --subscribers event streams (GET /v1/experiments/ldp/events) from loopback
   addresses of their own (127.x.y.z), held during the run, spread over the client processes.
2. The devices. Experiment `ldp` (algorithm ldp, Bernoulli arms of means --means, epsilon 0.05,
   delta 0.05, dp_epsilon chosen so that identification needs about half the devices' reports:
   common.simulation.ldp's engine says how many it needs, printed). --devices tickets are issued
   by the admin API. Each device, one visit: it enrolls with its own ticket, reads the document
   (GET /v1/experiments/ldp with If-None-Match: the ETag its client process saw last, as a shared
   HTTP cache revalidates; a 304 reads the allocation from that cache), draws an arm from the
   allocation, draws a Bernoulli reward from the arm's mean in its process (never sent), makes
   the bit with common.ldp.Mechanism.privatize and sends its one report (POST .../reports,
   seq 1). Every request goes over the process's pool of keep-alive connections (POOL
   connections, one request in flight on each). A process stops starting devices once it knows
   the experiment is decided (one of its streams, a document or a 409 says so). Coordinator CPU
   over the phase (/proc), per device visit and per report.
   The deciding publication's delay: its event id is '<ms>-<seq>' from Redis's clock, the
   delivery's arrival the subscriber's clock (the same machine's). Which report decided is not
   in any answer (the reply says nothing of publications: docs/PRIVACY.md), so it is attributed:
   the reports counted whose request was sent before the decision's event time and answered after
   it were in flight when it was taken, and the deciding one is among them (its batch's last
   report decides, in its own request): the delay from its send is given for the earliest and the
   latest of them.
3. Reports against votes, on the same coordinator and the same pools: --compare agents of a
   second LDP experiment (`reports`: equal means, dp_epsilon 0.1, epsilon 0.01: it decides
   nothing within them) send one report each, and --compare votes come from --compare / 4 agents
   of a DE experiment (`votes`, 4 arms, eta 0.999, delta 0.001: M = 6,905, no arm leaves), each
   voting once on every arm; both sets enroll with tickets first. Reports and votes per
   coordinator CPU-second, measured the same way, one after the other.

Every phase is bounded by --timeout; the driver stops every process it started. Clients, Redis and
the coordinator share this machine's cores: the per coordinator CPU-second figures are the ones
that carry to another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import signal
import socket
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fleet import (
    POOL,
    Clients,
    Pool,
    Stream,
    create,
    event_ms,
    open_streams,
    raise_fd_limit,
    redis_variables,
    retry_after,
    split,
    spread,
    streams_closed,
    tickets,
)
from bench_vote_path import ADMIN, cpu_seconds, percentile_ms, start_coordinator, start_redis, stop

from common.ldp import Mechanism

LDP, REPORTS, VOTES = "ldp", "reports", "votes"
EPSILON, DELTA = 0.05, 0.05  # the LDP experiment's accuracy and failure probability
SHARE = 0.5  # dp_epsilon is chosen so that identification needs this share of the devices' reports
WORKERS = 2 * POOL  # devices in their visit at once, per client process
COMPARE_ARMS = 4  # the vote experiment's arms (each vote agent votes once on each)


# -- the client processes ----------------------------------------------------------------------
def head_value(head: bytes, name: bytes) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip().decode()
    return None


class Cache:
    """The document as the client process saw it last: a shared HTTP cache, revalidated by every
    device with If-None-Match."""

    def __init__(self) -> None:
        self.etag = ""
        self.document: dict[str, Any] = {}


class Visits:
    """What one client process counts while its devices visit."""

    def __init__(self) -> None:
        self.enrolled = 0
        self.enrolled_after_decision = 0  # enrolled, then saw the experiment decided: no report
        self.reads: dict[str, int] = {}
        self.reports: dict[str, int] = {}
        self.refused_503 = 0
        self.errors: dict[int, str] = {}
        self.counted: list[tuple[float, float]] = []  # (sent, answered), time.time(), per report
        self.latencies: dict[str, list[float]] = {"enroll": [], "read": [], "report": []}
        self.first = float("inf")
        self.last = 0.0


async def call(
    pool: Pool, visits: Visits, kind: str, method: str, path: str, token: str = "",
    body: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
) -> tuple[int, bytes, bytes, float, float]:  # fmt: skip
    """One request, sent again after a 503 or 429 (nothing was applied) or a keep-alive connection
    the server closed (every request here is safe to repeat); (status, head, body, sent, took)."""
    for _ in range(30):
        try:
            head, answer, sent, took = await pool.exchange(method, path, token, body, headers)
        except (OSError, asyncio.IncompleteReadError):
            continue
        status = int(head[9:12])
        visits.first, visits.last = min(visits.first, sent), max(visits.last, sent + took)
        visits.latencies[kind].append(took)
        if status not in (429, 503):
            return status, head, answer, sent, took
        visits.refused_503 += status == 503
        await asyncio.sleep(retry_after(head))
    raise RuntimeError(f"{method} {path}: refused 30 times")


async def enroll(pool: Pool, visits: Visits, experiment: str, ticket: str) -> str:
    status, _, answer, _, _ = await call(
        pool, visits, "enroll", "POST", "/v1/agents", ticket, {"experiment": experiment}
    )
    if status != 201:
        raise RuntimeError(f"enrollment: HTTP {status} {answer!r}")
    visits.enrolled += 1
    return str(json.loads(answer)["token"])


async def visit(
    pool: Pool, visits: Visits, cache: Cache, ticket: str, rng: random.Random,
    mechanism: Mechanism, means: list[float], decided: asyncio.Event,
) -> None:  # fmt: skip
    """One device's one visit: enroll, read the allocation, play, privatize, report once."""
    token = await enroll(pool, visits, LDP, ticket)
    tag = cache.etag
    status, head, answer, _, _ = await call(
        pool, visits, "read", "GET", f"/v1/experiments/{LDP}", "",
        None, {"If-None-Match": tag} if tag else None,
    )  # fmt: skip
    if status == 200:
        document = json.loads(answer)
        cache.etag, cache.document = head_value(head, b"etag") or "", document
    elif status == 304:
        document = cache.document
    else:
        raise RuntimeError(f"read: HTTP {status} {answer!r}")
    visits.reads[str(status)] = visits.reads.get(str(status), 0) + 1
    if document["status"] != "exploring":
        decided.set()
        visits.enrolled_after_decision += 1
        return
    arm = rng.choices(range(len(means)), weights=document["allocation"])[0]
    reward = 1.0 if rng.random() < means[arm] else 0.0  # drawn on the device, never sent
    bit = mechanism.privatize(reward, rng.random(), rng.random())
    status, _, answer, sent, took = await call(
        pool, visits, "report", "POST", f"/v1/experiments/{LDP}/reports", token,
        {"arm": arm, "bit": bit, "seq": 1},
    )  # fmt: skip
    if status == 200:
        outcome = str(json.loads(answer)["outcome"])
        if outcome == "counted":
            visits.counted.append((sent, sent + took))
    elif status == 409:  # decided between its read and its report
        outcome = "409 decided" if b"decided" in answer else "409"
        decided.set()
    else:
        outcome = f"http {status}"
        visits.errors.setdefault(status, answer.decode(errors="replace"))
    visits.reports[outcome] = visits.reports.get(outcome, 0) + 1


async def devices(
    host: str, port: int, arguments: dict[str, Any], decided: asyncio.Event, number: int
) -> Visits:
    """The process's devices, WORKERS at a time, until they run out or the experiment is decided."""
    pool, visits, cache = Pool(host, port, POOL), Visits(), Cache()
    mechanism = Mechanism(arguments["dp_epsilon"])
    rng = random.Random(f"{arguments['seed']}-{number}")
    todo = iter(arguments["tickets"])

    async def worker() -> None:
        for ticket in todo:
            if decided.is_set():
                return
            await visit(pool, visits, cache, ticket, rng, mechanism, arguments["means"], decided)

    try:
        await asyncio.wait_for(
            asyncio.gather(*(worker() for _ in range(WORKERS))), arguments["timeout"]
        )
    finally:
        pool.close()
    return visits


async def flood(host: str, port: int, arguments: dict[str, Any], tokens: list[str]) -> Visits:
    """Reports (one per agent) or votes (one per agent and arm, arm by arm) from enrolled agents."""
    pool, visits = Pool(host, port, POOL), Visits()
    rng = random.Random(arguments["seed"])
    experiment, kind = arguments["experiment"], arguments["kind"]
    if kind == "report":
        path = f"/v1/experiments/{experiment}/reports"
        work = [(t, {"arm": rng.randrange(COMPARE_ARMS), "bit": rng.randrange(2), "seq": 1})
                for t in tokens]  # fmt: skip
    else:
        path = f"/v1/experiments/{experiment}/votes"
        work = [(t, {"arm": arm, "epoch": 0}) for arm in range(COMPARE_ARMS) for t in tokens]
    todo = iter(work)

    async def worker() -> None:
        for token, body in todo:
            status, _, answer, _, _ = await call(pool, visits, "report", "POST", path, token, body)
            outcome = str(json.loads(answer).get("outcome")) if status == 200 else f"http {status}"
            if status != 200:
                visits.errors.setdefault(status, answer.decode(errors="replace"))
            visits.reports[outcome] = visits.reports.get(outcome, 0) + 1

    try:
        await asyncio.wait_for(
            asyncio.gather(*(worker() for _ in range(POOL))), arguments["timeout"]
        )
    finally:
        pool.close()
    return visits


async def enroll_all(host: str, port: int, arguments: dict[str, Any]) -> tuple[list[str], int]:
    """Enroll one agent per ticket over the pool: (their tokens, 503s retried)."""
    pool, visits = Pool(host, port, POOL), Visits()
    todo = iter(arguments["tickets"])
    mine: list[str] = []

    async def enroller() -> None:
        for ticket in todo:
            mine.append(await enroll(pool, visits, arguments["experiment"], ticket))

    try:
        await asyncio.wait_for(
            asyncio.gather(*(enroller() for _ in range(POOL))), arguments["timeout"]
        )
    finally:
        pool.close()
    return mine, visits.refused_503


def visits_reply(visits: Visits) -> dict[str, Any]:
    return {
        "enrolled": visits.enrolled,
        "enrolled_after_decision": visits.enrolled_after_decision,
        "reads": visits.reads,
        "reports": visits.reports,
        "refused_503": visits.refused_503,
        "errors": visits.errors,
        "counted": visits.counted,
        "latencies": visits.latencies,
        "first": visits.first,
        "last": visits.last,
    }


async def client_main(number: int, url: str, commands: Connection) -> None:
    """One client process: does what the driver asks, answers each command when it is done."""
    host, port_text = url.removeprefix("http://").split(":")
    port = int(port_text)
    loop = asyncio.get_running_loop()
    decided = asyncio.Event()
    streams: list[Stream] = []
    identified: dict[int, tuple[str, float]] = {}  # stream index -> (event id, arrival ms)
    tokens: dict[str, list[str]] = {}

    def watcher(index: int) -> Any:
        def on_state(state: dict[str, Any]) -> None:
            if state["status"] != "exploring":
                decided.set()
                stream = by_index[index]
                if index not in identified and len(stream.received) > 1:
                    identified[index] = stream.received[-1]

        return on_state

    by_index: dict[int, Stream] = {}
    while True:
        command, arguments = await loop.run_in_executor(None, commands.recv)
        if command == "exit":
            break
        began = time.time()
        reply: Any = None
        if command == "subscribe":
            fresh = [Stream(i, watcher(i)) for i in arguments["indices"]]
            by_index.update((s.index, s) for s in fresh)
            await open_streams(host, port, LDP, fresh, arguments["timeout"])
            streams += fresh
            reply = sum(s.refused for s in fresh)
        elif command == "visit":
            reply = visits_reply(await devices(host, port, arguments, decided, number))
        elif command == "deliveries":  # every change after each stream's first state
            deadline = time.monotonic() + arguments["timeout"]
            while len(identified) < len(streams) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            reply = {
                "identified": list(identified.values()),
                "missing": len(streams) - len(identified),
                "changes": [r for s in streams for r in s.received[1:]],
            }
        elif command == "enroll":
            tokens[arguments["experiment"]], reply = await enroll_all(host, port, arguments)
        elif command == "flood":
            visits = await flood(host, port, arguments, tokens[arguments["experiment"]])
            reply = visits_reply(visits)
        elif command == "close":
            for s in streams:
                s.close()
            streams = []
        else:
            raise ValueError(command)
        commands.send((number, time.time() - began, began, reply))
    assert "redis" not in sys.modules, "a client process imported a Redis client"


# -- the driver --------------------------------------------------------------------------------
def sizing(
    means: list[float], devices: int, runs: int, seed: int, dp_epsilon: float | None
) -> dict[str, Any]:
    """dp_epsilon such that identification needs about SHARE of the devices' reports, from
    common.simulation.ldp's engine (the coordinator's rule, a publication every 10 reports): a
    first guess from the reports' 1 / tanh(dp_epsilon / 2)^2 law, corrected once on `runs` runs;
    then `runs` runs at the choice say how many reports it takes."""
    from common.algorithms import AlgorithmConfig
    from common.environments import Environment
    from common.simulation import ldp as engine
    from common.simulation.config import SimulationConfig

    def reports(dp: float, first: int) -> list[int]:
        algorithm = AlgorithmConfig(algorithm="ldp", dp_epsilon=dp, epsilon=EPSILON, delta=DELTA)
        config = SimulationConfig(Environment(tuple(means)), algorithm, n_agents=10**6)
        return [engine.run_trial(config, first + i).messages for i in range(runs)]

    target = SHARE * devices
    if dp_epsilon is None:
        law = 494.0  # reports x tanh(dp_epsilon / 2)^2 for means 0.8, 0.6, 0.5, 0.4 (the engine)
        scale = min(0.99, math.sqrt(law / target))
        dp_epsilon = 2 * math.atanh(scale)
        if runs:
            law = float(np.mean(reports(dp_epsilon, seed + 1000))) * scale**2
            dp_epsilon = 2 * math.atanh(min(0.99, math.sqrt(law / target)))
        dp_epsilon = min(10.0, round(dp_epsilon, 3))
    taken = reports(dp_epsilon, seed) if runs else []
    return {
        "dp_epsilon": dp_epsilon,
        "target_reports": target,
        "engine_reports": taken,
        "engine_mean": float(np.mean(taken)) if taken else float("nan"),
        "engine_max": max(taken) if taken else 0,
    }


def machine() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as info:
        memory = int(info.readline().split()[1]) / 2**20
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(memory, 1),
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
    }


def latency(values: list[float]) -> dict[str, float]:
    array = np.array(values)
    return {"p50": percentile_ms(array, 50), "p99": percentile_ms(array, 99)}


def merged(replies: list[dict[str, Any]], field: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in replies:
        for k, v in r[field].items():
            out[k] = out.get(k, 0) + v
    return out


def phase_devices(
    client: httpx.Client, clients: Clients, args: argparse.Namespace, means: list[float],
    dp_epsilon: float, server: int,
) -> dict[str, Any]:  # fmt: skip
    processes = len(clients.pipes)
    created = create(
        client, LDP, len(means), algorithm="ldp", dp_epsilon=dp_epsilon, epsilon=EPSILON,
        delta=DELTA, rewards="bernoulli",
    )  # fmt: skip
    t0 = time.perf_counter()
    issued = tickets(client, LDP, args.devices)
    tickets_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    refused = clients.ask(
        "subscribe", [{"indices": i} for i in split(list(range(args.subscribers)), processes)],
        args.timeout,
    )  # fmt: skip
    subscribe_s = time.perf_counter() - t0
    cpu0, t0 = cpu_seconds(server), time.perf_counter()
    replies = [
        r
        for _, _, r in clients.ask(
            "visit",
            [
                {"tickets": t, "means": means, "dp_epsilon": dp_epsilon, "seed": args.seed}
                for t in split(issued, processes)
            ],
            args.timeout,
        )
    ]
    visit_s, visit_cpu = time.perf_counter() - t0, cpu_seconds(server) - cpu0
    final = client.get(f"/v1/experiments/{LDP}").json()
    best = client.get(f"/v1/experiments/{LDP}/best-arm").json()
    # the deciding publication: the event whose state is no longer exploring
    wait = min(60.0, args.timeout) if final["status"] != "exploring" else 0.0
    got = [r for _, _, r in clients.ask("deliveries", [{}] * processes, wait)]
    arrivals = [(e, a) for r in got for e, a in r["identified"]]
    event_ids = sorted({e for e, _ in arrivals})
    decision_ms = event_ms(event_ids[0]) if event_ids else float("nan")
    counted = [c for r in replies for c in r["counted"]]
    in_flight = [(s, a) for s, a in counted if s * 1000 <= decision_ms <= a * 1000]
    delays = [a - event_ms(e) for e, a in arrivals]
    figures: dict[str, Any] = {
        "experiment": {k: created[k] for k in ("params", "user_privacy", "certified_failure")},
        "tickets_s": tickets_s,
        "subscribers": args.subscribers,
        "subscribers_opened_in_s": subscribe_s,
        "subscribers_refused_503": sum(r for _, _, r in refused),
        "devices": args.devices,
        "enrolled": sum(r["enrolled"] for r in replies),
        "enrolled_after_decision": sum(r["enrolled_after_decision"] for r in replies),
        "reads": merged(replies, "reads"),
        "reports": merged(replies, "reports"),
        "reported": len(counted),
        "refused_503": sum(r["refused_503"] for r in replies),
        "errors": {k: v for r in replies for k, v in r["errors"].items()},
        "wall_s": visit_s,
        "requests_window_s": max(r["last"] for r in replies) - min(r["first"] for r in replies),
        "server_cpu_s": visit_cpu,
        "latency_ms": {
            kind: latency([x for r in replies for x in r["latencies"][kind]])
            for kind in ("enroll", "read", "report")
        },
        "status": final["status"],
        "best_arm": best.get("best_arm"),
        "reports_total": final.get("reports_total"),
        "final_reports": final.get("reports"),
        "estimates": [e.get("ci") for e in final.get("estimates") or []],
        "events": [[e, event_ms(e)] for e in event_ids],
        "changes_delivered": spread([a - event_ms(e) for r in got for e, a in r["changes"]]),
        "decision": spread(delays),
        "decision_missing": sum(r["missing"] for r in got),
        "in_flight_at_decision": len(in_flight),
    }
    if in_flight:
        earliest = min(s for s, _ in in_flight) * 1000
        latest = max(s for s, _ in in_flight) * 1000
        figures["from_report_earliest"] = spread([a - earliest for _, a in arrivals])
        figures["from_report_latest"] = spread([a - latest for _, a in arrivals])
        figures["decision_after_report_ms"] = [decision_ms - latest, decision_ms - earliest]
    return figures


def phase_compare(
    client: httpx.Client, clients: Clients, args: argparse.Namespace, server: int
) -> dict[str, Any]:
    """Reports against votes per coordinator CPU-second: same pools, same clients, one after the
    other."""
    processes = len(clients.pipes)
    create(
        client, REPORTS, COMPARE_ARMS, algorithm="ldp", dp_epsilon=0.1, epsilon=0.01, delta=DELTA,
        rewards="bernoulli",
    )  # fmt: skip
    votes = create(client, VOTES, COMPARE_ARMS, eta=0.999, delta=0.001)
    out: dict[str, Any] = {"vote_threshold": votes["threshold"]}
    for experiment, agents in ((REPORTS, args.compare), (VOTES, args.compare // COMPARE_ARMS)):
        issued = tickets(client, experiment, agents)
        cpu0, t0 = cpu_seconds(server), time.perf_counter()
        clients.ask(
            "enroll",
            [{"tickets": t, "experiment": experiment} for t in split(issued, processes)],
            args.timeout,
        )
        cpu, wall = cpu_seconds(server) - cpu0, time.perf_counter() - t0
        out[f"{experiment}_enrollments"] = {
            "agents": agents, "wall_s": wall, "server_cpu_s": cpu,
            "per_server_cpu_s": agents / cpu if cpu else float("nan"),
        }  # fmt: skip
    for experiment, kind in ((REPORTS, "report"), (VOTES, "vote")):
        cpu0, t0 = cpu_seconds(server), time.perf_counter()
        replies = [
            r
            for _, _, r in clients.ask(
                "flood",
                [
                    {"experiment": experiment, "kind": kind, "seed": args.seed + p}
                    for p in range(processes)
                ],
                args.timeout,
            )
        ]
        cpu, wall = cpu_seconds(server) - cpu0, time.perf_counter() - t0
        latencies = np.array([x for r in replies for x in r["latencies"]["report"]])
        outcomes = merged(replies, "reports")
        sent = sum(outcomes.values())
        out[kind] = {
            "sent": sent,
            "outcomes": outcomes,
            "errors": {k: v for r in replies for k, v in r["errors"].items()},
            "refused_503": sum(r["refused_503"] for r in replies),
            "wall_s": wall,
            "per_s": sent / wall,
            "server_cpu_s": cpu,
            "per_server_cpu_s": sent / cpu if cpu else float("nan"),
            "p50_ms": percentile_ms(latencies, 50),
            "p99_ms": percentile_ms(latencies, 99),
        }
    out["report_state"] = {
        k: v
        for k, v in client.get(f"/v1/experiments/{REPORTS}").json().items()
        if k in ("status", "reports_total", "remaining_arms")
    }
    out["vote_state"] = {
        k: v
        for k, v in client.get(f"/v1/experiments/{VOTES}").json().items()
        if k in ("status", "votes", "remaining_arms")
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--devices", type=int, default=100_000, help="one-visit devices")
    parser.add_argument("--subscribers", type=int, default=1000, help="event streams held")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--means", default="0.8,0.6,0.5,0.4", help="Bernoulli means of the arms")
    parser.add_argument(
        "--dp-epsilon", type=float, default=None,
        help="one report's privacy (default: chosen so that about half of the devices' reports "
        "identify the best arm, by common.simulation.ldp's engine)",
    )  # fmt: skip
    parser.add_argument("--sizing-runs", type=int, default=3, help="engine runs for the choice")
    parser.add_argument(
        "--compare", type=int, default=10_000, help="reports, and votes, in phase 3 (0: none)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0, help="per phase, seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--profile", metavar="FILE", help="run the coordinator under cProfile")
    args = parser.parse_args()
    means = [float(m) for m in args.means.split(",")]
    figures: dict[str, Any] = {"machine": machine(), "configuration": vars(args)}
    t0 = time.perf_counter()
    figures["sizing"] = sizing(means, args.devices, args.sizing_runs, args.seed, args.dp_epsilon)
    figures["sizing"]["seconds"] = time.perf_counter() - t0
    dp_epsilon = figures["sizing"]["dp_epsilon"]
    print_sizing(figures, means)
    raise_fd_limit()  # the coordinator inherits it: one descriptor per stream
    environment = {
        "DEXP_ENVIRONMENT": "production",  # tickets only: open enrollment is off
        "DEXP_MAX_AGENTS": str(max(10_000, args.devices, args.compare) + 1000),
        "DEXP_MAX_SUBSCRIBERS": str(max(10_000, 2 * args.subscribers)),
    }
    figures["configuration"] = {**vars(args), **environment}
    with tempfile.TemporaryDirectory(prefix="dexp-bench-") as directory:
        redis_process, redis_url = start_redis(directory)
        server = clients = None
        saved = dict(os.environ)
        try:
            os.environ.update(environment)
            server, url = start_coordinator(redis_url, args.profile)
            for name in redis_variables(dict(os.environ)):  # nothing of Redis for the clients
                del os.environ[name]
            clients = Clients(url, args.processes, client_main)
            with httpx.Client(
                base_url=url, timeout=120, trust_env=False,
                headers={"Authorization": f"Bearer {ADMIN}"},
            ) as client:  # fmt: skip
                figures["devices"] = phase_devices(
                    client, clients, args, means, dp_epsilon, server.pid
                )
                if args.compare:
                    figures["compare"] = phase_compare(client, clients, args, server.pid)
                clients.ask("close", [{}] * args.processes, args.timeout)
                figures["refused_while_closing"] = streams_closed(client, args.timeout)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            if clients is not None:
                clients.close()
            if server is not None:
                stop(server, signal.SIGINT)
            stop(redis_process)
    report(figures)
    if args.json:
        print(json.dumps(figures, default=str))


def print_sizing(figures: dict[str, Any], means: list[float]) -> None:
    s, m = figures["sizing"], figures["machine"]
    print(
        f"machine: {m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB, Linux {m['kernel']}, "
        f"Python {m['python']}; load average {m['load_average'][0]:.2f} at the start; one "
        f"coordinator process (one uvicorn worker), redis-server and "
        f"{figures['configuration']['processes']} client processes share the cores"
    )
    print(
        f"choice: arms of means {means} (Bernoulli), epsilon {EPSILON}, delta {DELTA}, dp_epsilon "
        f"{s['dp_epsilon']:g} (one report's privacy; user privacy the same: B = 1); target "
        f"{s['target_reports']:,.0f} reports; the engine took {s['engine_reports']} "
        f"(mean {s['engine_mean']:,.0f}) in {s['seconds']:.0f} s",
        flush=True,
    )


def report(figures: dict[str, Any]) -> None:
    d = figures["devices"]
    lat = d["latency_ms"]
    print(
        f"devices: {d['devices']:,} tickets ({d['tickets_s']:.1f} s to issue); {d['enrolled']:,} "
        f"enrolled, {d['reported']:,} reported once (counted), {d['enrolled_after_decision']:,} "
        f"found it decided; reads {d['reads']}; reports {d['reports']}; 503s retried "
        f"{d['refused_503']}; errors {d['errors'] or 'none'}"
    )
    per_cpu = d["reported"] / d["server_cpu_s"] if d["server_cpu_s"] else float("nan")
    print(
        f"the visits: {d['wall_s']:.1f} s, coordinator CPU {d['server_cpu_s']:.1f} s: "
        f"{per_cpu:,.0f} device visits (enroll + read + report) per coordinator CPU-second, "
        f"{d['reported'] / d['wall_s']:,.0f}/s; latency p50/p99: enroll "
        f"{lat['enroll']['p50']:.1f}/{lat['enroll']['p99']:.1f} ms, read "
        f"{lat['read']['p50']:.1f}/{lat['read']['p99']:.1f} ms, report "
        f"{lat['report']['p50']:.1f}/{lat['report']['p99']:.1f} ms"
    )
    print(
        f"outcome: {d['status']}, best arm {d['best_arm']}, {d['reports_total']:,} reports "
        f"published {d['final_reports']}; intervals {d['estimates']}"
    )
    dec = d["decision"]
    print(
        f"subscribers: {d['subscribers']} streams from distinct addresses, opened in "
        f"{d['subscribers_opened_in_s']:.1f} s ({d['subscribers_refused_503']} 503s retried); "
        f"events {[e for e, _ in d['events']]}; every change delivered: p50 "
        f"{d['changes_delivered']['p50_ms']:.0f} ms, p99 {d['changes_delivered']['p99_ms']:.0f} "
        f"ms ({d['changes_delivered']['count']} deliveries)"
    )
    print(
        f"the deciding publication to the subscribers ({dec['count']} deliveries, "
        f"{d['decision_missing']} missing): p50 {dec['p50_ms']:.0f} ms, p99 {dec['p99_ms']:.0f} "
        f"ms, max {dec['max_ms']:.0f} ms (from its event id, Redis's clock)"
    )
    if "from_report_latest" in d:
        late, early = d["from_report_latest"], d["from_report_earliest"]
        print(
            f"from the deciding report's send ({d['in_flight_at_decision']} counted reports in "
            f"flight at the decision: it is one of them): p50 {late['p50_ms']:.0f} to "
            f"{early['p50_ms']:.0f} ms, p99 {late['p99_ms']:.0f} to {early['p99_ms']:.0f} ms, "
            f"max {late['max_ms']:.0f} to {early['max_ms']:.0f} ms; the decision came "
            f"{d['decision_after_report_ms'][0]:.0f} to {d['decision_after_report_ms'][1]:.0f} "
            "ms after its send"
        )
    c = figures.get("compare")
    if c:
        r, v = c["report"], c["vote"]
        print(
            f"enrollments (tickets, {POOL} x {figures['configuration']['processes']} "
            f"connections): {c['reports_enrollments']['per_server_cpu_s']:,.0f} and "
            f"{c['votes_enrollments']['per_server_cpu_s']:,.0f} per coordinator CPU-second"
        )
        for name, x in (("reports", r), ("votes", v)):
            print(
                f"{name}: {x['sent']:,} in {x['wall_s']:.1f} s ({x['per_s']:,.0f}/s), coordinator "
                f"CPU {x['server_cpu_s']:.1f} s: {x['per_server_cpu_s']:,.0f} {name} per "
                f"coordinator CPU-second; p50 {x['p50_ms']:.1f} ms, p99 {x['p99_ms']:.1f} ms; "
                f"outcomes {x['outcomes']}; 503s {x['refused_503']}; errors {x['errors'] or 'none'}"
            )
        d = figures["devices"]
        enroll_ms = 1000 / c["reports_enrollments"]["per_server_cpu_s"]
        report_ms = 1000 / r["per_server_cpu_s"]
        visit_ms = 1000 * d["server_cpu_s"] / max(1, d["enrolled"])
        print(
            f"a visit's coordinator CPU: {visit_ms:.2f} ms per device enrolled; of which, by the "
            f"floods' figures, enrollment {enroll_ms:.2f} ms and report {report_ms:.2f} ms: left "
            f"for the read (a full GET whenever a publication came since the process's last), the "
            f"stream fan-out and the rest: {visit_ms - enroll_ms - report_ms:.2f} ms"
        )
        print(
            f"reports per coordinator CPU-second / votes per coordinator CPU-second: "
            f"{r['per_server_cpu_s'] / v['per_server_cpu_s']:.2f}; the report experiment "
            f"{c['report_state']}, the vote experiment {c['vote_state']} (M={c['vote_threshold']})"
        )
    print(
        f"503s to GET /metrics while the streams closed (503s, probes): {figures['refused_while_closing']}"
    )


if __name__ == "__main__":
    main()
