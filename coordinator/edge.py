"""The coordinator's edge: every HTTP request crosses these steps, in this order, in one middleware.

Each step looks at the request and either answers it (the steps after it and the app never see it)
or lets it go on, having maybe wrapped the answer's way out (`send`) or replayed the body it read
(`receive`). The request metrics wrap all of it: every answer is counted, whichever step gave it.

| # | step | module | answers itself | credential |
|---|---|---|---|---|
| 1 | request metrics | metrics.RequestMetrics | nothing: counts and times every answer | - |
| 2 | CORS (only with DEXP_CORS_ORIGINS) | cors.CORS | a preflight on a device's route; adds its headers to every other answer there | before the check |
| 3 | credential throttle | throttle.CredentialThrottle | 429 to an address over DEXP_AUTH_FAILURE_LIMIT failed checks (requests with Authorization only); counts the 401s below | before the check |
| 4 | conditional reads | caching.ConditionalReads | 304 for a public document whose tag is current, from its revision alone | none needed (public) |
| 5 | credential gate | gate.CredentialGate | 401, 403 or 404 for a route that needs a credential, from the headers alone, before a byte of the body is read (a vote or an LDP report: its token's presence and form; the fast path checks the token itself) | the check |
| 6 | body limit | edges.BodyLimit | 413 over DEXP_MAX_BODY_BYTES, 408 after DEXP_BODY_TIMEOUT_SECONDS; the body is read whole here, before anything parses it | after the check |
| 7 | message fast path | fast_path.FastPath | a plain, valid vote or LDP report, its token checked in the same Lua call that applies it | its own (lua/vote.lua, lua/ldp_report.lua) |
| 8 | gzip (only with DEXP_GZIP_MIN_BYTES > 0) | compression.GZip | nothing: compresses the answers below, the tag suffixed | - |
| 9 | rendered documents | documents.RenderedDocuments | a full read of a public document, with the bytes the route rendered for its ETag | none needed (public) |
| 10 | the app | FastAPI's routes | everything else: each route checks its credential again and reads its body | after the check |

Why this order. The metrics are outermost, so that a refusal counts whoever gave it. CORS comes
before any refusal, so that a browser can read every answer of a device's route, errors included.
The throttle comes before anything that checks a credential, so that a guesser's requests cost
almost nothing. Conditional reads come before the body limit: they read no body. The credential
gate comes before the body limit: a request that needs a credential is refused before a byte of
its body is read, so an anonymous client that trickles a body gets its 401 at once, not a 408
after DEXP_BODY_TIMEOUT_SECONDS (the hardened edge, round two). The body is counted and timed
before the fast path or a route reads it. gzip comes after the fast path (a vote's answer is
small) and before the documents and the routes, whose larger answers it compresses. Starlette's own error and exception handling wrap the edge and the routes as before
(coordinator/app.py's exception handlers answer the routes' errors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.routing import BaseRoute

from coordinator.asgi import ASGIApp, Exchange, Receive, Scope, Send, Step
from coordinator.caching import ConditionalReads
from coordinator.compression import GZip
from coordinator.cors import CORS, parse_origins
from coordinator.documents import RenderedDocuments
from coordinator.edges import BodyLimit
from coordinator.fast_path import FastPath
from coordinator.gate import CredentialGate
from coordinator.metrics import RequestMetrics
from coordinator.settings import Settings
from coordinator.throttle import CredentialThrottle


def steps(app: ASGIApp, settings: Settings) -> list[Step]:
    """Steps 2 to 9 of the table, in its order, as `settings` configure them."""
    origins = parse_origins(settings.cors_origins)
    return [
        *([CORS(app, origins=origins)] if origins else []),
        CredentialThrottle(app, limit=settings.auth_failure_limit),
        ConditionalReads(app, max_age=settings.cache_max_age_seconds),
        CredentialGate(app),
        BodyLimit(app, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout_seconds),
        FastPath(app),
        *([GZip(app, min_bytes=settings.gzip_min_bytes)] if settings.gzip_min_bytes else []),
        RenderedDocuments(app),
    ]


class Edge:
    """The table's steps, one after the other, then the app; the metrics around them all."""

    def __init__(
        self, app: ASGIApp, settings: Settings, routes: Callable[[], Sequence[BaseRoute]]
    ) -> None:
        self.app = app
        self.metrics = RequestMetrics(app, routes)
        self.steps = steps(app, settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan; no route takes a websocket
            return await self.app(scope, receive, send)
        ex = Exchange(scope, receive, send)
        counted = self.metrics.observe(ex)
        try:
            for step in self.steps:
                if await step.run(ex):
                    return
            await self.app(scope, ex.receive, ex.send)
        finally:
            counted()
