"""The coordinator's HTTP API as the agents use it: keep-alive, retries with capped back-off.

A retried vote is harmless: the coordinator ignores a second vote by the same agent on the same arm.
Client errors (4xx) are not retried: they mean the request itself is wrong, or a limit that waiting
does not lift (403: the experiment's or this address's maximum of agents); the caller decides
(agent/service.py). Except 429 (too many requests: a rate limit), retried no sooner than the
coordinator's Retry-After (and with the same capped back-off as a failure, whichever is longer).
A 429 wait is logged as one warning line at most every RATE_LIMIT_LOG_SECONDS, saying how many
waits there were since the last one (a process enrolling hundreds of agents against the open
enrollment rate would otherwise log one line per agent). An agent's DSER4 reset is the one request
a 429 ends (reset() returns None): the reset is optional, and waiting would stall the agent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

log = logging.getLogger("dexp.agent.client")
RATE_LIMIT_LOG_SECONDS = 10.0  # at most one warning line per this long about 429 waits


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
    def __init__(
        self,
        base_url: str,
        timeout: float = 10.0,
        retry_max_seconds: float = 5.0,
        give_up_after: float | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self.http = httpx.Client(
            base_url=base_url,
            timeout=timeout,
            limits=httpx.Limits(max_keepalive_connections=4, max_connections=8),
        )
        self.retry_max_seconds = retry_max_seconds
        self.give_up_after = give_up_after
        self.should_stop = should_stop
        self.retries = 0  # requests sent again: failures, and 429 waits
        self.rate_limited = 0  # 429 waits
        self.rate_limited_seconds = 0.0  # time spent in them
        self._rate_limit_logged = -RATE_LIMIT_LOG_SECONDS
        self._rate_limit_unlogged = 0  # waits since the last line about them

    def close(self) -> None:
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        token: str | None = None,
        wait_rate_limit: bool = True,
        **kwargs: Any,
    ) -> Any:
        """The reply's JSON; 5xx, transport errors and (if `wait_rate_limit`) 429 are retried."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        delay, start = 0.05, time.monotonic()
        while True:
            try:
                response = self.http.request(method, path, headers=headers, **kwargs)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return response.json() if response.content else None
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
            if self.should_stop() or (
                self.give_up_after is not None and time.monotonic() - start > self.give_up_after
            ):
                raise ConnectionError(f"coordinator unreachable: {problem}")
            self.retries += 1
            log.warning("%s %s failed (%s); retrying in %.2fs", method, path, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, self.retry_max_seconds)

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

    def enroll(self, secret: str, experiment: str) -> dict[str, Any]:
        """`secret`: a one-time ticket, or the shared secret of open enrollment. A ticket whose
        reply was lost is used up: the retry gets 401 (CoordinatorError)."""
        result: dict[str, Any] = self.request(
            "POST", "/v1/agents", token=secret, json={"experiment": experiment}
        )
        return result

    def experiment(self, experiment: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", f"/v1/experiments/{experiment}")
        return result

    def experiment_ids(self, page_size: int = 100) -> list[str]:
        """Every experiment the coordinator lists (GET /v1/experiments, page by page)."""
        ids: list[str] = []
        after = ""
        while True:
            page = self.request(
                "GET", "/v1/experiments", params={"limit": page_size, "after": after}
            )
            ids += [str(e["id"]) for e in page["experiments"]]
            following = page.get("next")
            if not following or following == after:
                return ids
            after = str(following)

    def me(self, token: str) -> dict[str, Any]:
        """This agent as the coordinator knows it: epoch, version and `voted_against`, the arms
        whose voter set holds it in the current epoch."""
        result: dict[str, Any] = self.request("GET", "/v1/agents/me", token=token)
        return result

    def vote(self, experiment: str, token: str, arm: int, epoch: int) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "POST",
            f"/v1/experiments/{experiment}/votes",
            token=token,
            json={"arm": arm, "epoch": epoch},
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
