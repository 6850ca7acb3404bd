"""Following an experiment's global set over HTTP alone: Server-Sent Events, with ETag polling as
the fallback. No Redis: this is how a device learns of eliminations, resets, identification and
ties (agent/device.py: one follower per device), and how the agent host does (agent/following.py:
one follower per experiment and process, whatever the number of agents it hosts).

The stream. `GET /v1/experiments/{id}/events` (text/event-stream) sends the current state first,
then one `state` event per change of the public state (version, epoch, status, remaining arms,
candidates, best arm), each with an `id`; `: heartbeat` comments keep proxies from cutting it
while nothing changes, and `event: deleted` ends it when the experiment is deleted (the
follower reads the experiment then: a 404 ends the following; a document, another experiment
under the same id, is kept for the agent to see its new `created_at`). SSEParser
reads that format (WHATWG HTML, "Server-sent events") line by line.

Reconnection. A stream that ends (a coordinator restarted, a proxy's timeout) is opened again
after the server's `retry:` hint (2 s unless it says otherwise), with `Last-Event-ID`: the server
sends what was missed, or the current state, or nothing if the client is up to date. A stream
silent for longer than `stream_timeout` (three heartbeats by default) is taken as cut and opened
again. Failures in a row (no connection, a 5xx, a silent stream) wait longer each time (doubled,
up to `retry_max_seconds`, each wait drawn in [0.5, 1.5) of it so that a million devices cut at
once do not come back at once), and move to the next coordinator URL.

The fallback. While no stream is open (a failure, a refusal at the coordinator's subscriber
bounds, 429 or 503 with Retry-After, or a coordinator without the route), the follower polls
`GET /v1/experiments/{id}` every `poll_seconds` with `If-None-Match`: an unchanged state costs a
304 with no body, which the coordinator answers without reading the document. It polls once at
the start of each wait (a change may have been missed while the stream was down), and goes back
to the stream when the wait is over (a coordinator without the route: every NO_STREAM_SECONDS).

What it does with what it learns: nothing but keep it. The follower runs in a thread of its own
and never touches an agent; it keeps the newest change (a state, or the deletion) and the agent's
own thread takes it (`take`) and applies it to its GlobalView (GlobalView.follow), between two
of its own requests, so an agent's requests stay sequential. Changes that come faster than they
are taken are coalesced: the newest wins.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from agent.library import next_seq
from clients.coordinator import CoordinatorClient, CoordinatorError, coordinator_urls

log = logging.getLogger("dexp.agent.events")

RETRY_MS = 2_000  # the reconnection delay until the server says otherwise (`retry:`)
STREAM_TIMEOUT_SECONDS = 45.0  # three of the coordinator's default heartbeat periods (15 s)
NO_STREAM_SECONDS = 300.0  # a coordinator without the event stream: poll, and try again this late


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched event: its type (`message` when the server named none), its data (the data
    lines joined by newlines), and the last event id after it (the stream's, kept across events)."""

    type: str
    data: str
    id: str


class SSEParser:
    """The event-stream format, one line (without its line ending) at a time: `field: value`
    lines (one space after the colon dropped), comments (a leading colon) ignored, a blank line
    dispatches the event. `retry` holds the last reconnection delay the server asked for (ms)."""

    def __init__(self, last_id: str = "") -> None:
        self.last_id = last_id
        self.retry: int | None = None
        self._type = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SSEEvent | None:
        if not line:
            data, kind = self._data, self._type or "message"
            self._data, self._type = [], ""
            return SSEEvent(kind, "\n".join(data), self.last_id) if data else None
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self.last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        return None


@dataclass(frozen=True)
class Change:
    """What the follower learnt: the experiment's state (an event's data, or the document a poll
    read) or its deletion (`state` None). `seq` orders it with the agents' own reads
    (agent.library.next_seq): taken when an event arrived, or before a poll was sent."""

    state: dict[str, Any] | None
    seq: int
    via: str  # "stream" or "poll"

    @property
    def deleted(self) -> bool:
        return self.state is None


class _Deleted(Exception):
    """The experiment is gone: nothing more to follow."""


class _NoStream(Exception):
    """This coordinator does not serve the event stream (an older one, or a proxy in the way)."""


class _Refused(Exception):
    """A stream refused at a bound (429, 503): come back after `retry_after` seconds."""

    def __init__(self, status: int, retry_after: float) -> None:
        super().__init__(f"{status}, Retry-After {retry_after:g}s")
        self.retry_after = retry_after


class _Failed(Exception):
    """A stream that failed on this coordinator (a 5xx, a malformed event): the next URL."""


class GlobalSetFollower:
    """Follows one experiment's global set in a thread: SSE, ETag polls as the fallback (see the
    module docstring). `coordinator`: one URL or several, comma-separated, as CoordinatorClient
    takes them. `on_change` is called in the follower's thread after each change is kept (keep it
    short: e.g. wake the thread that takes it)."""

    def __init__(
        self,
        coordinator: str,
        experiment: str,
        *,
        poll_seconds: float = 30.0,
        stream_timeout: float = STREAM_TIMEOUT_SECONDS,
        retry_max_seconds: float = 60.0,
        on_change: Callable[[Change], None] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.experiment = experiment
        self.urls = coordinator_urls(coordinator)
        self.poll_seconds = poll_seconds
        self.stream_timeout = stream_timeout
        self.retry_max_seconds = retry_max_seconds
        self.on_change = on_change
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._lock = threading.Lock()
        self._latest: Change | None = None
        self._response: httpx.Response | None = None
        # The polls: the shared client (failover, back-off, 429s), given up after a while so
        # that the stream is tried again.
        self.client = CoordinatorClient(
            coordinator,
            timeout=timeout,
            give_up_after=max(poll_seconds, 5.0),
            should_stop=self._stop.is_set,
        )
        self._index = self.client.home  # the stream's coordinator: the polls' home at first
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, read=stream_timeout))
        self._thread = threading.Thread(
            target=self._run, name=f"dexp-follow-{experiment}", daemon=True
        )
        self.retry_ms = RETRY_MS
        self.last_event_id = ""
        self.etag: str | None = None
        self.mode = "starting"  # "stream" while one is open, "poll" while polling, "stopped"
        self.streams = 0  # streams opened
        self.events = 0  # state events received
        self.polls = 0  # polls sent
        self.not_modified = 0  # of which answered 304
        self.refused = 0  # streams refused at a bound (429, 503)
        self.failures = 0  # streams that failed (no connection, 5xx, silence)

    # -- the agent's side ---------------------------------------------------------------------
    def start(self) -> GlobalSetFollower:
        self._thread.start()
        return self

    def take(self) -> Change | None:
        """The newest change not taken yet (None: nothing new)."""
        with self._lock:
            change, self._latest = self._latest, None
            self._changed.clear()
            return change

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a change is kept (True) or `timeout` seconds pass (False)."""
        return self._changed.wait(timeout)

    @property
    def stopped(self) -> bool:
        return not self._thread.is_alive()

    def close(self) -> None:
        """Stop: the open stream is cut at once (its socket shut down), the thread ends."""
        self._stop.set()
        response = self._response
        if response is not None:
            _shut_down(response)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._http.close()
        self.client.close()

    # -- the thread ---------------------------------------------------------------------------
    def _keep(self, change: Change) -> None:
        with self._lock:
            self._latest = change
            self._changed.set()
        if self.on_change is not None:
            try:
                self.on_change(change)
            except Exception:  # the application's code must not end the follower
                log.exception("on_change failed")

    def _run(self) -> None:
        failures = 0
        try:
            while not self._stop.is_set():
                try:
                    received = self._stream()
                except _Refused as exc:
                    self.refused += 1
                    self._next_url()
                    self._fallback(exc.retry_after, f"stream refused ({exc})")
                    continue
                except _NoStream as exc:
                    self._fallback(NO_STREAM_SECONDS, f"no event stream here ({exc})")
                    continue
                except (httpx.HTTPError, _Failed, ValueError) as exc:
                    if self._stop.is_set():
                        break
                    failures += 1
                    self.failures += 1
                    if not isinstance(exc, httpx.ReadTimeout):  # a silent stream: same URL
                        self._next_url()
                    self._fallback(self._backoff(failures), f"stream failed ({_what(exc)})")
                    continue
                # The server ended the stream (a restart, a proxy's limit): come back after its
                # retry hint, with Last-Event-ID.
                failures = 0 if received else failures + 1
                self._stop.wait(self._backoff(max(failures, 1)))
        except _Deleted:
            self._keep(Change(None, next_seq(), "stream"))
        except Exception:  # a bug: say it, and leave the agents to their own reads
            log.exception("following %s stopped", self.experiment)
        finally:
            self.mode = "stopped"

    def _backoff(self, failures: int) -> float:
        """The wait before the next stream: the server's retry hint, doubled per failure in a
        row up to retry_max_seconds, times a random factor in [0.5, 1.5)."""
        base = self.retry_ms / 1000 * 2 ** min(failures - 1, 16)
        return min(base, self.retry_max_seconds) * (0.5 + random.random())

    def _next_url(self) -> None:
        self._index = (self._index + 1) % len(self.urls)

    def _stream(self) -> int:
        """One stream, read until it ends; the number of state events it brought."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id
        url = f"{self.urls[self._index]}/v1/experiments/{self.experiment}/events"
        received = 0
        with self._http.stream("GET", url, headers=headers) as response:
            self._response = response
            try:
                kind = response.headers.get("content-type", "")
                if response.status_code != 200 or not kind.startswith("text/event-stream"):
                    self._refusal(response)
                self.mode, self.streams = "stream", self.streams + 1
                parser = SSEParser(self.last_event_id)
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if parser.retry is not None:
                        self.retry_ms = parser.retry
                    if event is None:
                        continue
                    if event.type == "deleted":
                        self._confirm_deletion()
                        return received
                    if event.type != "state":
                        continue
                    state = json.loads(event.data)
                    if not isinstance(state, dict) or "remaining_arms" not in state:
                        raise _Failed(f"not a state: {event.data[:200]!r}")
                    self.last_event_id = event.id
                    self.events += 1
                    received += 1
                    self._keep(Change(state, next_seq(), "stream"))
            finally:
                self._response = None
        return received

    def _confirm_deletion(self) -> None:
        """`event: deleted`: the experiment is gone (_Deleted) if a read says 404. Else the read's
        document is kept, and the stream opened again: it is another experiment under the same id
        (its `created_at` tells the agent so: GlobalView.follow), or the server's stream outlived
        the experiment it was opened for (a Redis flushed under a coordinator, which then ends
        the old stream of a new subscriber with `deleted`)."""
        seq = next_seq()
        try:
            document = self.client.experiment(self.experiment)
        except CoordinatorError as exc:
            if exc.status == 404:
                raise _Deleted from None
            raise _Failed(f"after `deleted`: {exc}") from None
        except ConnectionError as exc:
            raise _Failed(f"after `deleted`: {exc}") from None
        self.etag = None
        self._keep(Change(document, seq, "poll"))

    def _refusal(self, response: httpx.Response) -> None:
        """Raise what a response that is not a stream means."""
        response.read()
        status = response.status_code
        if status in (429, 503):
            raise _Refused(status, _retry_after(response))
        if status == 404:
            self._poll()  # the experiment deleted (_Deleted), or a coordinator without the route
            raise _NoStream("404")
        if status >= 500:
            raise _Failed(f"{status}: {response.text[:200]}")
        raise _NoStream(f"{status} {response.headers.get('content-type', '')}".strip())

    def _fallback(self, seconds: float, why: str) -> None:
        """Poll now, then every poll_seconds, until `seconds` have passed."""
        self.mode = "poll"
        log.info(
            "following %s: %s; polling every %gs for %.1fs",
            self.experiment,
            why,
            self.poll_seconds,
            seconds,
        )
        end = time.monotonic() + seconds
        while not self._stop.is_set():
            self._poll()
            left = end - time.monotonic()
            # spread: followers that fell back together (a coordinator restarted) poll apart
            if left <= 0 or self._stop.wait(min(self.poll_seconds * (0.5 + random.random()), left)):
                return

    def _poll(self) -> None:
        """One conditional GET of the experiment: a change kept, a 304 counted, a 404 ends the
        following (_Deleted); an unreachable coordinator is left for the next poll."""
        seq = next_seq()
        try:
            document, etag = self.client.experiment_if_changed(self.experiment, self.etag)
        except CoordinatorError as exc:
            if exc.status == 404:
                raise _Deleted from None
            log.warning("following %s: poll refused (%s)", self.experiment, exc)
            return
        except ConnectionError as exc:  # given up for now (give_up_after), or stopping
            log.info("following %s: poll failed (%s)", self.experiment, exc)
            return
        self.polls += 1
        if document is None:
            self.not_modified += 1
            return
        self.etag = etag
        self._keep(Change(document, seq, "poll"))


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(1.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return RETRY_MS / 1000


def _what(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _shut_down(response: httpx.Response) -> None:
    """Wake the thread blocked reading `response`: closing a socket does not interrupt a
    blocked read on Linux, shutting it down does."""
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
