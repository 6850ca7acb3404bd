"""Failed credential checks, throttled per client address.

A wrong admin token, enrollment secret, ticket or agent token is answered 401. Unthrottled, one
client tried 7,915 admin tokens in 3 s (the hardened-edge audit). This middleware counts each 401
against the client's address in a moving window (the `limits` library, in process memory,
DEXP_AUTH_FAILURE_LIMIT, e.g. "20/minute"); while an address is over it, every request of it that
carries a credential (an Authorization header) gets 429 with Retry-After before anything checks
the credential, so guessing costs the coordinator almost nothing. Requests without credentials
(public reads, the dashboard, probes) are never throttled here.

What it costs: devices behind one address (a NAT) share its window, so a client that keeps failing
there delays the others' authenticated requests until the window moves (at most its length). The
window is per coordinator process: N replicas give a guesser N times the rate, still far from
what guessing a 128-bit secret needs.
"""

from __future__ import annotations

import math
import time

from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from prometheus_client import Counter

from coordinator.addresses import client_group
from coordinator.asgi import ASGIApp, Exchange, Message, Step, header, send_problem

THROTTLED = Counter(
    "dexp_auth_throttled_total", "Requests refused because their client failed too many checks"
)


def failure_limit(value: str) -> RateLimitItem:
    """DEXP_AUTH_FAILURE_LIMIT parsed ("20/minute", "5 per 10 seconds"); ValueError if not."""
    return parse(value)


class CredentialThrottle(Step):
    def __init__(self, app: ASGIApp, limit: str) -> None:
        super().__init__(app)
        self.item = failure_limit(limit)
        self.limiter = MovingWindowRateLimiter(MemoryStorage())

    async def run(self, ex: Exchange) -> bool:
        scope = ex.scope
        if header(scope, b"authorization") is None:
            return False
        client = client_group(scope["client"][0]) if scope.get("client") else ""
        if not self.limiter.test(self.item, client):
            THROTTLED.inc()
            reset = self.limiter.get_window_stats(self.item, client).reset_time
            wait = max(1, math.ceil(reset - time.time()))
            await send_problem(
                ex.send,
                429,
                f"too many failed credential checks from this address ({self.item}): "
                f"retry in {wait} s",
                {"Retry-After": str(wait)},
            )
            return True
        send = ex.send

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self.limiter.hit(self.item, client)
            await send(message)

        ex.send = counting
        return False
