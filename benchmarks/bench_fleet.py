"""A fleet that never touches Redis: HTTP-only device agents, tickets and SSE, to an identified arm.

    python benchmarks/bench_fleet.py                  # 10,000 device agents, 4 client processes
    python benchmarks/bench_fleet.py --agents 300     # a quick look (< 1 minute)
    python benchmarks/bench_fleet.py --agents 10000 --processes 4 --json

Starts a real redis-server and ONE coordinator process (`python -m coordinator`, one uvicorn worker,
benchmarks/bench_vote_path.py's helpers) set up as in production (DEXP_ENVIRONMENT=production:
open enrollment off, agents enroll with one-time tickets from the admin API), then plays the
device side from --processes client processes whose environment holds no Redis variable (asserted)
and that never import a Redis client (asserted). Each client process is asyncio (uvloop) with a
minimal HTTP/1.1 client on raw sockets; each device agent's event stream comes from a loopback
address of its own (127.x.y.z), as devices come from addresses of their own, so the per-client
bound DEXP_MAX_SUBSCRIBERS_PER_CLIENT keeps its default; enrollments and votes go over a pool of
keep-alive connections per client process. Three phases, all on the same coordinator:

1. Fan-out. Experiment `probe` (eta=0.5, delta=0.05: M=5 votes remove an arm), streams opened on
   it from distinct addresses (1,000, then --agents): the coordinator's RSS (/proc) before and
   after they open, divided by their number, is its memory per connection. At each size the
   driver removes --eliminations arms one after the other (M votes each; each published at its
   tick of DEXP_PUBLISH_CADENCE_SECONDS, one event per elimination) and waits until every
   stream has the new state: the delay of one delivery is its arrival (the client's clock) minus
   the event id's time ('<ms>-<seq>', Redis's clock: the same machine's clock).
2. The fleet. Experiment `fleet` (DE-SER3, eta=0.9, delta=0.05: M=29, Bernoulli arms of means
   --means drawn in the client processes, never sent): --agents tickets issued by the admin API,
   each agent enrolls with its own (enrollments/s), opens its event stream, then runs
   common.agent.LocalAgent (the local side of DE, as agent/library.py's Agent does) on rewards drawn
   in-process, sends its votes over HTTP and follows the global set by its stream only, until every
   agent has seen the arm identified. Votes/s over that phase, the vote latency, and the delivery
   delays of the run's eliminations (under load: the client processes are busy learning).
3. Reads. benchmarks/bench_reads.py's measure on the fleet's experiment: GET .../{id} and
   .../best-arm, full (200) and with If-None-Match (304), per coordinator CPU-second.

Every phase is bounded by --timeout; the driver stops every process it started. Clients, Redis and
the coordinator share this machine's cores: per coordinator CPU-second figures are the ones that
carry to another machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import resource
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_reads import KINDS, flood
from bench_reads import request as read_request
from bench_vote_path import (
    ADMIN,
    EXPERIMENT,
    cpu_seconds,
    percentile_ms,
    read_response,
    start_coordinator,
    start_redis,
    stop,
)

from common.agent import AgentSpec, LocalAgent
from common.algorithms import AlgorithmConfig

PROBE, FLEET = "probe", "fleet"
PROBE_ETA, PROBE_DELTA = 0.5, 0.05  # M = 5: a few votes remove a probe arm
# Requests in flight per client process. The coordinator's Redis client is redis-py's default pool
# (redis-py 8: at most 100 connections, beyond which a request gets 503 MaxConnectionsError), so
# the clients together keep fewer than 100 requests in flight; the 503s are counted all the same.
POOL = 16  # keep-alive connections per client process for enrollments and votes
OPENING = 16  # streams a client process opens at once
BATCH = 8  # activations an agent plays before it lets the others run
STATE = "state"


def address(index: int) -> str:
    """The loopback address device `index` streams from: one address per device."""
    return f"127.{1 + index // 62_500}.{(index // 250) % 250}.{index % 250 + 1}"


def event_ms(event_id: str) -> int:
    """The time of a change: its event id is '<ms>-<seq>' from Redis's clock."""
    return int(event_id.split("-", 1)[0])


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def redis_variables(environ: dict[str, str]) -> list[str]:
    return [k for k, v in environ.items() if "REDIS" in k.upper() or "redis://" in v.lower()]


# -- the client processes: a minimal HTTP/1.1 client on raw sockets ----------------------------
class Pool:
    """Keep-alive connections to the coordinator, one request in flight on each."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.host, self.port = host, port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(size)

    async def request(
        self, method: str, path: str, token: str = "", body: dict[str, Any] | None = None
    ) -> tuple[int, bytes, float, float]:
        """(status, body, Retry-After in seconds (1 when absent), seconds on the wire: from the
        request's first byte sent to its answer's last byte read, the wait for a slot excluded)."""
        head_bytes, answer, _, took = await self.exchange(method, path, token, body)
        return int(head_bytes[9:12]), answer, retry_after(head_bytes), took

    async def exchange(
        self, method: str, path: str, token: str = "", body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[bytes, bytes, float, float]:  # fmt: skip
        """(the answer's head, its body, when the request's first byte was sent (time.time()),
        seconds on the wire), with `headers` added to the request's."""
        payload = json.dumps(body).encode() if body is not None else b""
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        for name, value in (headers or {}).items():
            head += f"{name}: {value}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        raw = (head + "\r\n").encode() + payload
        async with self.slots:
            if self.idle:
                reader, writer = self.idle.pop()
            else:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            sent, wall = time.perf_counter(), time.time()
            try:
                writer.write(raw)
                head_bytes, answer = await read_response(reader)
            except BaseException:
                writer.close()
                raise
            if b"connection: close" in head_bytes.lower():
                writer.close()
            else:
                self.idle.append((reader, writer))
            return head_bytes, answer, wall, time.perf_counter() - sent

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle = []


def retry_after(head: bytes) -> float:
    for line in head.split(b"\r\n"):
        if line[:12].lower() == b"retry-after:":
            return float(line[12:])
    return 1.0


class Stream:
    """One device's event stream: the states received (event id, arrival in ms, state)."""

    def __init__(self, index: int, on_state: Callable[[dict[str, Any]], None] | None) -> None:
        self.index = index
        self.on_state = on_state
        self.received: list[tuple[str, float]] = []
        self.version = -1
        self.status = ""
        self.first = asyncio.Event()
        self.changed = asyncio.Event()
        self.refused = 0  # 503s before the stream opened
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None

    async def run(self, host: str, port: int, experiment: str) -> None:
        """Follow the stream; a 503 (the coordinator's "not now") is tried again after its
        Retry-After, as a device would."""
        while True:
            wait = await self.follow(host, port, experiment)
            if wait is None:
                return
            self.refused += 1
            await asyncio.sleep(wait)

    async def follow(self, host: str, port: int, experiment: str) -> float | None:
        reader, writer = await asyncio.open_connection(
            host, port, local_addr=(address(self.index), 0)
        )
        self.writer = writer
        writer.write(
            f"GET /v1/experiments/{experiment}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
        if head[9:12] == b"503":
            writer.close()
            return retry_after(head)
        if head[9:12] != b"200":
            answer = await reader.read(4096)
            raise RuntimeError(f"stream {self.index}: {(head + answer).decode(errors='replace')}")
        chunked = b"transfer-encoding: chunked" in head.lower()
        buffer = b""
        while True:
            if chunked:
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                if size == 0:
                    return None
                data = (await reader.readexactly(size + 2))[:-2]
            else:
                data = await reader.read(65_536)
                if not data:
                    return None
            buffer += data
            while b"\n\n" in buffer:
                frame, buffer = buffer.split(b"\n\n", 1)
                self.frame(frame)

    def frame(self, frame: bytes) -> None:
        fields: dict[bytes, bytes] = {}
        for line in frame.split(b"\n"):
            if line and not line.startswith(b":"):
                name, _, value = line.partition(b":")
                fields[name] = value.removeprefix(b" ")
        if fields.get(b"event") != b"state" or b"data" not in fields:
            return
        arrived = time.time() * 1000
        state = json.loads(fields[b"data"])
        self.received.append((fields[b"id"].decode(), arrived))
        self.version, self.status = int(state["version"]), str(state["status"])
        if self.on_state is not None:
            self.on_state(state)
        self.first.set()
        self.changed.set()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()


async def open_streams(
    host: str, port: int, experiment: str, streams: list[Stream], timeout: float
) -> None:
    """Open the streams, OPENING at a time, and wait until each has its first state."""
    gate = asyncio.Semaphore(OPENING)

    async def one(stream: Stream) -> None:
        async with gate:
            stream.task = asyncio.create_task(stream.run(host, port, experiment))
            waiting = asyncio.create_task(stream.first.wait())
            await asyncio.wait({stream.task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if not stream.first.is_set():
                waiting.cancel()
                stream.task.result()  # raises what went wrong
                raise RuntimeError(f"stream {stream.index} ended before its first state")

    await asyncio.wait_for(asyncio.gather(*(one(s) for s in streams)), timeout)


def deliveries(streams: list[Stream], since: float = 0.0) -> list[tuple[str, float]]:
    """(event id, delay in ms) of every state received after each stream's first one (the first
    is the state at connection time: no delay to speak of), from `since` (ms) on."""
    return [
        (event_id, arrived - event_ms(event_id))
        for s in streams
        for event_id, arrived in s.received[1:]
        if arrived >= since
    ]


class Device:
    """One device agent: its credentials, its local side of DE, its view of the global set."""

    def __init__(self, index: int, seed: int, spec: AgentSpec) -> None:
        self.index = index
        self.token = ""
        self.rng = np.random.default_rng([seed, index])
        self.local = LocalAgent(spec, self.rng)
        self.remaining: list[int] = []
        self.epoch = 0
        self.stream = Stream(index, self.on_state)

    def on_state(self, state: dict[str, Any]) -> None:
        self.remaining = [int(a) for a in state["remaining_arms"]]
        self.epoch = int(state["epoch"])


class Tally:
    """What one client process counts while the fleet plays."""

    def __init__(self) -> None:
        self.activations = 0
        self.votes: dict[str, int] = {}
        self.latencies: list[float] = []
        self.errors: dict[int, str] = {}  # one answer per error status
        self.refused_enrollments = 0  # 503s
        self.first_vote = float("inf")
        self.last_vote = 0.0


async def vote(pool: Pool, device: Device, arm: int, tally: Tally) -> None:
    path = f"/v1/experiments/{FLEET}/votes"
    for _ in range(20):
        sent = time.time()
        try:
            status, answer, wait, took = await pool.request(
                "POST", path, device.token, {"arm": arm, "epoch": device.epoch}
            )
        except (OSError, asyncio.IncompleteReadError):
            continue  # a keep-alive connection the server closed: a vote is safe to send again
        tally.latencies.append(took)
        tally.first_vote, tally.last_vote = min(tally.first_vote, sent), time.time()
        outcome = str(json.loads(answer).get("outcome")) if status == 200 else f"http {status}"
        if status != 200:
            tally.errors.setdefault(status, answer.decode(errors="replace"))
        tally.votes[outcome] = tally.votes.get(outcome, 0) + 1
        if status not in (429, 503):
            return
        await asyncio.sleep(wait)
    raise RuntimeError(f"device {device.index}: its vote on arm {arm} never went through")


async def enroll(pool: Pool, device: Device, ticket: str, tally: Tally) -> None:
    """Enroll the device with its one-time ticket."""
    while True:  # a 503 applied nothing: the ticket is still unused
        status, answer, wait, _ = await pool.request(
            "POST", "/v1/agents", ticket, {"experiment": FLEET}
        )
        if status != 503:
            break
        tally.refused_enrollments += 1
        await asyncio.sleep(wait)
    if status != 201:
        raise RuntimeError(f"enrollment: HTTP {status} {answer!r}")
    device.token = json.loads(answer)["token"]


async def play(device: Device, pool: Pool, means: np.ndarray, tally: Tally) -> None:
    """The device's loop: sync with the global set, play, vote; until the arm is identified."""
    local, stream = device.local, device.stream
    while stream.status == "exploring":
        votes = local.sync(device.remaining, device.epoch)
        if not votes and local.done:
            stream.changed.clear()
            await stream.changed.wait()  # nothing to learn: wait for the next global change
            continue
        for _ in range(BATCH):
            if votes or local.done:
                break
            arms = local.select()
            votes = local.observe(arms, (device.rng.random(len(arms)) < means[arms]) * 1.0)
            tally.activations += 1
        for arm in votes:
            await vote(pool, device, arm, tally)
        await asyncio.sleep(0)


async def client_main(number: int, url: str, commands: Connection) -> None:
    """One client process: does what the driver asks, answers each command when it is done."""
    host, port_text = url.removeprefix("http://").split(":")
    port = int(port_text)
    loop = asyncio.get_running_loop()
    probes: list[Stream] = []
    devices: list[Device] = []
    tally = Tally()
    while True:
        command, arguments = await loop.run_in_executor(None, commands.recv)
        if command == "exit":
            break
        began = time.time()
        if command == "probe-open":  # open streams on the probe experiment for these indices
            fresh = [Stream(i, None) for i in arguments["indices"]]
            await open_streams(host, port, PROBE, fresh, arguments["timeout"])
            probes += fresh
            reply: Any = sum(s.refused for s in fresh)
        elif command == "probe-wait":  # every probe stream has this version
            deadline = time.monotonic() + arguments["timeout"]
            while any(s.version < arguments["version"] for s in probes):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"probe streams lack version {arguments['version']}")
                await asyncio.sleep(0.002)
            reply = None
        elif command == "probe-deliveries":
            reply = deliveries(probes, arguments["since"])
        elif command == "probe-close":
            for s in probes:
                s.close()
            probes = []
            reply = None
        elif command == "enroll":  # one ticket per device
            config = AlgorithmConfig(**arguments["params"])
            n_arms = len(arguments["means"])
            params = config.local_params(n_arms, 1, None)
            spec = AgentSpec(n_arms, config.local_subroutine, params, config.vote_drop)
            devices = [Device(i, arguments["seed"], spec) for i in arguments["indices"]]
            pool = Pool(host, port, POOL)

            await asyncio.wait_for(
                asyncio.gather(
                    *(
                        enroll(pool, d, t, tally)
                        for d, t in zip(devices, arguments["tickets"], strict=True)
                    )
                ),
                arguments["timeout"],
            )
            pool.close()
            reply = tally.refused_enrollments
        elif command == "fleet-open":
            await open_streams(host, port, FLEET, [d.stream for d in devices], arguments["timeout"])
            reply = sum(d.stream.refused for d in devices)
        elif command == "play":
            means = np.array(arguments["means"])
            pool = Pool(host, port, POOL)
            await asyncio.wait_for(
                asyncio.gather(*(play(d, pool, means, tally) for d in devices)),
                arguments["timeout"],
            )
            pool.close()
            statuses: dict[str, int] = {}
            for d in devices:
                statuses[d.stream.status] = statuses.get(d.stream.status, 0) + 1
            reply = {
                "activations": tally.activations,
                "votes": tally.votes,
                "errors": tally.errors,
                "latencies": tally.latencies,
                "first_vote": tally.first_vote,
                "last_vote": tally.last_vote,
                "deliveries": deliveries([d.stream for d in devices]),
                "statuses": statuses,
                "best_arms": sorted({d.remaining[0] for d in devices if len(d.remaining) == 1}),
            }
            for d in devices:
                d.stream.close()
        else:
            raise ValueError(command)
        commands.send((number, time.time() - began, began, reply))
    assert "redis" not in sys.modules, "a client process imported a Redis client"


ClientMain = Callable[[int, str, Connection], Coroutine[Any, Any, None]]


def client_process(
    number: int, url: str, commands: Connection, main: ClientMain = client_main
) -> None:
    """Entry point of a client process (spawned: a fresh interpreter); `main` answers the
    driver's commands (another benchmark's, bench_ldp_fleet.py, passes its own)."""
    found = redis_variables(dict(os.environ))
    assert not found, f"Redis variables in a client's environment: {found}"
    raise_fd_limit()
    import uvloop

    try:
        uvloop.run(main(number, url, commands))
    except BaseException as exc:
        commands.send((number, 0.0, 0.0, {"error": repr(exc)}))
        raise


# -- the driver --------------------------------------------------------------------------------
class Clients:
    """The client processes, each behind a pipe: a command to all, then every answer."""

    def __init__(self, url: str, processes: int, main: ClientMain = client_main) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipes: list[Connection] = []
        self.processes = []
        for number in range(processes):
            mine, theirs = context.Pipe()
            process = context.Process(target=client_process, args=(number, url, theirs, main))
            process.start()
            self.pipes.append(mine)
            self.processes.append(process)

    def ask(self, command: str, each: list[dict[str, Any]], timeout: float) -> list[Any]:
        for pipe, arguments in zip(self.pipes, each, strict=True):
            pipe.send((command, {**arguments, "timeout": timeout}))
        replies = []
        for pipe in self.pipes:
            if not pipe.poll(timeout + 30):
                raise RuntimeError(f"a client process did not answer {command!r}")
            number, took, began, reply = pipe.recv()
            if isinstance(reply, dict) and "error" in reply:
                raise RuntimeError(f"client process {number}: {reply['error']}")
            replies.append((took, began, reply))
        return replies

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(("exit", {}))
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def open_subscribers(client: httpx.Client) -> float | None:
    """The coordinator's dexp_sse_subscribers gauge (/metrics); None if it did not answer 200."""
    reply = client.get("/metrics")
    if reply.status_code != 200:
        return None
    for line in reply.text.splitlines():
        if line.startswith("dexp_sse_subscribers "):
            return float(line.split()[1])
    return 0.0


def streams_closed(client: httpx.Client, timeout: float) -> list[int]:
    """Wait until the coordinator holds no stream; [503s, probes] seen meanwhile. While thousands
    of streams unwind the coordinator answers 503 (DEXP_MAX_CONCURRENCY) to other requests: their
    connections are gone but their tasks still count as running requests."""
    seen = [0, 0]

    def closed() -> bool:
        held = open_subscribers(client)
        seen[0] += held is None
        seen[1] += 1
        return held == 0

    wait_for(closed, timeout, "streams closing")
    return seen


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)


def spread(values: list[float]) -> dict[str, float]:
    array = np.array(values)
    return {
        "count": len(values),
        "p50_ms": float(np.percentile(array, 50)) if len(values) else float("nan"),
        "p99_ms": float(np.percentile(array, 99)) if len(values) else float("nan"),
        "max_ms": float(array.max()) if len(values) else float("nan"),
    }


def split(items: list[Any], parts: int) -> list[list[Any]]:
    return [items[p::parts] for p in range(parts)]


def tickets(client: httpx.Client, experiment: str, count: int) -> list[str]:
    issued: list[str] = []
    while len(issued) < count:
        reply = client.post(
            f"/v1/experiments/{experiment}/tickets",
            json={"count": min(10_000, count - len(issued)), "ttl_seconds": 3600},
        )
        reply.raise_for_status()
        issued += reply.json()["tickets"]
    return issued


def create(client: httpx.Client, experiment: str, arms: int, **config: Any) -> dict[str, Any]:
    reply = client.post(
        "/v1/experiments",
        json={"id": experiment, "arms": [f"arm{i}" for i in range(arms)], **config},
    )
    reply.raise_for_status()
    return dict(reply.json())


def fan_out(
    client: httpx.Client, clients: Clients, sizes: list[int], eliminations: int, server: int,
    timeout: float, idle: float,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:  # fmt: skip
    """Phase 1: delivery delays at each number of streams, and the memory per stream."""
    processes = len(clients.pipes)
    create(client, PROBE, eliminations * len(sizes) + 1, eta=PROBE_ETA, delta=PROBE_DELTA)
    threshold = int(client.get(f"/v1/experiments/{PROBE}").json()["threshold"])
    voters = []
    for ticket in tickets(client, PROBE, threshold):
        enrolled = client.post(
            "/v1/agents", json={"experiment": PROBE}, headers={"Authorization": f"Bearer {ticket}"}
        )
        enrolled.raise_for_status()
        voters.append(enrolled.json()["token"])
    levels, opened, arm = [], 0, 0
    rss_before = rss_bytes(server)
    memory: dict[str, Any] = {}
    for size in sizes:
        fresh = split(list(range(opened, size)), processes)
        t0 = time.perf_counter()
        refused = clients.ask("probe-open", [{"indices": f} for f in fresh], timeout)
        opening = time.perf_counter() - t0
        opened = size
        if size == sizes[-1]:
            cpu0 = cpu_seconds(server)
            time.sleep(idle)  # the streams idle: heartbeats only
            idle_cpu = cpu_seconds(server) - cpu0
            rss_after = rss_bytes(server)
            memory = {
                "streams": size,
                "rss_before_mb": rss_before / 2**20,
                "rss_after_mb": rss_after / 2**20,
                "bytes_per_stream": (rss_after - rss_before) / size,
                "streams_held": open_subscribers(client),
                "idle_s": idle,
                "idle_server_cpu_s": idle_cpu,
            }
        since = time.time() * 1000
        cpu, wall = 0.0, 0.0
        for _ in range(eliminations):
            for token in voters:
                reply = client.post(
                    f"/v1/experiments/{PROBE}/votes",
                    json={"arm": arm, "epoch": 0},
                    headers={"Authorization": f"Bearer {token}"},
                )
                reply.raise_for_status()
            answer = reply.json()
            if answer["outcome"] != "eliminated":
                raise RuntimeError(f"probe arm {arm}: {answer}")
            # The fan-out's cost: the coordinator's CPU from just before the elimination's tick
            # until every stream has it (not the wait for the tick, heartbeats only).
            cadence = cadence_seconds()
            tick = (time.time() // cadence + 1) * cadence if cadence else 0
            time.sleep(max(0.0, tick - time.time() - 0.1))
            cpu0, t0 = cpu_seconds(server), time.perf_counter()
            version = published(client, arm, timeout)
            arm += 1
            clients.ask("probe-wait", [{"version": version}] * processes, timeout)
            cpu += cpu_seconds(server) - cpu0
            wall += time.perf_counter() - t0
        replies = clients.ask("probe-deliveries", [{"since": since}] * processes, timeout)
        delays = [d for _, _, r in replies for _, d in r]
        per_event: dict[str, float] = {}
        for _, _, r in replies:
            for event_id, d in r:
                per_event[event_id] = max(per_event.get(event_id, 0.0), d)
        to_all = list(per_event.values())
        levels.append(
            {
                "subscribers": size,
                "opened_in_s": opening,
                "refused_503": sum(r for _, _, r in refused),
                "eliminations": eliminations,
                "wall_s": wall,
                "server_cpu_s": cpu,
                "server_cpu_us_per_delivery": 1e6 * cpu / max(1, len(delays)),
                "delivery": spread(delays),
                "to_all": spread(to_all),
            }
        )
    clients.ask("probe-close", [{}] * processes, timeout)
    memory["refused_while_closing"] = streams_closed(client, timeout)
    client.delete(f"/v1/experiments/{PROBE}").raise_for_status()
    return levels, memory


def cadence_seconds() -> float:
    """The coordinator's cadence of publication of an elimination (its setting, from the
    environment). Imported here, in the driver: coordinator.settings imports a Redis client, which
    the client processes must not (they import this module)."""
    from coordinator.settings import Settings

    default = Settings.model_fields["publish_cadence_seconds"].default
    return float(os.environ.get("DEXP_PUBLISH_CADENCE_SECONDS", default))


def published(client: httpx.Client, arm: int, timeout: float) -> int:
    """The version of the publication that shows `arm` out: an elimination is published at the
    next tick of DEXP_PUBLISH_CADENCE_SECONDS (a read takes the publication once it is due), so
    that each elimination is one event, as before publications were batched."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = client.get(f"/v1/experiments/{PROBE}").json()
        if arm not in state["remaining_arms"]:
            return int(state["version"])
        time.sleep(0.05)
    raise RuntimeError(f"probe arm {arm}: not published within {timeout} s")


def fleet(
    client: httpx.Client, clients: Clients, n_agents: int, means: list[float], seed: int,
    server: int, timeout: float,
) -> dict[str, Any]:  # fmt: skip
    """Phase 2: the devices enroll with tickets, open their streams and play to an identified arm."""
    processes = len(clients.pipes)
    created = create(client, FLEET, len(means), eta=0.9, delta=0.05)
    params = client.get(f"/v1/experiments/{FLEET}").json()["params"]
    issued = tickets(client, FLEET, n_agents)
    indices = split(list(range(n_agents)), processes)
    shares = split(issued, processes)
    cpu0, t0 = cpu_seconds(server), time.perf_counter()
    enroll_refused = clients.ask(
        "enroll",
        [
            {"indices": i, "tickets": t, "params": params, "means": means, "seed": seed}
            for i, t in zip(indices, shares, strict=True)
        ],
        timeout,
    )
    enroll_s, enroll_cpu = time.perf_counter() - t0, cpu_seconds(server) - cpu0
    t0 = time.perf_counter()
    open_refused = clients.ask("fleet-open", [{}] * processes, timeout)
    open_s = time.perf_counter() - t0
    held = open_subscribers(client)
    cpu0, t0 = cpu_seconds(server), time.perf_counter()
    replies = clients.ask("play", [{"means": means}] * processes, timeout)
    play_s, play_cpu = time.perf_counter() - t0, cpu_seconds(server) - cpu0
    refused_while_closing = streams_closed(client, timeout)
    results = [r for _, _, r in replies]
    votes: dict[str, int] = {}
    for r in results:
        for outcome, n in r["votes"].items():
            votes[outcome] = votes.get(outcome, 0) + n
    latencies = np.array([x for r in results for x in r["latencies"]])
    sent = int(sum(votes.values()))
    first = min(r["first_vote"] for r in results)
    last = max(r["last_vote"] for r in results)
    per_event: dict[str, float] = {}
    for r in results:
        for event_id, d in r["deliveries"]:
            per_event[event_id] = max(per_event.get(event_id, 0.0), d)
    statuses: dict[str, int] = {}
    for r in results:
        for status, n in r["statuses"].items():
            statuses[status] = statuses.get(status, 0) + n
    final = client.get(f"/v1/experiments/{FLEET}/best-arm").json()
    return {
        "agents": n_agents,
        "threshold": created["threshold"],
        "means": means,
        "enrollments": n_agents,
        "enroll_s": enroll_s,
        "enrollments_per_s": n_agents / enroll_s,
        "enrollments_per_server_cpu_s": n_agents / enroll_cpu if enroll_cpu else float("nan"),
        "enrollments_refused_503": sum(r for _, _, r in enroll_refused),
        "streams_refused_503": sum(r for _, _, r in open_refused),
        "streams_opened_in_s": open_s,
        "streams_held": held,
        "play_s": play_s,
        "play_server_cpu_s": play_cpu,
        "activations": sum(r["activations"] for r in results),
        "votes": votes,
        "errors": {k: v for r in results for k, v in r["errors"].items()},
        "votes_sent": sent,
        "votes_per_s": sent / (last - first) if last > first else float("nan"),
        "votes_window_s": last - first,
        "vote_p50_ms": percentile_ms(latencies, 50),
        "vote_p99_ms": percentile_ms(latencies, 99),
        "delivery": spread([d for r in results for _, d in r["deliveries"]]),
        "to_all": spread(list(per_event.values())),
        "events": len(per_event),
        "statuses": statuses,
        "best_arms_seen": sorted({a for r in results for a in r["best_arms"]}),
        "best_arm": final,
        "refused_while_closing": refused_while_closing,
    }


def reads(url: str, server: int, count: int) -> dict[str, dict[str, float]]:
    """Phase 3: bench_reads.py's measure, on the fleet's experiment (10,000 agents in it)."""
    host = url.removeprefix("http://")
    paths = {k: p.replace(f"/{EXPERIMENT}", f"/{FLEET}") for k, p in KINDS.items()}
    with httpx.Client(base_url=url, trust_env=False) as client:
        tags = {k: client.get(p).headers["etag"] for k, p in paths.items()}
    figures = {}
    for kind, path in paths.items():
        for mode in ("full", "304"):
            raw = read_request(host, path, tags[kind] if mode == "304" else None)
            flood(url, raw, 400, 1, 2, server)  # warm-up, not measured
            got = flood(url, raw, count, 2, 4, server)
            figures[f"{kind} {mode}"] = {
                "requests": got["requests"],
                "statuses": got["statuses"],
                "per_server_cpu_s": got["requests"] / got["cpu_s"]
                if got["cpu_s"]
                else float("nan"),
            }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", type=int, default=10_000, help="device agents (and streams)")
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--means", default="0.9,0.1,0.1,0.1", help="Bernoulli means of the arms")
    parser.add_argument("--eliminations", type=int, default=10, help="per fan-out size")
    parser.add_argument("--reads", type=int, default=10_000, help="requests per read load")
    parser.add_argument(
        "--idle", type=float, default=0.0,
        help="seconds the largest fan-out idles (heartbeats only) while its CPU is measured",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600.0, help="per phase, seconds")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    means = [float(m) for m in args.means.split(",")]
    sizes = sorted({min(1000, args.agents), args.agents})
    raise_fd_limit()  # the coordinator inherits it: one descriptor per stream
    environment = {
        "DEXP_ENVIRONMENT": "production",  # tickets only: open enrollment is off
        "DEXP_MAX_AGENTS": str(max(10_000, args.agents)),
        # the probe's streams may still be closing when the fleet's open
        "DEXP_MAX_SUBSCRIBERS": str(max(10_000, 2 * args.agents)),
    }
    figures: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "host": socket.gethostname()},
        "configuration": {**vars(args), **environment},
    }
    with tempfile.TemporaryDirectory(prefix="dexp-bench-") as directory:
        redis_process, redis_url = start_redis(directory)
        server = clients = None
        saved = dict(os.environ)
        try:
            os.environ.update(environment)
            server, url = start_coordinator(redis_url, None)
            for name in redis_variables(dict(os.environ)):  # nothing of Redis for the clients
                del os.environ[name]
            clients = Clients(url, args.processes)
            with httpx.Client(
                base_url=url, timeout=60, trust_env=False,
                headers={"Authorization": f"Bearer {ADMIN}"},
            ) as client:  # fmt: skip
                levels, memory = fan_out(
                    client, clients, sizes, args.eliminations, server.pid, args.timeout, args.idle
                )
                figures["fan_out"], figures["memory"] = levels, memory
                figures["fleet"] = fleet(
                    client, clients, args.agents, means, args.seed, server.pid, args.timeout
                )
            figures["reads"] = reads(url, server.pid, args.reads)
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


def report(figures: dict[str, Any]) -> None:
    configuration, fleet_figures, memory = (
        figures["configuration"],
        figures["fleet"],
        figures["memory"],
    )
    print(
        f"machine: {figures['machine']['cores']} cores; one coordinator process (one uvicorn "
        f"worker), redis-server and {configuration['processes']} client processes share them"
    )
    f = fleet_figures
    print(
        f"fleet: {f['agents']} device agents, arms of means {f['means']}, DE-SER3 eta=0.9 "
        f"delta=0.05 (M={f['threshold']}), tickets, no Redis variable in the clients"
    )
    print(
        f"enrollments: {f['enrollments']} in {f['enroll_s']:.1f} s: {f['enrollments_per_s']:.0f}/s "
        f"({f['enrollments_per_server_cpu_s']:.0f} per coordinator CPU-second); 503s retried: "
        f"{f['enrollments_refused_503']} enrollments, {f['streams_refused_503']} stream opens, "
        f"{f['votes'].get('http 503', 0)} votes; errors {f['errors'] or 'none'}"
    )
    print(
        f"streams: {memory['streams_held']:.0f} held by one coordinator process (probe, idle); "
        f"RSS {memory['rss_before_mb']:.0f} -> {memory['rss_after_mb']:.0f} MB: "
        f"{memory['bytes_per_stream'] / 1024:.1f} KiB per connection; the fleet's "
        f"{f['streams_held']:.0f} streams opened in {f['streams_opened_in_s']:.1f} s"
    )
    if memory["idle_s"]:
        print(
            f"idle: {memory['idle_server_cpu_s']:.2f} s of coordinator CPU in {memory['idle_s']:.0f}"
            f" s with {memory['streams']} streams open (heartbeat every "
            f"{os.environ.get('DEXP_SSE_HEARTBEAT_SECONDS', '15')} s)"
        )
    print(
        "503s to GET /metrics while the streams unwound (503s, probes): after the probe's "
        f"{memory['refused_while_closing']}, after the fleet's {f['refused_while_closing']}"
    )
    for level in figures["fan_out"]:
        d, a = level["delivery"], level["to_all"]
        print(
            f"delivery at {level['subscribers']} subscribers (opened in {level['opened_in_s']:.1f} s, "
            f"{level['refused_503']} 503s retried; {level['eliminations']} "
            f"eliminations, {d['count']} deliveries): p50 {d['p50_ms']:.0f} ms, p99 "
            f"{d['p99_ms']:.0f} ms, max {d['max_ms']:.0f} ms; to all subscribers: p50 "
            f"{a['p50_ms']:.0f} ms, p99 {a['p99_ms']:.0f} ms; coordinator CPU "
            f"{level['server_cpu_s']:.1f} s in {level['wall_s']:.1f} s: "
            f"{level['server_cpu_us_per_delivery']:.0f} us per delivery"
        )
    d, a = f["delivery"], f["to_all"]
    print(
        f"the fleet's own {f['events']} changes at {f['agents']} subscribers (clients busy "
        f"learning), {d['count']} deliveries: p50 {d['p50_ms']:.0f} ms, p99 {d['p99_ms']:.0f} ms; "
        f"to all: p50 {a['p50_ms']:.0f} ms, max {a['max_ms']:.0f} ms"
    )
    print(
        f"play: {f['play_s']:.1f} s to identified ({f['activations']} activations on the "
        f"devices), statuses {f['statuses']}, best arm {f['best_arm'].get('best_arm')}; votes "
        f"{f['votes']}: {f['votes_sent']} in {f['votes_window_s']:.1f} s, "
        f"{f['votes_per_s']:.0f} votes/s, latency p50 {f['vote_p50_ms']:.1f} ms, p99 "
        f"{f['vote_p99_ms']:.1f} ms; coordinator CPU {f['play_server_cpu_s']:.1f} s"
    )
    for name, r in figures["reads"].items():
        print(
            f"reads {name:14} {r['requests']} requests, statuses {r['statuses']}: "
            f"{r['per_server_cpu_s']:,.0f} per coordinator CPU-second"
        )
    for kind in KINDS:
        ratio = (
            figures["reads"][f"{kind} 304"]["per_server_cpu_s"]
            / figures["reads"][f"{kind} full"]["per_server_cpu_s"]
        )
        print(f"reads {kind}: {ratio:.1f}x more 304s than full reads per CPU-second")


if __name__ == "__main__":
    main()
