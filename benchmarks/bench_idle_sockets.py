"""Idle sockets from many addresses, then a reconnection storm of subscribers (issue 36, item 1).

    python benchmarks/bench_idle_sockets.py                         # 100 x 200 idle, 10,000 streams
    python benchmarks/bench_idle_sockets.py --addresses 10 --subscribers 1000 --seconds 10  # a look
    python benchmarks/bench_idle_sockets.py --seconds 0 --subscribers 2000  # the storm alone

Starts a real redis-server and ONE coordinator process (`python -m coordinator`, its defaults but
DEXP_MAX_SUBSCRIBERS = --subscribers), then:

1. Idle sockets. --processes attacker processes open --addresses x --per-address connections that
   send nothing, each address a loopback address of its own (127.2.x.y), and open each again as
   soon as the coordinator closes it (reaped, or cut at the header deadline), for --seconds.
   Meanwhile --honest devices (127.0.0.2 on, each an agent of its own) loop: a vote, a read of
   the experiment, a new event stream (until its first state), each on a new connection, 10 s at
   most each, then 0.2 s of rest. Printed: the
   honest requests served (2xx) of each kind with a 95 % Clopper-Pearson interval, what the
   others met, the attackers' connects, the coordinator's open descriptors and RSS (peak), the
   idle connections it reaped.
2. A reconnection storm. --subscribers streams from distinct addresses (127.3.x.y), all started at
   once, each as the JavaScript SDK's follower: a 503 or 429 is tried again after its Retry-After,
   an attempt is given up after 45 s, a failure followed by a randomized back-off. Printed: how
   many had their first state (within 30 s, and in all), when; what every attempt met and what
   the streams that never had their state met (a status, or the error); the connects the kernel
   dropped at a full listen queue; the coordinator's refusal and Redis error counters.
   `--seconds 0` runs the storm alone.

Every phase is bounded in time (--seconds, --timeout) and count; the driver stops every process it
started.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import resource
import signal
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import contextlib

from bench_fleet import raise_fd_limit, retry_after, rss_bytes
from bench_vote_path import prepare, start_coordinator, start_redis, stop

from common.stats import clopper_pearson

EXPERIMENT = "bench"
# a device gives up an attempt (connect, or the answer's headers) after this long and tries again,
# as the JavaScript SDK's follower does (sdk/js/src/follower.ts, STREAM_TIMEOUT_MS), after its
# back-off (RETRY_MS doubled per failure in a row, randomized: jittered in sdk/js/src/http.ts)
ATTEMPT_SECONDS = 45.0
RETRY_SECONDS = 2.0


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
def backoff(failures: int) -> float:
    """The follower's wait after `failures` failures in a row: doubled, capped, randomized."""
    return random.uniform(0.5, 1.5) * min(RETRY_SECONDS * 2 ** (failures - 1), 60.0)


async def first_state(
    port: int,
    source: str,
    timeout: float,
    keep: list[asyncio.StreamWriter] | None = None,
    seen: Counter[str] | None = None,
) -> tuple[bool, int]:
    """(whether the stream gave its first state within `timeout`, refusals before it); a stream
    that did is kept open in `keep` if given (a subscriber stays), else closed. `seen` counts what
    each attempt met (a status, or the error: refused connect, connect or answer timeout, reset),
    so that a stream that never had its state says why."""
    seen = Counter() if seen is None else seen
    refusals = failures = 0
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        step = "connect"
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)),
                min(ATTEMPT_SECONDS, until - time.monotonic()),
            )
        except (OSError, TimeoutError) as exc:
            seen[f"{step}: {type(exc).__name__}"] += 1
            failures += 1
            await asyncio.sleep(backoff(failures))
            continue
        try:
            step = "answer"
            writer.write(
                f"GET /v1/experiments/{EXPERIMENT}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            )
            head = await asyncio.wait_for(
                reader.readuntil(b"\r\n\r\n"), min(ATTEMPT_SECONDS, until - time.monotonic())
            )
            seen[head[9:12].decode()] += 1
            if head[9:12] in (b"503", b"429"):
                refusals += 1
                writer.close()
                await asyncio.sleep(retry_after(head))
                continue
            if head[9:12] != b"200":
                writer.close()
                return False, refusals
            step = "first state"
            data = b""
            while b"event: state" not in data:
                chunk = await asyncio.wait_for(reader.read(4096), until - time.monotonic())
                if not chunk:
                    seen["first state: closed"] += 1
                    break
                data += chunk
            if b"event: state" in data and keep is not None:
                keep.append(writer)
                return True, refusals
            writer.close()
            return b"event: state" in data, refusals
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            seen[f"{step}: {type(exc).__name__}"] += 1
            writer.close()
            failures += 1
            await asyncio.sleep(backoff(failures))
    return False, refusals


async def storm(port: int, sources: list[str], timeout: float) -> dict[str, Any]:
    began, started = time.monotonic(), time.time()
    done: list[float] = []
    kept: list[asyncio.StreamWriter] = []

    seen: Counter[str] = Counter()  # what every attempt met
    missed: Counter[str] = Counter()  # what the streams that never had their state met

    async def one(source: str) -> tuple[bool, int]:
        mine: Counter[str] = Counter()
        ok, refused = await first_state(port, source, timeout, kept, mine)
        seen.update(mine)
        if ok:
            done.append(time.monotonic() - began)
        else:
            missed.update(mine)
        return ok, refused

    results = await asyncio.gather(*(one(s) for s in sources))
    for writer in kept:
        writer.close()
    return {
        "opened": sum(ok for ok, _ in results),
        "refusals": sum(r for _, r in results),
        "done": done,
        "started": started,
        "seen": seen,
        "missed": missed,
    }


def subscriber(port: int, sources: list[str], timeout: float, out: Connection) -> None:
    raise_fd_limit()
    import uvloop

    out.send(uvloop.run(storm(port, sources, timeout)))


# -- the honest device ---------------------------------------------------------------------------
async def ask(port: int, raw: bytes, source: str) -> int:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 10
    )
    try:
        writer.write(raw)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        return int(head[9:12])
    finally:
        writer.close()


async def honest(
    port: int, token: str, seconds: float, source: str, missed: Counter[str]
) -> dict[str, list[int]]:
    """One honest device at `source`: a vote, a read and a new stream, again and again; what a
    request that was not served met goes to `missed` (kind: status or error)."""
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
                status = await ask(port, raw, source)
                ok = 200 <= status < 300
                outcome = str(status)
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
                ok, outcome = False, type(exc).__name__
            served[kind][0] += ok
            served[kind][1] += 1
            if not ok:
                missed[f"{kind}: {outcome}"] += 1
        seen: Counter[str] = Counter()
        ok, _ = await first_state(port, source, 10, seen=seen)  # no retry inside: one try, 10 s
        served["streams"][0] += ok
        served["streams"][1] += 1
        if not ok:
            missed.update(f"streams: {k}" for k in seen.elements())
        await asyncio.sleep(0.2)
    return served


async def honest_devices(
    port: int, tokens: list[str], seconds: float, missed: Counter[str]
) -> dict[str, list[int]]:
    """One honest device per token (an agent of its own: one agent's votes have a rate limit), at
    once, each from a loopback address of its own (127.0.0.2 on)."""
    runs = await asyncio.gather(
        *(
            honest(port, token, seconds, f"127.0.0.{2 + i}", missed)
            for i, token in enumerate(tokens)
        )
    )
    total: dict[str, list[int]] = {"votes": [0, 0], "reads": [0, 0], "streams": [0, 0]}
    for run in runs:
        for kind, (ok, n) in run.items():
            total[kind][0] += ok
            total[kind][1] += n
    return total


# -- the driver ----------------------------------------------------------------------------------
def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", trust_env=False, timeout=60).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def listen_queue() -> int:
    """The coordinator's listen queue as the benchmark starts it (its environment): its backlog,
    capped by the kernel. (Imported here, not at the top: the client processes, which import this
    module, start faster without the coordinator's modules.)"""
    from coordinator.server import SOMAXCONN, listen_backlog
    from coordinator.settings import Settings

    backlog = listen_backlog(Settings(redis_url="redis://127.0.0.1:1/0"))
    return min(backlog, int(Path(SOMAXCONN).read_text()))


def listen_drops() -> int:
    """The kernel's count of connects dropped because a listen queue was full (TcpExt
    ListenDrops, this network namespace: the coordinator's, and anything else listening here)."""
    with open("/proc/net/netstat") as file:
        lines = file.read().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            return int(dict(zip(names.split(), values.split(), strict=True))["ListenDrops"])
    return 0


def spawn(target: Any, *args: Any) -> tuple[multiprocessing.process.BaseProcess, Connection]:
    context = multiprocessing.get_context("spawn")
    mine, theirs = context.Pipe()
    process = context.Process(target=target, args=(*args, theirs))
    process.start()
    return process, mine


def idle_phase(
    args: argparse.Namespace,
    url: str,
    port: int,
    tokens: list[str],
    pid: int,
    children: list[multiprocessing.process.BaseProcess],
) -> None:
    """Phase 1: idle sockets from many addresses while an honest device is served."""
    rss_before, fds_before = rss_bytes(pid), open_descriptors(pid)
    sources = [address(2, i) for i in range(args.addresses)]
    pipes = []
    for part in range(args.processes):
        process, pipe = spawn(
            attacker, port, sources[part :: args.processes], args.per_address, args.seconds
        )
        children.append(process)
        pipes.append(pipe)
    missed: Counter[str] = Counter()
    served = asyncio.run(honest_devices(port, tokens, args.seconds - 2, missed))
    peak_fds = open_descriptors(pid)
    tallies = [pipe.recv() for pipe in pipes]
    rss_peak = rss_bytes(pid)
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
        low, high = clopper_pearson(ok, total) if total else (0.0, 1.0)
        print(
            f"  honest {kind} ({args.honest} devices): {ok} of {total} served "
            f"({100 * ok / max(1, total):.1f} %, 95 % interval [{100 * low:.1f}, {100 * high:.1f}])"
        )
    print(f"  what the honest requests not served met: {dict(missed) or 'nothing'}")
    for process in children:
        process.join(30)


def storm_phase(
    args: argparse.Namespace,
    url: str,
    port: int,
    children: list[multiprocessing.process.BaseProcess],
) -> None:
    """Phase 2: --subscribers streams at once, each honouring Retry-After."""
    pipes = []
    sources = [address(3, i) for i in range(args.subscribers)]
    drops = listen_drops()
    began = time.monotonic()
    for part in range(args.processes):
        process, pipe = spawn(subscriber, port, sources[part :: args.processes], args.timeout)
        children.append(process)
        pipes.append(pipe)
    results = [pipe.recv() for pipe in pipes]
    opened = sum(r["opened"] for r in results)
    done = sorted(t for r in results for t in r["done"])
    seen: Counter[str] = sum((r["seen"] for r in results), Counter())
    missed: Counter[str] = sum((r["missed"] for r in results), Counter())

    def after(q: float) -> str:
        return f"{done[min(len(done) - 1, int(q * len(done)))]:.1f}" if done else "-"

    print(
        f"storm: {opened} of {args.subscribers} streams opened at once had their first state "
        f"({sum(t <= 30 for t in done)} within 30 s); half after {after(0.5)} s, 99 % after "
        f"{after(0.99)} s, the last after {after(1.0)} s ({time.monotonic() - began:.1f} s in "
        f"all); {sum(r['refusals'] for r in results)} refusals (503/429) retried after Retry-After"
    )
    starts = [r["started"] for r in results]
    print(f"  the {args.processes} client processes began within {max(starts) - min(starts):.1f} s")
    print(
        f"  connects the kernel dropped (a listen queue full; the coordinator's holds "
        f"{listen_queue()}): "
        f"{listen_drops() - drops}"
    )
    print(f"  every attempt met: {dict(seen.most_common())}")
    print(f"  the streams without a state met: {dict(missed.most_common())}")
    refusals = {
        name: metric(url, name)
        for name in (
            'dexp_refusals_total{reason="overloaded"}',
            'dexp_refusals_total{reason="unavailable"}',
            'dexp_sse_refused_total{bound="process"}',
            'dexp_sse_refused_total{bound="client"}',
            'dexp_redis_errors_total{error="timeout"}',
            'dexp_redis_errors_total{error="connection"}',
        )
    }
    print(f"  the coordinator counted: {refusals}")


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
    parser.add_argument("--honest", type=int, default=1, help="honest devices during the attack")
    parser.add_argument("--profile", help="write the coordinator's cProfile statistics here")
    args = parser.parse_args()
    raise_fd_limit()  # the coordinator inherits it
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)
    os.environ["DEXP_MAX_SUBSCRIBERS"] = str(args.subscribers)
    children: list[multiprocessing.process.BaseProcess] = []
    with tempfile.TemporaryDirectory(prefix="dexp-bench-") as directory:
        redis_process, redis_url = start_redis(directory)
        server = None
        try:
            server, url = start_coordinator(redis_url, args.profile)
            port = int(url.rsplit(":", 1)[1])
            tokens = prepare(url, 3, args.honest)
            print(f"open-file limit (soft, hard): {limit}; coordinator pid {server.pid}")
            if args.seconds > 0:
                idle_phase(args, url, port, tokens, server.pid, children)
            storm_phase(args, url, port, children)
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
