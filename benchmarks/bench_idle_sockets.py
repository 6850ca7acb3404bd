"""Idle sockets from many addresses, then a reconnection storm of subscribers (issue 36, item 1).

    python benchmarks/bench_idle_sockets.py                         # 100 x 200 idle, 10,000 streams
    python benchmarks/bench_idle_sockets.py --addresses 10 --subscribers 1000 --seconds 10  # a look

Starts a real redis-server and ONE coordinator process (`python -m coordinator`, its defaults but
DEXP_MAX_SUBSCRIBERS = --subscribers), then:

1. Idle sockets. --processes attacker processes open --addresses x --per-address connections that
   send nothing, each address a loopback address of its own (127.2.x.y), and open each again as
   soon as the coordinator closes it (reaped, or cut at the header deadline), for --seconds.
   Meanwhile an honest device (127.0.0.2) loops: a vote, a read of the experiment, a new event
   stream (until its first state), each on a new connection, 10 s at most each. Printed: the
   honest requests served (2xx) of each kind, the attackers' connects, the coordinator's open
   descriptors and RSS (peak), the idle connections it reaped.
2. A reconnection storm. --subscribers streams from distinct addresses (127.3.x.y), all started at
   once; a 503 or 429 is tried again after its Retry-After, as a device does. Printed: the time
   until every stream has its first state, and the refusals.

Every phase is bounded in time (--seconds, --timeout) and count; the driver stops every process it
started.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from bench_fleet import raise_fd_limit, retry_after, rss_bytes
from bench_vote_path import prepare, start_coordinator, start_redis, stop

EXPERIMENT = "bench"


def address(block: int, index: int) -> str:
    return f"127.{block}.{index // 250}.{index % 250 + 1}"


# -- the attackers -------------------------------------------------------------------------------
async def hold(port: int, source: str, until: float, tally: dict[str, int]) -> None:
    """One idle socket from `source`, opened again whenever the server closes it."""
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(source, 0)
            )
        except OSError:
            tally["failed"] += 1
            await asyncio.sleep(0.1)
            continue
        tally["connects"] += 1
        with contextlib.suppress(TimeoutError, OSError):
            await asyncio.wait_for(reader.read(1), max(0.0, until - time.monotonic()))
        writer.close()


async def attack(port: int, sources: list[str], per_address: int, seconds: float) -> dict[str, int]:
    tally = {"connects": 0, "failed": 0}
    until = time.monotonic() + seconds
    await asyncio.gather(
        *(hold(port, s, until, tally) for s in sources for _ in range(per_address))
    )
    return tally


def attacker(
    port: int, sources: list[str], per_address: int, seconds: float, out: Connection
) -> None:
    raise_fd_limit()
    import uvloop

    out.send(uvloop.run(attack(port, sources, per_address, seconds)))


# -- an event stream's first state, honouring Retry-After ----------------------------------------
async def first_state(
    port: int, source: str, timeout: float, keep: list[asyncio.StreamWriter] | None = None
) -> tuple[bool, int]:
    """(whether the stream gave its first state within `timeout`, refusals before it); a stream
    that did is kept open in `keep` if given (a subscriber stays), else closed."""
    refusals = 0
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)),
                until - time.monotonic(),
            )
        except (OSError, TimeoutError):
            await asyncio.sleep(1)
            continue
        try:
            writer.write(
                f"GET /v1/experiments/{EXPERIMENT}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), until - time.monotonic())
            if head[9:12] in (b"503", b"429"):
                refusals += 1
                writer.close()
                await asyncio.sleep(retry_after(head))
                continue
            if head[9:12] != b"200":
                writer.close()
                return False, refusals
            data = b""
            while b"event: state" not in data:
                chunk = await asyncio.wait_for(reader.read(4096), until - time.monotonic())
                if not chunk:
                    break
                data += chunk
            if b"event: state" in data and keep is not None:
                keep.append(writer)
                return True, refusals
            writer.close()
            return b"event: state" in data, refusals
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            writer.close()
            await asyncio.sleep(1)
    return False, refusals


async def storm(port: int, sources: list[str], timeout: float) -> dict[str, Any]:
    began = time.monotonic()
    done: list[float] = []
    kept: list[asyncio.StreamWriter] = []

    async def one(source: str) -> tuple[bool, int]:
        ok, refused = await first_state(port, source, timeout, kept)
        if ok:
            done.append(time.monotonic() - began)
        return ok, refused

    results = await asyncio.gather(*(one(s) for s in sources))
    for writer in kept:
        writer.close()
    return {
        "opened": sum(ok for ok, _ in results),
        "refusals": sum(r for _, r in results),
        "last_seconds": max(done, default=float("nan")),
    }


def subscriber(port: int, sources: list[str], timeout: float, out: Connection) -> None:
    raise_fd_limit()
    import uvloop

    out.send(uvloop.run(storm(port, sources, timeout)))


# -- the honest device ---------------------------------------------------------------------------
async def ask(port: int, raw: bytes) -> int:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.2", 0)), 10
    )
    try:
        writer.write(raw)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        return int(head[9:12])
    finally:
        writer.close()


async def honest(port: int, token: str, seconds: float) -> dict[str, list[int]]:
    served: dict[str, list[int]] = {"votes": [0, 0], "reads": [0, 0], "streams": [0, 0]}
    body = b'{"arm": 1, "epoch": 0}'
    vote = (
        f"POST /v1/experiments/{EXPERIMENT}/votes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    read = f"GET /v1/experiments/{EXPERIMENT} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for kind, raw in (("votes", vote), ("reads", read.encode())):
            try:
                ok = 200 <= await ask(port, raw) < 300
            except (OSError, TimeoutError, asyncio.IncompleteReadError):
                ok = False
            served[kind][0] += ok
            served[kind][1] += 1
        ok, _ = await first_state(port, "127.0.0.2", 10)  # no retry inside: one try, 10 s
        served["streams"][0] += ok
        served["streams"][1] += 1
        await asyncio.sleep(0.2)
    return served


# -- the driver ----------------------------------------------------------------------------------
def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", trust_env=False, timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def spawn(target: Any, *args: Any) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    process = context.Process(target=target, args=(*args, theirs))
    process.start()
    return process, mine


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--addresses", type=int, default=100)
    parser.add_argument("--per-address", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0, help="the idle attack's length")
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--timeout", type=float, default=60.0, help="the storm's bound")
    parser.add_argument("--processes", type=int, default=4, help="client processes per phase")
    args = parser.parse_args()
    raise_fd_limit()  # the coordinator inherits it
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.environ["DEXP_MAX_SUBSCRIBERS"] = str(args.subscribers)
    children: list[multiprocessing.process.BaseProcess] = []
    with tempfile.TemporaryDirectory(prefix="dexp-bench-") as directory:
        redis_process, redis_url = start_redis(directory)
        server = None
        try:
            server, url = start_coordinator(redis_url, None)
            port = int(url.rsplit(":", 1)[1])
            (token,) = prepare(url, 3, 1)
            rss_before, fds_before = rss_bytes(server.pid), open_descriptors(server.pid)
            print(f"open-file limit (soft, hard): {limit}; coordinator pid {server.pid}")
            sources = [address(2, i) for i in range(args.addresses)]
            pipes = []
            for part in range(args.processes):
                process, pipe = spawn(
                    attacker, port, sources[part :: args.processes], args.per_address, args.seconds
                )
                children.append(process)
                pipes.append(pipe)
            served = asyncio.run(honest(port, token, args.seconds - 2))
            peak_fds = open_descriptors(server.pid)
            tallies = [pipe.recv() for pipe in pipes]
            rss_peak = rss_bytes(server.pid)
            reaped = metric(url, "dexp_idle_connections_reaped_total")
            connects = sum(t["connects"] for t in tallies)
            print(
                f"idle attack: {args.addresses} addresses x {args.per_address} sockets for "
                f"{args.seconds:.0f} s: {connects} connects ({connects / args.seconds:.0f}/s), "
                f"{sum(t['failed'] for t in tallies)} failed; coordinator descriptors "
                f"{fds_before} -> {peak_fds} (near the end), RSS {rss_before / 2**20:.0f} -> "
                f"{rss_peak / 2**20:.0f} MB, {reaped:.0f} idle connections reaped"
            )
            for kind, (ok, total) in served.items():
                print(f"  honest {kind}: {ok} of {total} served ({100 * ok / max(1, total):.1f} %)")
            for process in children:
                process.join(30)
            pipes = []
            sources = [address(3, i) for i in range(args.subscribers)]
            began = time.monotonic()
            for part in range(args.processes):
                process, pipe = spawn(
                    subscriber, port, sources[part :: args.processes], args.timeout
                )
                children.append(process)
                pipes.append(pipe)
            results = [pipe.recv() for pipe in pipes]
            opened = sum(r["opened"] for r in results)
            print(
                f"storm: {opened} of {args.subscribers} streams opened at once had their first "
                f"state, the last after {max(r['last_seconds'] for r in results):.1f} s "
                f"({time.monotonic() - began:.1f} s in all); "
                f"{sum(r['refusals'] for r in results)} refusals (503/429) retried after Retry-After"
            )
        finally:
            for process in children:
                if process.is_alive():
                    process.terminate()
                process.join(10)
            if server is not None:
                stop(server, signal.SIGINT)
            stop(redis_process)


if __name__ == "__main__":
    main()
