"""The client of the coordinator's HTTP API, for all who call it: the agents (agent/), the load
generator and the CLI (dexp/). Keep-alive, retries with capped back-off, failover.

A retried vote is harmless: the coordinator ignores a second vote by the same agent on the same arm,
and a CDE report after the first of an agent.
Client errors (4xx) are not retried: they mean the request itself is wrong, or a limit that waiting
does not lift (403: the experiment's or this address's maximum of agents); the caller decides (the
agent service: agent/enrollment.py, agent/discovery.py). Except 429 (too many requests: a rate
limit), retried no sooner than the coordinator's Retry-After (and with the same capped back-off as
a failure, whichever is longer).
A 429 wait is logged as one warning line at most every RATE_LIMIT_LOG_SECONDS, saying how many
waits there were since the last one (a process enrolling hundreds of agents against the open
enrollment rate would otherwise log one line per agent). An agent's DSER4 reset is the one request
a 429 ends (reset() returns None): the reset is optional, and waiting would stall the agent.

Several coordinators. The first argument may list several coordinator URLs, comma-separated
(DEXP_COORDINATOR_URL=http://c1:8000,http://c2:8000): coordinators keep no state (it is all in
Redis), so any of them serves any request. Each client picks one of them at random as its home
(`start` chooses it), so that many processes spread over them, and keeps its keep-alive
connections there (one connection pool per URL). A connection error, a timeout, or a 502, 503 or
504 from a URL puts that URL in a cool-off (COOL_OFF_SECONDS, doubled after each further failure in
a row up to COOL_OFF_MAX_SECONDS, reset by a success) and sends the same request again at once to
the next URL in the list that is not cooling off: a failover, counted in `failovers` (and in
`retries`). The client goes back to its home at its first request after the home's cool-off ends,
so the spread comes back once a coordinator is back; a home still down costs one refused
connection per cool-off. When every URL is cooling off, the request waits the capped back-off, as
with one URL, and tries the URL whose cool-off ends first. Everything else is as with one URL: a
429 waits on the same URL (the rate limits live in Redis, shared by every coordinator), a 4xx is
raised, a 500 is retried after the back-off on the same URL, `give_up_after` counts from the
request's first try whatever the URLs tried. A request failed over is harmless for the same reason
a retried one is: a vote is counted once per agent, arm and epoch whichever coordinator receives it
(a ticket whose reply was lost is used up, as with one URL). Failovers are logged as one warning
line per URL at most every FAILOVER_LOG_SECONDS, saying how many there were since the last line.
With several URLs the connect timeout is at most CONNECT_TIMEOUT_SECONDS, so that a host that does
not answer at all is left quickly.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable
from typing import Any

import httpx

# The name its log lines always had (operators filter on it), whoever uses the client.
log = logging.getLogger("dexp.agent.client")
RATE_LIMIT_LOG_SECONDS = 10.0  # at most one warning line per this long about 429 waits
FAILOVER_STATUSES = frozenset({502, 503, 504})  # a proxy's or a coordinator's "not now": next URL
COOL_OFF_SECONDS = 5.0  # a URL that failed is avoided this long (doubled per failure in a row)
COOL_OFF_MAX_SECONDS = 60.0
FAILOVER_LOG_SECONDS = 5.0  # at most one warning line per URL per this long about failovers
CONNECT_TIMEOUT_SECONDS = 3.0  # with several URLs: the most a connection attempt may take
# An http:// or https:// URL: a host (name, IPv4 or [IPv6]), an optional port, an optional path.
_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+)(?::(\d{1,5}))?(/[^\s,]*)?")


def coordinator_urls(value: str) -> list[str]:
    """The coordinator URLs of a DEXP_COORDINATOR_URL: one, or several separated by commas, each
    http:// or https://, in order, each once (a trailing slash dropped). ValueError naming the bad
    entry otherwise."""
    urls: list[str] = []
    for part in value.split(","):
        url = part.strip()
        match = _URL.fullmatch(url)
        what = ""
        if not url:
            what = "an empty URL (two commas in a row, or one at an end)"
        elif match is None:
            what = f"{url!r} is not an http:// or https:// URL"
        elif int(match.group(2) or 1) not in range(1, 65536):
            what = f"{url!r}: the port is not between 1 and 65535"
        if what:
            raise ValueError(what + (f", in {value!r}" if "," in value else ""))
        urls.append(url.rstrip("/"))
    return list(dict.fromkeys(urls))


class CoordinatorError(RuntimeError):
    """The coordinator refused a request (4xx): retrying would not help."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class RateLimited(CoordinatorError):
    """A 429 on a request that must not wait for its Retry-After (see CoordinatorClient.reset)."""

    def __init__(self, detail: str, retry_after: float) -> None:
        super().__init__(429, detail)
        self.retry_after = retry_after


class CoordinatorClient:
    """`base_url`: one coordinator URL or several, comma-separated (see the module docstring);
    `start`: the index of the home URL (None: one at random)."""

    def __init__(
        self,
        base_url: str,
        timeout: float = 10.0,
        retry_max_seconds: float = 5.0,
        give_up_after: float | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        *,
        start: int | None = None,
        cool_off_seconds: float = COOL_OFF_SECONDS,
    ) -> None:
        self.urls = coordinator_urls(base_url)
        several = len(self.urls) > 1
        timeouts = httpx.Timeout(
            timeout, connect=min(timeout, CONNECT_TIMEOUT_SECONDS) if several else timeout
        )
        self._clients = [
            httpx.Client(
                base_url=url,
                timeout=timeouts,
                limits=httpx.Limits(max_keepalive_connections=4, max_connections=8),
            )
            for url in self.urls
        ]
        self.home = random.randrange(len(self.urls)) if start is None else start % len(self.urls)
        self.current = self.home  # the URL of the last request
        self.cool_off_seconds = cool_off_seconds
        self._avoid_until = [0.0] * len(self.urls)  # monotonic time each URL's cool-off ends
        self._failures = [0] * len(self.urls)  # failures in a row per URL
        self._failover_logged = [-FAILOVER_LOG_SECONDS] * len(self.urls)
        self._failover_unlogged = [0] * len(self.urls)
        self.failovers = 0  # requests sent again at once to another URL
        self.retry_max_seconds = retry_max_seconds
        self.give_up_after = give_up_after
        self.should_stop = should_stop
        self.retries = 0  # requests sent again: failures, and 429 waits
        self.rate_limited = 0  # 429 waits
        self.rate_limited_seconds = 0.0  # time spent in them
        self._rate_limit_logged = -RATE_LIMIT_LOG_SECONDS
        self._rate_limit_unlogged = 0  # waits since the last line about them

    @property
    def url(self) -> str:
        """The URL the client uses now (of its last request)."""
        return self.urls[self.current]

    @property
    def http(self) -> httpx.Client:
        """The connection pool of the URL in use: relative paths go to that coordinator."""
        return self._clients[self.current]

    @http.setter
    def http(self, client: httpx.Client) -> None:
        self._clients[self.current] = client

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def cool_off_ends(self, url: str) -> float:
        """The time.monotonic() at which `url`'s cool-off ends (0.0: it never failed, or its last
        request succeeded): a caller can wait for the moment the client goes back to it."""
        return self._avoid_until[self.urls.index(url)]

    def _pick(self, now: float) -> int:
        """The home URL unless it cools off, else the next one after it that does not, else the
        one whose cool-off ends first."""
        order = [(self.home + i) % len(self.urls) for i in range(len(self.urls))]
        ready = [i for i in order if self._avoid_until[i] <= now]
        return ready[0] if ready else min(order, key=lambda i: self._avoid_until[i])

    def _failed(self, index: int, now: float) -> None:
        """URL `index` failed: a cool-off, longer after each failure in a row."""
        self._failures[index] += 1
        cool = self.cool_off_seconds * 2 ** min(self._failures[index] - 1, 16)
        self._avoid_until[index] = now + min(cool, max(COOL_OFF_MAX_SECONDS, self.cool_off_seconds))

    def _log_failover(self, method: str, path: str, index: int, to: int, problem: str) -> None:
        """One warning line per failing URL at most every FAILOVER_LOG_SECONDS."""
        self.failovers += 1
        self._failover_unlogged[index] += 1
        now = time.monotonic()
        if now - self._failover_logged[index] < FAILOVER_LOG_SECONDS:
            log.debug(
                "%s %s: %s failed (%s); sent to %s",
                method,
                path,
                self.urls[index],
                problem,
                self.urls[to],
            )
            return
        others = self._failover_unlogged[index] - 1
        log.warning(
            "coordinator %s failed (%s): %s %s sent to %s instead; %s avoided for %.1fs%s",
            self.urls[index],
            problem,
            method,
            path,
            self.urls[to],
            self.urls[index],
            max(0.0, self._avoid_until[index] - now),
            f" ({others} other failover(s) from it in the last "
            f"{now - self._failover_logged[index]:.0f}s)"
            if others and self._failover_logged[index] > 0
            else "",
        )
        self._failover_logged[index], self._failover_unlogged[index] = now, 0

    def request(
        self,
        method: str,
        path: str,
        token: str | None = None,
        wait_rate_limit: bool = True,
        **kwargs: Any,
    ) -> Any:
        """The reply's JSON; 5xx, transport errors and (if `wait_rate_limit`) 429 are retried."""
        response = self.send(method, path, token, wait_rate_limit, **kwargs)
        return response.json() if response.content else None

    def send(
        self,
        method: str,
        path: str,
        token: str | None = None,
        wait_rate_limit: bool = True,
        headers: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """The reply (a status below 400: a 304 too), retried as `request` says."""
        headers = {**(headers or {}), **({"Authorization": f"Bearer {token}"} if token else {})}
        delay, start = 0.05, time.monotonic()
        index = self._pick(start)
        while True:
            self.current = index
            failover = True  # a transport error, 502, 503 or 504: worth another URL
            try:
                response = self._clients[index].request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    self._failures[index], self._avoid_until[index] = 0, 0.0
                    return response
                detail = _detail(response)
                if response.status_code < 500 and response.status_code != 429:
                    raise CoordinatorError(response.status_code, detail)
                problem = f"{response.status_code}: {detail}"
                if response.status_code == 429:
                    if not wait_rate_limit:
                        raise RateLimited(detail, _retry_after(response))
                    if self.should_stop():
                        raise ConnectionError(f"stopped while rate-limited: {problem}")
                    # Not a failure: the coordinator asks us to come back later. Never sooner
                    # than Retry-After, and never given up (give_up_after is for outages).
                    wait = max(delay, _retry_after(response))
                    self.retries += 1
                    self._log_rate_limit(method, path, detail, wait)
                    time.sleep(wait)
                    delay = min(delay * 2, self.retry_max_seconds)
                    continue
                failover = response.status_code in FAILOVER_STATUSES  # a 500: this URL again
            if self.should_stop() or (
                self.give_up_after is not None and time.monotonic() - start > self.give_up_after
            ):
                raise ConnectionError(f"coordinator unreachable: {problem}")
            self.retries += 1
            if failover:
                now = time.monotonic()
                self._failed(index, now)
                following = self._pick(now)
                if following != index and self._avoid_until[following] <= now:
                    self._log_failover(method, path, index, following, problem)
                    index = following
                    continue  # at once: another coordinator
            log.warning("%s %s failed (%s); retrying in %.2fs", method, path, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, self.retry_max_seconds)
            if failover:  # every URL cools off: the one whose cool-off ends first
                index = self._pick(time.monotonic())

    def _log_rate_limit(self, method: str, path: str, detail: str, wait: float) -> None:
        """One warning line about 429 waits at most every RATE_LIMIT_LOG_SECONDS."""
        self.rate_limited += 1
        self.rate_limited_seconds += wait
        self._rate_limit_unlogged += 1
        now = time.monotonic()
        if now - self._rate_limit_logged < RATE_LIMIT_LOG_SECONDS:
            log.debug("%s %s rate-limited (429: %s): waiting %.2fs", method, path, detail, wait)
            return
        others = self._rate_limit_unlogged - 1
        log.warning(
            "%s %s rate-limited by the coordinator (429: %s): waiting %.2fs as Retry-After asks, "
            "then retrying%s",
            method,
            path,
            detail,
            wait,
            f" ({others} other 429 wait(s) in the last {now - self._rate_limit_logged:.0f}s)"
            if others and self._rate_limit_logged > 0
            else "",
        )
        self._rate_limit_logged, self._rate_limit_unlogged = now, 0

    def enroll(
        self, secret: str, experiment: str, simulated: bool = False, lease: bool = False
    ) -> dict[str, Any]:
        """`secret`: a one-time ticket, or the shared secret of open enrollment. A ticket whose
        reply was lost is used up: the retry gets 401 (CoordinatorError). `simulated`: the agent
        is a simulated one (the agent service's), which the experiment counts. `lease`: it stays
        enrolled only while its host renews its lease (renew_leases)."""
        body: dict[str, Any] = {"experiment": experiment}
        if simulated:
            body["simulated"] = True
        if lease:
            body["lease"] = True
        result: dict[str, Any] = self.request("POST", "/v1/agents", token=secret, json=body)
        return result

    def leave(self, token: str) -> dict[str, Any]:
        """The agent holding `token` leaves its experiment (DELETE /v1/agents/me): for good."""
        result: dict[str, Any] = self.request("DELETE", "/v1/agents/me", token=token)
        return result

    def renew_leases(self, tokens: list[str]) -> dict[str, Any]:
        """Renew the leases of the agents holding `tokens` (POST /v1/agents/leases, one request):
        {lease_seconds, outcomes: renewed | no_lease | gone, one per token}. A 429 raises
        RateLimited at once (with its Retry-After), never waited for here."""
        # a 429 is the caller's to schedule (RateLimited): its loop must not sleep on it
        result: dict[str, Any] = self.request(
            "POST", "/v1/agents/leases", wait_rate_limit=False, json={"tokens": tokens}
        )
        return result

    def experiment(self, experiment: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/experiments/{experiment}")
        return result

    def experiment_if_changed(
        self, experiment: str, etag: str | None
    ) -> tuple[dict[str, Any] | None, str | None]:
        """GET /v1/experiments/{id} with `If-None-Match: etag`: (None, etag) when it has not
        changed (304, no body: the coordinator answers it without reading the document), else
        (the document, its new ETag; None from a coordinator that sends none)."""
        response = self.send(
            "GET",
            f"/v1/experiments/{experiment}",
            headers={"If-None-Match": etag} if etag else None,
        )
        if response.status_code == 304:
            return None, etag
        return response.json(), response.headers.get("etag")

    def experiments(self, page_size: int = 25) -> list[dict[str, Any]]:
        """The summary of every experiment the coordinator lists (GET /v1/experiments, page by
        page): its id, epoch, version, creation time, status and counters. Small pages: a page
        of 100 holds the coordinator's event loop for about 8 ms, which every request arriving
        meanwhile waits out; pages of 25 cost the same in all, in stretches of about 3 ms
        (benchmarks/bench_redis_ops.py)."""
        summaries: list[dict[str, Any]] = []
        after = ""
        while True:
            page = self.request(
                "GET", "/v1/experiments", params={"limit": page_size, "after": after}
            )
            summaries += page["experiments"]
            following = page.get("next")
            if not following or following == after:
                return summaries
            after = str(following)

    def me(self, token: str) -> dict[str, Any]:
        """This agent as the coordinator knows it: epoch, version and `voted_against`, the arms
        whose voter set holds it in the current epoch."""
        result: dict[str, Any] = self.request("GET", "/v1/agents/me", token=token)
        return result

    def vote(
        self, experiment: str, token: str, arm: int, epoch: int, started: int | None = None
    ) -> dict[str, Any]:
        """One vote; `started`: when its epoch began (the coordinator refuses a vote of another
        epoch of the same number, one a failover lost, as stale_epoch)."""
        body: dict[str, int] = {"arm": arm, "epoch": epoch}
        if started is not None:
            body["epoch_started_at"] = started
        result: dict[str, Any] = self.request(
            "POST", f"/v1/experiments/{experiment}/votes", token=token, json=body
        )
        return result

    def report(self, experiment: str, token: str, arm: int) -> dict[str, Any]:
        """CDE: this agent's one report. A retry is harmless: any report after the first is a
        duplicate (nothing changes), so a reply lost on the way costs nothing."""
        result: dict[str, Any] = self.request(
            "POST", f"/v1/experiments/{experiment}/report", token=token, json={"arm": arm}
        )
        return result

    def private_report(
        self, experiment: str, token: str, arm: int, bit: int, seq: int
    ) -> dict[str, Any]:
        """LDP: report number `seq` (1..B) of this agent, the arm it played and the privatized
        bit (common.ldp.Mechanism.privatize). A retry is harmless: a number already counted is
        a duplicate (nothing changes), so a reply lost on the way costs nothing."""
        result: dict[str, Any] = self.request(
            "POST",
            f"/v1/experiments/{experiment}/reports",
            token=token,
            json={"arm": arm, "bit": bit, "seq": seq},
        )
        return result

    def settled(self, experiment: str, token: str, epoch: int) -> dict[str, Any]:
        """CE: this agent's local set holds one arm (it votes no more). The reply has
        `remaining_arms`, the global set when the message was applied."""
        result: dict[str, Any] = self.request(
            "POST",
            f"/v1/experiments/{experiment}/settled",
            token=token,
            json={"epoch": epoch},
        )
        return result

    def reset(self, experiment: str, token: str, epoch: int) -> dict[str, Any] | None:
        """An agent's DSER4 reset; None if the coordinator rate-limits resets (429): not retried,
        the agent resets its own statistics only."""
        try:
            result: dict[str, Any] = self.request(
                "POST",
                f"/v1/experiments/{experiment}/reset",
                token=token,
                wait_rate_limit=False,
                json={"epoch": epoch},
            )
        except RateLimited:
            return None
        return result


def _retry_after(response: httpx.Response) -> float:
    """The seconds a 429 asks to wait (Retry-After in seconds; 0 if absent or not a number)."""
    try:
        return max(0.0, float(response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", response.text))
    except ValueError:
        return response.text[:200]
