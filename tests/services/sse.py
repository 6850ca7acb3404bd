"""A Server-Sent Events client for the tests: one stream read in a thread, its blocks in a queue.

It reads the stream as a device would, over real HTTP (httpx), and splits it into blocks (the lines
up to a blank line): an event (`id`, `event`, `data`), the retry hint alone, or a comment (a
heartbeat). The tests wait for blocks with a generous deadline: for a condition, never a time.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

DEADLINE = 30.0  # seconds a test waits for a block before it fails (a loaded machine is slow)


@dataclass
class Block:
    """The fields of one block of the stream (data lines joined by newlines), and its comments."""

    fields: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)

    @property
    def is_event(self) -> bool:
        return "data" in self.fields

    @property
    def event(self) -> str:
        return self.fields.get("event", "message")

    @property
    def id(self) -> str | None:
        return self.fields.get("id")

    def json(self) -> Any:
        return json.loads(self.fields["data"])


def wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll `check` until true, within the generous DEADLINE (a condition, not a time bet)."""
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"not within {DEADLINE} s: {what}"
        time.sleep(0.02)


def event_order(event_id: str) -> tuple[int, int]:
    """The order of an event id ('<ms>-<seq>'): how the tests check that ids increase."""
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq)


class Stream:
    """GET `path` as an event stream; `status` and `headers` once the response has begun."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str] | None = None) -> None:
        self.client = httpx.Client(
            base_url=base_url, timeout=httpx.Timeout(10.0, read=None), trust_env=False
        )
        self.path = path
        self.request_headers = headers or {}
        self.blocks: queue.Queue[Block | None] = queue.Queue()
        self.started = threading.Event()
        self.status = 0
        self.headers: httpx.Headers = httpx.Headers()
        self.body = b""  # the body of a response that is not a stream (an error)
        self.error: Exception | None = None
        self.closing = False
        self.socket: socket.socket | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        if not self.started.wait(DEADLINE):
            raise AssertionError(f"no response to GET {path} within {DEADLINE} s")

    def _read(self) -> None:
        try:
            with self.client.stream("GET", self.path, headers=self.request_headers) as response:
                self.status, self.headers = response.status_code, response.headers
                self.socket = response.extensions["network_stream"].get_extra_info("socket")
                if response.status_code != 200:
                    self.body = response.read()
                    self.started.set()
                    return
                self.started.set()
                block = Block()
                for line in response.iter_lines():
                    if self.closing:
                        break
                    if line == "":
                        if block.fields or block.comments:
                            self.blocks.put(block)
                        block = Block()
                    elif line.startswith(":"):
                        block.comments.append(line[1:].strip())
                    else:
                        name, _, value = line.partition(":")
                        value = value.removeprefix(" ")
                        previous = block.fields.get(name)
                        block.fields[name] = value if previous is None else f"{previous}\n{value}"
        except (httpx.HTTPError, OSError, RuntimeError) as exc:  # closed by close(), or cut
            self.error = exc
        finally:
            self.started.set()
            self.blocks.put(None)  # the end of the stream

    def next_block(self, until: float | None = None) -> Block | None:
        """The next block, or None when the stream has ended; fails at `until` (a monotonic
        time; default: DEADLINE from now)."""
        until = time.monotonic() + DEADLINE if until is None else until
        try:
            return self.blocks.get(timeout=max(0.0, until - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"not on the stream within {DEADLINE} s") from None

    def next_event(self) -> Block:
        """The next event, passing heartbeats and a lone retry hint."""
        until = time.monotonic() + DEADLINE
        while True:
            block = self.next_block(until)
            assert block is not None, "the stream ended"
            if block.is_event:
                return block

    def next_heartbeat(self) -> list[Block]:
        """The blocks up to and with the next heartbeat (to see what came before it)."""
        until, seen = time.monotonic() + DEADLINE, []
        while True:
            block = self.next_block(until)
            assert block is not None, "the stream ended"
            seen.append(block)
            if "heartbeat" in block.comments:
                return seen

    def ended(self) -> list[Block]:
        """Every block until the stream ends (fails if it does not end in time)."""
        until, seen = time.monotonic() + DEADLINE, []
        while (block := self.next_block(until)) is not None:
            seen.append(block)
        return seen

    def close(self) -> None:
        """Stop reading and close the connection (shut down under the reading thread's feet)."""
        self.closing = True
        if self.socket is not None:
            with contextlib.suppress(OSError):
                self.socket.shutdown(socket.SHUT_RDWR)
        self.client.close()
        self.thread.join(DEADLINE)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
