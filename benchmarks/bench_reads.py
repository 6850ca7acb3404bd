"""Cacheable reads: 304 Not Modified against full reads, per coordinator CPU-second, in one run.

    python benchmarks/bench_reads.py                     # 10 arms, 4 rounds of 5,000 requests each
    python benchmarks/bench_reads.py --arms 100 --requests 10000 --rounds 2 --json

Starts a real redis-server and ONE coordinator process (`python -m coordinator`, one uvicorn
worker), as benchmarks/bench_vote_path.py does (its helpers), creates an experiment of --arms arms
and enrolls --agents agents, then floods GET /v1/experiments/{id} ("state": what a device polls)
and GET /v1/experiments/{id}/best-arm from 2 client processes of 4 keep-alive connections each:

- full: the request without a validator, the document read and rendered (200);
- 304: the same request with `If-None-Match: <the current ETag>` (coordinator/caching.py answers it
  from the experiment's revision: one HMGET, and one GET of the lease for "state").

The four loads alternate, round after round, so that a drift of the machine's load falls on all of
them. For each it prints requests/s, p50 and p99, and requests per coordinator CPU-second (the
server's user + system time over the load, /proc): the rate one fully busy worker would reach. The
clients share the machine's cores, so the last figure is the one to compare. The issue's goal: at
least 10 times more 304s than full reads per CPU-second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vote_path import (
    EXPERIMENT,
    Load,
    connection,
    cpu_seconds,
    percentile_ms,
    prepare,
    start_coordinator,
    start_redis,
    stop,
)

KINDS = {
    "state": f"/v1/experiments/{EXPERIMENT}",
    "best-arm": f"/v1/experiments/{EXPERIMENT}/best-arm",
}


def request(host: str, path: str, tag: str | None) -> bytes:
    condition = f"If-None-Match: {tag}\r\n" if tag else ""
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{condition}\r\n".encode()


def client_process(
    url: str, raw: bytes, count: int, connections: int, barrier: Any
) -> dict[str, Any]:
    """`count` copies of one request over `connections` keep-alive connections."""
    host, port = url.removeprefix("http://").split(":")

    async def main() -> dict[str, Any]:
        load, start = Load(), asyncio.Event()
        tasks = [
            asyncio.create_task(
                connection(host, int(port), [raw] * (count // connections), load, start)
            )
            for _ in range(connections)
        ]
        await asyncio.sleep(0.2)  # the connections open before the clock starts
        await asyncio.get_running_loop().run_in_executor(None, barrier.wait)
        began = time.perf_counter()
        start.set()
        await asyncio.gather(*tasks)
        return {
            "latencies": load.latencies,
            "statuses": load.statuses,
            "began": began,
            "ended": time.perf_counter(),
        }

    return asyncio.run(main())


def flood(
    url: str, raw: bytes, count: int, processes: int, connections: int, server_pid: int
) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(processes) as pool:
        barrier = manager.Barrier(processes + 1)
        pending = [
            pool.apply_async(client_process, (url, raw, count // processes, connections, barrier))
            for _ in range(processes)
        ]
        barrier.wait()
        cpu_before = cpu_seconds(server_pid)
        results = [p.get(timeout=600) for p in pending]
        cpu_after = cpu_seconds(server_pid)
    latencies = np.array([x for r in results for x in r["latencies"]])
    statuses: dict[int, int] = {}
    for r in results:
        for status, n in r["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    elapsed = max(r["ended"] for r in results) - min(r["began"] for r in results)
    return {
        "requests": len(latencies),
        "elapsed_s": elapsed,
        "cpu_s": cpu_after - cpu_before,
        "p50_ms": percentile_ms(latencies, 50),
        "p99_ms": percentile_ms(latencies, 99),
        "statuses": statuses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--arms", type=int, default=10)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--requests", type=int, default=5000, help="per load and round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--connections", type=int, default=4, help="connections per process")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()

    totals: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="dexp-bench-") as directory:
        redis_process, redis_url = start_redis(directory)
        server, url = start_coordinator(redis_url, None)
        try:
            prepare(url, args.arms, args.agents)
            host = url.removeprefix("http://")
            with httpx.Client(base_url=url, trust_env=False) as client:
                tags = {k: client.get(p).headers["etag"] for k, p in KINDS.items()}
            loads = {
                f"{kind} {mode}": request(host, path, tags[kind] if mode == "304" else None)
                for kind, path in KINDS.items()
                for mode in ("full", "304")
            }
            for raw in loads.values():  # warm-up, not measured
                flood(url, raw, 400, 1, 2, server.pid)
            for _ in range(args.rounds):
                for name, raw in loads.items():
                    figures = flood(
                        url, raw, args.requests, args.processes, args.connections, server.pid
                    )
                    total = totals.setdefault(name, {"requests": 0, "elapsed_s": 0.0, "cpu_s": 0.0})
                    total["requests"] += figures["requests"]
                    total["elapsed_s"] += figures["elapsed_s"]
                    total["cpu_s"] += figures["cpu_s"]
                    total.setdefault("p50_ms", []).append(figures["p50_ms"])
                    total.setdefault("p99_ms", []).append(figures["p99_ms"])
                    total.setdefault("statuses", {})
                    for status, n in figures["statuses"].items():
                        total["statuses"][status] = total["statuses"].get(status, 0) + n
        finally:
            stop(server, signal.SIGINT)
            stop(redis_process)

    print(
        f"{args.arms} arms, {args.agents} agents; {args.rounds} rounds of {args.requests} requests "
        f"per load over {args.processes} x {args.connections} connections; "
        f"machine: {multiprocessing.cpu_count()} cores, {socket.gethostname()}"
    )
    for name, total in totals.items():
        total["per_cpu_s"] = total["requests"] / total["cpu_s"] if total["cpu_s"] else float("nan")
        print(
            f"{name:14} {total['requests']:>7} requests, {total['requests'] / total['elapsed_s']:>6.0f}/s, "
            f"p50 {np.median(total['p50_ms']):.2f} ms, p99 {np.median(total['p99_ms']):.2f} ms "
            f"(medians over rounds), statuses {total['statuses']}: "
            f"{total['per_cpu_s']:,.0f} per coordinator CPU-second"
        )
    for kind in KINDS:
        ratio = totals[f"{kind} 304"]["per_cpu_s"] / totals[f"{kind} full"]["per_cpu_s"]
        print(f"{kind}: {ratio:.1f}x more 304s than full reads per CPU-second (goal >= 10x)")
    if args.json:
        print(json.dumps(totals, default=str))


if __name__ == "__main__":
    main()
