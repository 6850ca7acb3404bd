"""A recording reverse proxy: real HTTP in and out, so a test can see what agents send."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Recorded:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]
    lost: bool = False  # the coordinator took it, its reply was lost (RecordingProxy.lose)


@dataclass
class RecordingProxy:
    upstream: str = ""
    requests: list[Recorded] = field(default_factory=list)
    # (method, path) of requests whose reply is to be lost, each entry once: the request reaches
    # the coordinator, which takes it, and the client gets a 502, as from a gateway whose
    # upstream connection dropped, and sends it again
    lose: list[tuple[str, str]] = field(default_factory=list)
    url: str = ""
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    def start(self, upstream: str) -> str:
        self.upstream = upstream
        client = httpx.AsyncClient(base_url=upstream, timeout=30)

        async def forward(request: Request) -> Response:
            body = await request.body()
            recorded = Recorded(request.method, request.url.path, body, dict(request.headers))
            self.requests.append(recorded)
            headers = {
                k: v
                for k, v in request.headers.items()
                if k.lower() in ("authorization", "content-type")
            }
            reply = await client.request(
                request.method,
                request.url.path,
                params=request.query_params,
                content=body,
                headers=headers,
            )
            if (request.method, request.url.path) in self.lose:
                self.lose.remove((request.method, request.url.path))
                recorded.lost = True
                return Response(b"the coordinator's reply was lost", 502)
            return Response(
                reply.content, reply.status_code, media_type=reply.headers.get("content-type")
            )

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            yield
            await client.aclose()

        app = Starlette(
            routes=[Route("/{path:path}", forward, methods=["GET", "POST", "DELETE"])],
            lifespan=lifespan,
        )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
