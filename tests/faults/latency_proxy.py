"""A TCP proxy in front of the coordinator that injects network faults (tc netem does not work
here): a fixed latency on every request, an outage (connections reset, new ones refused), or a
hold (requests accepted and kept, none forwarded, until released).

It forwards bytes, so what passes is the agents' real HTTP/1.1 traffic, keep-alive included. The
latency is applied to the client-to-server direction, chunk by chunk, each chunk released `latency`
seconds after it arrived (order kept, delays not added up): every request reaches the coordinator
`latency` seconds late, i.e. each request/response round trip takes `latency` longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class FaultProxy:
    latency: float = 0.0
    url: str = ""
    connections: int = 0  # accepted so far
    chunks_delayed: int = 0
    _upstream: tuple[str, int] = ("127.0.0.1", 0)
    _port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.AbstractServer | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)
    _released: asyncio.Event | None = None  # set while requests flow; cleared by hold()

    def start(self, upstream: str) -> str:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self._port = int(sock.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        self._released = asyncio.Event()
        self._released.set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._call(self._listen())
        self.url = f"http://127.0.0.1:{self._port}"
        return self.url

    def cut(self) -> None:
        """An outage: close the listening socket and reset every open connection."""
        self._call(self._cut())

    def restore(self) -> None:
        """End the outage: listen again on the same port."""
        self._call(self._listen())

    def hold(self) -> None:
        """Keep every request from here on (bytes from the clients) until `release`: the clients'
        calls hang as if the coordinator were slow, with nothing lost or reordered."""
        self._call(self._set_released(False))

    def release(self) -> None:
        """Forward what was held, in order, and everything after it."""
        self._call(self._set_released(True))

    def stop(self) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._loop.close()
        self._loop = None

    # -- inside the proxy's event loop --------------------------------------------------------
    def _call(self, coroutine: object) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        deadline = time.monotonic() + 5
        while True:
            try:
                self._server = await asyncio.start_server(
                    self._serve, "127.0.0.1", self._port, reuse_address=True
                )
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def _set_released(self, flowing: bool) -> None:
        assert self._released is not None
        if flowing:
            self._released.set()
        else:
            self._released.clear()

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        try:
            upstream_reader, upstream = await asyncio.open_connection(*self._upstream)
        except OSError:
            client.transport.abort()  # the coordinator itself is down: the client sees a reset
            return
        self._writers.update((client, upstream))
        try:
            await asyncio.gather(
                self._pipe(client_reader, upstream, self.latency, held=True),
                self._pipe(upstream_reader, client, 0.0, held=False),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client, upstream):
                self._writers.discard(writer)
                writer.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        latency: float,
        held: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def release() -> None:
            while True:
                due, data = await queue.get()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if held and self._released is not None:
                    await self._released.wait()
                if not data:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        releaser = asyncio.create_task(release())
        try:
            while True:
                data = await reader.read(65536)
                if latency > 0 and data:
                    self.chunks_delayed += 1
                await queue.put((loop.time() + latency, data))
                if not data:
                    break
            await releaser
        finally:
            releaser.cancel()
