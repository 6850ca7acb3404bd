"""What the agent service's Redis operations and the coordinator's listing cost, one at a time.

    python3 benchmarks/bench_redis_ops.py [--streams 8000] [--experiments 1000] [--json]

Starts a real redis-server (a free port of 127.0.0.1) and measures, with Redis's own clock (INFO
commandstats, microseconds per call) and the client's:

- XREADGROUP over N empty streams, as an agent process hosting N agents reads them: non-blocking
  (">"), blocking (">", BLOCK 50 ms, which registers the client on every stream and unregisters
  it), and the pending entries ("0", which names every stream in its reply); and the same over
  1,000 streams (a chunk of agent/streams.py's READ_CHUNK);
- acknowledging a read of 200 streams of 180 entries each in one MULTI/EXEC: XACK + XDEL of every
  id, against XACK + XTRIM MINID (what agent/streams.py did), against XACK alone (what it does: its
  Redis user may only read and acknowledge); then the load generator's poll of those 200 streams,
  which deletes the acknowledged entries (load_generator/streams.py: XINFO GROUPS, XPENDING, XTRIM
  MINID, XLEN), Redis's time summed over its commands;
- then starts the coordinator (one uvicorn worker, a thread of this process), creates
  --experiments experiments and times GET /v1/experiments pages of 100 and of 25 (the agents' page
  under `*`), GET .../best-arm and GET .../{id}, one at a time.

Redis's figures are what matters for everyone else: Redis serves no other client while it runs one
command (or one transaction). Every figure is the median of --repeat runs, each printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable from a checkout without installing the package
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import redis  # noqa: E402

from common import redis_keys as keys  # noqa: E402
from common.wire import encode_rewards  # noqa: E402
from load_generator.streams import trim_acknowledged  # noqa: E402
from tests.services.helpers import (  # noqa: E402  (the test suite's real servers)
    RedisServer,
    ThreadedCoordinator,
    admin_headers,
    coordinator_settings,
)

GROUP = "agents"


def commandstat(r: redis.Redis, command: str) -> tuple[int, float]:
    stats = r.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)), float(stats.get("usec", 0))


def timed(r: redis.Redis, command: str, action: Any, repeat: int) -> dict[str, Any]:
    """Median Redis time per call of `command` and client wall time of `action`, over `repeat`."""
    redis_ms, wall_ms = [], []
    for _ in range(repeat):
        r.config_resetstat()
        started = time.perf_counter()
        action()
        wall_ms.append((time.perf_counter() - started) * 1000)
        calls, usec = commandstat(r, command)
        redis_ms.append(usec / max(calls, 1) / 1000)
    return {
        "redis_ms": round(statistics.median(redis_ms), 3),
        "client_ms": round(statistics.median(wall_ms), 1),
        "runs_redis_ms": [round(x, 3) for x in redis_ms],
    }


def stream_names(count: int) -> list[str]:
    """Names as agent/streams.py reads them: 8 agents per experiment."""
    agents = [(f"exp-{i // 8:04d}", f"exp-{i // 8:04d}-{i:010d}") for i in range(count)]
    return [keys.activations(e, a, keys.stream_secret(f"{a}.token")) for e, a in agents]


def reads(r: redis.Redis, n_streams: int, repeat: int) -> dict[str, Any]:
    names = stream_names(n_streams)
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.xgroup_create(name, GROUP, id="0", mkstream=True)
    pipe.execute()
    chunk = names[:1000]
    return {
        f"nonblocking_{n_streams}": timed(
            r,
            "xreadgroup",
            lambda: r.xreadgroup(GROUP, "c", dict.fromkeys(names, ">"), count=200),
            repeat,
        ),
        f"blocking_50ms_{n_streams}": timed(
            r,
            "xreadgroup",
            lambda: r.xreadgroup(GROUP, "c", dict.fromkeys(names, ">"), count=200, block=50),
            repeat,
        ),
        f"pending_{n_streams}": timed(
            r,
            "xreadgroup",
            lambda: r.xreadgroup(GROUP, "c", dict.fromkeys(names, "0"), count=200),
            repeat,
        ),
        "nonblocking_1000": timed(
            r,
            "xreadgroup",
            lambda: r.xreadgroup(GROUP, "c", dict.fromkeys(chunk, ">"), count=200),
            repeat,
        ),
    }


def acknowledgements(r: redis.Redis, repeat: int) -> dict[str, Any]:
    """One read of 200 streams x 180 entries (10-arm rewards), acknowledged each way; after XACK
    alone, the load generator's poll that deletes what was acknowledged."""
    rng = np.random.default_rng(0)
    names = [
        keys.activations("ack", f"ack-{i:010d}", keys.stream_secret(f"{i}")) for i in range(200)
    ]
    figures: dict[str, list[float]] = {"xdel": [], "xtrim": [], "xack": [], "poll": []}
    for _ in range(repeat):
        for mode in ("xdel", "xtrim", "xack"):
            pipe = r.pipeline(transaction=False)
            for name in names:
                pipe.delete(name)
                pipe.xgroup_create(name, GROUP, id="0", mkstream=True)
            rows = encode_rewards((rng.random((200 * 180, 10)) < 0.5).astype(float), bounded=True)
            for i, row in enumerate(rows):
                pipe.xadd(names[i % 200], {"t": i, "r": row})
            pipe.execute()
            reply = r.xreadgroup(GROUP, "c", dict.fromkeys(names, ">"), count=200)
            r.config_resetstat()
            pipe = r.pipeline(transaction=True)
            for stream, entries in reply:
                ids = [e[0] for e in entries]
                pipe.xack(stream, GROUP, *ids)
                if mode == "xdel":
                    pipe.xdel(stream, *ids)
                elif mode == "xtrim":
                    ms, seq = ids[-1].split(b"-")
                    pipe.xtrim(stream, minid=f"{int(ms)}-{int(seq) + 1}", approximate=False)
            pipe.execute()
            figures[mode].append(commandstat(r, "exec")[1] / 1000)
            if mode == "xack":
                r.config_resetstat()
                assert trim_acknowledged(r, names) == [0] * len(names)
                poll = ("xinfo", "xpending", "xtrim", "xlen")
                figures["poll"].append(sum(commandstat(r, c)[1] for c in poll) / 1000)
            assert sum(r.xlen(n) for n in names) == 0
    poll = figures.pop("poll")
    return (
        {f"transaction_ms_{mode}": round(statistics.median(v), 1) for mode, v in figures.items()}
        | {f"runs_{mode}": [round(x, 1) for x in v] for mode, v in figures.items()}
        | {"poll_ms": round(statistics.median(poll), 1), "runs_poll": [round(x, 1) for x in poll]}
    )


def coordinator_reads(url: str, experiments: int, repeat: int) -> dict[str, Any]:
    client = httpx.Client(base_url=url, headers=admin_headers(), timeout=30)
    for i in range(experiments):
        reply = client.post("/v1/experiments", json={"id": f"e{i:04d}", "arms": list("ABCDEFGHIJ")})
        assert reply.status_code == 201, reply.text
    figures: dict[str, Any] = {}
    for limit in (100, 25):
        times = []
        for _ in range(repeat):
            after = ""
            while True:
                started = time.perf_counter()
                page = client.get("/v1/experiments", params={"limit": limit, "after": after})
                times.append((time.perf_counter() - started) * 1000)
                if not page.json()["next"]:
                    break
                after = page.json()["next"]
        figures[f"list_page_{limit}_ms"] = round(statistics.median(times), 2)
    for name, path in (("best_arm", "/best-arm"), ("state", "")):
        times = []
        for i in range(min(experiments, 500)):
            started = time.perf_counter()
            client.get(f"/v1/experiments/e{i:04d}{path}").raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
        figures[f"{name}_ms"] = round(statistics.median(times), 2)
    client.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=8000)
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        r = redis.Redis.from_url(server.url)
        figures: dict[str, Any] = {"redis": r.info("server")["redis_version"]}
        figures["xreadgroup"] = reads(r, args.streams, args.repeat)
        figures["acknowledge_200_streams_x_180"] = acknowledgements(r, args.repeat)
        r.flushall()
        coordinator = ThreadedCoordinator(coordinator_settings(server.url)).start()
        try:
            figures["coordinator"] = coordinator_reads(
                coordinator.url, args.experiments, args.repeat
            )
        finally:
            coordinator.stop()
        r.close()
    finally:
        server.stop()
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"redis {figures['redis']}")
    for name, f in figures["xreadgroup"].items():
        print(f"XREADGROUP {name}: Redis {f['redis_ms']} ms a call, client {f['client_ms']} ms")
    ack = figures["acknowledge_200_streams_x_180"]
    print(
        f"acknowledge 200 streams x 180 entries in one transaction: XACK + XDEL "
        f"{ack['transaction_ms_xdel']} ms of Redis, XACK + XTRIM MINID {ack['transaction_ms_xtrim']} ms, "
        f"XACK {ack['transaction_ms_xack']} ms; then the load generator's poll that deletes them: "
        f"{ack['poll_ms']} ms of Redis"
    )
    for name, value in figures["coordinator"].items():
        print(f"coordinator, {args.experiments} experiments: {name} {value}")


if __name__ == "__main__":
    main()
