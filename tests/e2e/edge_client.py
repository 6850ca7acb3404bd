"""Clients of the proxy, run inside containers on the stack's public network (each container is one
client address): the attackers of tests/e2e/test_compose.py and the honest device they must not
stop. Standard library and httpx only (the app image's); each command prints one JSON report.

    python edge_client.py slowloris HOST PORT CA CONNECTIONS   # until stdin closes
    python edge_client.py burst HOST PORT CA PATH              # until stdin closes
    python edge_client.py trickle HOST PORT CA EXPERIMENT ARM TICKET
    python edge_client.py device HOST PORT CA EXPERIMENT ARM TICKET...
    python edge_client.py credentials HOST PORT CA EXPERIMENT TICKET FAILURES SPOOF

slowloris and burst print a line `ready` once their attack is under way, then keep it up until
their standard input closes (the test closes it once the device has been served), and report.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import sys
import threading
import time
from collections import Counter
from typing import Any

import httpx

TICK = 0.5  # seconds between two trickled bytes


def context(ca: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca)


def connect(host: str, port: int, ca: str) -> ssl.SSLSocket:
    """A TLS connection to the proxy (raises if the proxy closes it before the handshake ends)."""
    raw = socket.create_connection((host, port), timeout=10)
    return context(ca).wrap_socket(raw, server_hostname=host)


def enroll(client: httpx.Client, experiment: str, ticket: str) -> httpx.Response:
    """POST /v1/agents with a one-time ticket: the new agent's token is in the answer."""
    return client.post(
        "/v1/agents",
        json={"experiment": experiment},
        headers={"Authorization": f"Bearer {ticket}"},
    )


def stdin_closed() -> bool:
    readable, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(readable) and not sys.stdin.readline()


def slowloris(host: str, port: int, ca: str, connections: int) -> dict[str, Any]:
    """Open `connections` TLS connections: even ones send nothing, odd ones trickle a request's
    headers a byte every TICK. A connection the proxy closes is opened again, so the pressure
    lasts until stdin closes. Reports how many the proxy accepted at most at once, how many it
    refused at once, and for each one it cut: after how long, and what it said (nothing)."""
    held: dict[ssl.SSLSocket, tuple[float, bool]] = {}  # socket -> (opened at, trickles)
    refused, most, cuts, said = 0, 0, [], b""

    def open_one(index: int) -> None:
        nonlocal refused
        try:
            sock = connect(host, port, ca)
        except (OSError, ssl.SSLError):
            refused += 1
            return
        sock.setblocking(False)
        trickles = index % 2 == 1
        if trickles:
            sock.send(b"GET /v1/experiments HTTP/1.1\r\nHost: proxy\r\nX-Slow: ")
        held[sock] = (time.monotonic(), trickles)

    for index in range(connections):
        open_one(index)
    most = len(held)
    print("ready", flush=True)
    while not stdin_closed():
        for sock, (opened, trickles) in list(held.items()):
            try:
                data = sock.recv(4096)
            except (ssl.SSLWantReadError, BlockingIOError):
                data = None
            except OSError:
                data = b""
            if data is not None:  # closed by the proxy (or an answer, which would be a failure)
                said += data
                cuts.append(round(time.monotonic() - opened, 2))
                del held[sock]
                sock.close()
                open_one(len(cuts))
                continue
            if trickles:
                try:
                    sock.send(b"a")
                except (ssl.SSLWantWriteError, BlockingIOError):
                    pass
                except OSError:
                    pass
        most = max(most, len(held))
        time.sleep(TICK)
    for sock in held:
        sock.close()
    return {
        "held": most,
        "refused": refused,
        "cuts": len(cuts),
        "first_cut": min(cuts, default=None),
        "last_cut": max(cuts, default=None),
        "said": said.decode(errors="replace")[:500],
    }


def burst(host: str, port: int, ca: str, path: str) -> dict[str, Any]:
    """GET `path` as fast as one kept-alive connection goes, until stdin closes: the statuses, and
    the first 429's headers and body."""
    statuses: Counter[int] = Counter()
    refused: dict[str, Any] = {}
    with httpx.Client(base_url=f"https://{host}:{port}", verify=context(ca), timeout=10) as client:
        for _ in range(50):
            statuses[client.get(path).status_code] += 1
        print("ready", flush=True)
        while not stdin_closed():
            reply = client.get(path)
            statuses[reply.status_code] += 1
            if reply.status_code == 429:
                time.sleep(0.01)  # still hammering, at a pace a shared test machine bears
            if reply.status_code == 429 and not refused:
                refused = {
                    "retry_after": reply.headers.get("retry-after"),
                    "content_type": reply.headers.get("content-type"),
                    "body": reply.json(),
                }
    return {"statuses": dict(statuses), "refused": refused}


def trickle(host: str, port: int, ca: str, experiment: str, arm: int, ticket: str) -> Any:
    """Enroll with `ticket`, then vote against `arm` with the agent's own token, the body a byte
    every TICK after its headers, its last byte never sent: what the proxy answers, and when."""
    with httpx.Client(base_url=f"https://{host}:{port}", verify=context(ca), timeout=10) as client:
        token = enroll(client, experiment, ticket).json()["token"]
    path = f"/v1/experiments/{experiment}/votes"
    body = json.dumps({"arm": arm, "epoch": 0})
    sock = connect(host, port, ca)
    payload = body.encode()
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
    )
    started, sent, answer = time.monotonic(), 0, b""
    sock.settimeout(TICK)
    while time.monotonic() - started < 120:
        if sent < len(payload) - 1:  # never the last byte: the body is never complete
            try:
                sock.sendall(payload[sent : sent + 1])
                sent += 1
            except OSError:
                pass
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            break
        if not data:
            break
        answer += data
    head, _, content = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/") else None
    return {
        "status": status,
        "seconds": round(time.monotonic() - started, 2),
        "bytes_sent": sent,
        "body_bytes": len(payload),
        "head": head.decode(errors="replace"),
        "body": content.decode(errors="replace"),
    }


def device(host: str, port: int, ca: str, experiment: str, arm: int, tickets: list[str]) -> Any:
    """An honest device, twice (one agent per ticket): follows the experiment's event stream,
    enrolls, reads, votes against `arm`; stops once the stream showed `arm` gone and a heartbeat,
    or after 90 s. Every status, and what the stream showed."""
    base = f"https://{host}:{port}"
    stream: dict[str, Any] = {"states": [], "heartbeats": 0, "headers": {}}
    done = threading.Event()

    def follow() -> None:
        with (
            httpx.Client(
                base_url=base, verify=context(ca), timeout=httpx.Timeout(10, read=60)
            ) as c,
            c.stream("GET", f"/v1/experiments/{experiment}/events") as reply,
        ):
            stream["status"] = reply.status_code
            stream["headers"] = {k: reply.headers.get(k) for k in ("content-type",)}
            for line in reply.iter_lines():
                if line.startswith(":"):
                    stream["heartbeats"] += 1
                elif line.startswith("data:"):
                    stream["states"].append(json.loads(line.removeprefix("data:")))
                gone = any(arm not in s["remaining_arms"] for s in stream["states"])
                if gone and stream["heartbeats"]:
                    break
        done.set()

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    steps: list[tuple[str, int, float]] = []
    with httpx.Client(base_url=base, verify=context(ca), timeout=10) as client:

        def step(name: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
            started = time.monotonic()
            reply = client.request(method, path, **kwargs)
            steps.append((name, reply.status_code, round(time.monotonic() - started, 3)))
            return reply

        tokens = []
        for ticket in tickets:
            started = time.monotonic()
            enrolled = enroll(client, experiment, ticket)
            steps.append(("enroll", enrolled.status_code, round(time.monotonic() - started, 3)))
            tokens.append(enrolled.json().get("token", ""))
        state = step("read", "GET", f"/v1/experiments/{experiment}").json()
        for token in tokens:
            step(
                "vote", "POST", f"/v1/experiments/{experiment}/votes",
                json={"arm": arm, "epoch": state.get("epoch", 0)},
                headers={"Authorization": f"Bearer {token}"},
            )  # fmt: skip
        step("best-arm", "GET", f"/v1/experiments/{experiment}/best-arm")
        step("me", "GET", "/v1/agents/me", headers={"Authorization": f"Bearer {tokens[0]}"})
    done.wait(90)
    return {"steps": steps, "stream": stream}


def credentials(
    host: str, port: int, ca: str, experiment: str, ticket: str, failures: int, spoof: str
) -> Any:
    """Enroll with `ticket`; then `failures` requests with a wrong token, each claiming another
    address in X-Forwarded-For (`spoof`, then made-up ones); then one with the agent's right
    token, claiming `spoof`. Every status, and the last answer's body."""
    with httpx.Client(base_url=f"https://{host}:{port}", verify=context(ca), timeout=10) as client:
        enrolled = enroll(client, experiment, ticket)
        statuses = [enrolled.status_code]
        for index in range(failures):
            claimed = spoof if index % 2 == 0 else f"198.51.100.{index % 250 + 1}"
            reply = client.get(
                "/v1/agents/me",
                headers={"Authorization": "Bearer not-a-token", "X-Forwarded-For": claimed},
            )
            statuses.append(reply.status_code)
        token = enrolled.json().get("token", "")
        reply = client.get(
            "/v1/agents/me", headers={"Authorization": f"Bearer {token}", "X-Forwarded-For": spoof}
        )
        statuses.append(reply.status_code)
    return {"statuses": statuses, "last": reply.json()}


def main(argv: list[str]) -> None:
    command, host, port, ca, *rest = argv
    server = (host, int(port), ca)
    if command == "slowloris":
        report = slowloris(*server, int(rest[0]))
    elif command == "burst":
        report = burst(*server, rest[0])
    elif command == "trickle":
        report = trickle(*server, rest[0], int(rest[1]), rest[2])
    elif command == "device":
        report = device(*server, rest[0], int(rest[1]), rest[2:])
    elif command == "credentials":
        report = credentials(*server, rest[0], rest[1], int(rest[2]), rest[3])
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
