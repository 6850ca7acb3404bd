"""CORS for the configured origins (DEXP_CORS_ORIGINS), on the routes a browser device calls.

An agent that runs in a web page on another origin calls the coordinator from JavaScript: the
browser lets it read an answer only if the answer says its origin may, and asks first (a preflight
OPTIONS) for a request with an Authorization or JSON Content-Type header. Starlette's
CORSMiddleware answers, for the origins named in DEXP_CORS_ORIGINS ("*": any), and only on the
device's routes: the public GET routes, the event stream, enrollment, votes, CDE's and LDP's reports,
settled messages, resets, GET /v1/agents/me and the JavaScript SDK (GET /sdk/agent.js and
/sdk/agent-<version>.js: a page imports it as an ES module, which a browser fetches in CORS mode),
each with the methods a device uses on it. The admin routes, the dashboard (whose CSP stays
`default-src 'self'`), the probes and the metrics never answer CORS.
With DEXP_CORS_ORIGINS empty (the default) this middleware is not installed.

A preflight from another origin, or for a method the route does not offer a device, goes on to
the app (405 in JSON: no route answers OPTIONS), so it carries no CORS header. Every answer on a
CORS route, errors included, names the allowed origin and exposes ETag, Retry-After and
X-Dexp-Sdk-Version, so that a device can read a 429's wait, poll with its tag and see which SDK the
coordinator serves. No credentials mode: tokens travel in Authorization, not cookies.
"""

from __future__ import annotations

import functools
import re

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware

from coordinator.asgi import ASGIApp, Exchange, Step, header

EXPERIMENT = r"/v1/experiments/[A-Za-z0-9_-]{1,64}"
# (path pattern, the methods a device uses on it)
ROUTES: list[tuple[re.Pattern[str], tuple[str, ...]]] = [
    (re.compile(r"/v1/experiments"), ("GET",)),
    (re.compile(EXPERIMENT), ("GET",)),
    (re.compile(EXPERIMENT + r"/(best-arm|events|waiting)"), ("GET",)),
    (re.compile(EXPERIMENT + r"/(votes|settled|reset|reports?)"), ("POST",)),
    (re.compile(r"/v1/agents"), ("POST",)),
    (re.compile(r"/v1/agents/me"), ("GET",)),
    (re.compile(r"/sdk/agent(-[^/]+)?\.js"), ("GET",)),  # the SDK, imported as a module
]
ALLOW_HEADERS = ("Authorization", "Content-Type", "If-None-Match", "Last-Event-ID")
EXPOSE_HEADERS = ("ETag", "Retry-After", "X-Dexp-Sdk-Version")
MAX_AGE = 600  # seconds a browser may keep a preflight's answer


def parse_origins(value: str) -> frozenset[str]:
    """The origins of DEXP_CORS_ORIGINS, checked: scheme://host[:port], no path, or "*"."""
    origins = set()
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        if item != "*" and not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+", item):
            raise ValueError(
                f"DEXP_CORS_ORIGINS: {item!r} is not an origin (scheme://host[:port], e.g. "
                "https://app.example.com, no path), nor *"
            )
        origins.add(item.rstrip("/"))
    return frozenset(origins)


def methods_of(path: str) -> tuple[str, ...] | None:
    for pattern, methods in ROUTES:
        if pattern.fullmatch(path):
            return methods
    return None


class CORS(Step):
    """Starlette's CORSMiddleware on the device's routes, with each route's methods: its preflight
    answer, or its headers added to the answer on its way out."""

    def __init__(self, app: ASGIApp, origins: frozenset[str]) -> None:
        super().__init__(app)
        self.origins = origins
        self.any = "*" in origins
        self.answering = {
            methods: CORSMiddleware(
                app,
                allow_origins=sorted(origins),
                allow_methods=methods,
                allow_headers=ALLOW_HEADERS,
                expose_headers=EXPOSE_HEADERS,
                max_age=MAX_AGE,
            )
            for methods in {methods for _, methods in ROUTES}
        }

    async def run(self, ex: Exchange) -> bool:
        scope = ex.scope
        methods = methods_of(scope["path"])
        if methods is None:
            return False
        requested = header(scope, b"access-control-request-method")
        if scope["method"] == "OPTIONS" and requested is not None:
            origin = (header(scope, b"origin") or b"").decode("latin-1")
            if not (self.any or origin in self.origins) or requested.decode() not in methods:
                return False  # 405, no CORS header
        cors = self.answering[methods]
        headers = Headers(scope=scope)  # CORSMiddleware.__call__'s own steps, from here
        if (
            headers.get("origin") is not None
            and scope["method"] == "OPTIONS"
            and "access-control-request-method" in headers
        ):
            await cors.preflight_response(request_headers=headers)(scope, ex.receive, ex.send)
            return True
        ex.send = functools.partial(cors.send, send=ex.send, request_headers=headers)
        return False
