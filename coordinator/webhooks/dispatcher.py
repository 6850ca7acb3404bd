"""The webhook dispatcher: one background task per coordinator (started in app.py's lifespan).

It watches the experiments that have webhooks (common.redis_keys.WEBHOOK_INDEX, read when it
connects; WEBHOOK_CHANNEL announces the new ones): it subscribes to their changes channels (the
channel of the event streams, coordinator/events.py), and sweeps them every
DEXP_WEBHOOK_POLL_SECONDS besides (a message lost while Redis reconnected, a retry that came
due, a delivery a stopped coordinator left). On a change it reads the experiment as anyone would
(store.get_with_status: the published state and its kept result) and, for each webhook, enqueues
the events that happened since the webhook was created: a decision (identified or tied: the kept
result of that decision) or a reset (a new epoch). States are coalesced as the event streams'
are: two resets between two reads make one event. Enqueueing is idempotent across coordinators
(records.ENQUEUE); each attempt is claimed with a lease (records.CLAIM), so one coordinator sends
it. The POST runs in a task of its own, with a total timeout: nothing waits for it, least of all a
vote.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any

import httpx
from prometheus_client import Counter
from redis.exceptions import RedisError

from common import redis_keys as keys
from coordinator.errors import Invalid, NotFound
from coordinator.redis_client import AnyRedis
from coordinator.settings import Settings
from coordinator.store import ExperimentState, ExperimentStore
from coordinator.store.core import text
from coordinator.webhooks import targets
from coordinator.webhooks.records import Webhook, WebhookRecords
from coordinator.webhooks.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature

log = logging.getLogger("dexp.coordinator.webhooks")
WEBHOOKS_CLIENT = "dexp-webhooks"  # the name of the dispatcher's pub/sub connection
MAX_SENDING = 16  # attempts in flight at once in one process
COALESCE_SECONDS = 0.05  # messages that arrive this soon after one are read together
RETRY_MAX_SECONDS = 2.0  # back-off cap while Redis is unreachable
CLOSE_SECONDS = 2.0  # at shutdown, the tasks have this long to end once cancelled
ATTEMPTS = Counter(
    "dexp_webhook_attempts_total",
    "Webhook POSTs sent by this process, by outcome (delivered: a 2xx; error: anything else)",
    ["outcome"],
)
# what changes when the public state may have: another value, another read
FINGERPRINT = ("created_at", "version", "epoch", "event_id", "revision", "messages", "tied")


def events_of(hook: Webhook, state: ExperimentState) -> list[tuple[str, str, dict[str, Any]]]:
    """The events of `state` the webhook has not been told of: (kind, event id, body fields)."""
    found: list[tuple[str, str, dict[str, Any]]] = []
    if state.epoch > hook.since_epoch:
        found.append(("reset", f"{state.epoch}:reset", {"epoch": state.epoch, "result": None}))
    result = state.result
    if (
        state.status in ("identified", "tied")
        and result is not None
        and result.get("key") != hook.since_decision
        and state.epoch >= hook.since_epoch
    ):
        found.append((state.status, str(result["key"]), {"epoch": state.epoch, "result": result}))
    return found


class Dispatcher:
    def __init__(
        self, store: ExperimentStore, listener: AnyRedis | None, settings: Settings
    ) -> None:
        self.store = store
        self.records = WebhookRecords(store.redis)
        self.listener = listener
        self.allowed = targets.AllowedHosts.parse(settings.webhook_hosts)
        self.poll = settings.webhook_poll_seconds
        self.timeout = settings.webhook_timeout_seconds
        self.backoff_ms = int(settings.webhook_backoff_seconds * 1000)
        self.max_attempts = settings.webhook_max_attempts
        self.lease_ms = int((2 * self.timeout + 5) * 1000)  # an attempt is over long before
        self.http = httpx.AsyncClient(
            timeout=self.timeout,
            follow_redirects=False,
            trust_env=False,  # no proxy from the environment: the checked address is the peer
            limits=httpx.Limits(max_keepalive_connections=0),  # one TLS name per connection
        )
        self.pubsub: Any = None
        self.channels: set[str] = set()  # the changes channels subscribed to
        self.watched: set[str] = set()  # the experiments with webhooks, as far as this one knows
        self.seen: dict[str, list[Any] | None] = {}
        self.sending: set[tuple[str, str]] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.slots = asyncio.Semaphore(MAX_SENDING)
        self.task: asyncio.Task[None] | None = None
        self.closed = False

    def start(self) -> None:
        self.task = asyncio.create_task(self.run())

    async def close(self) -> None:
        """Stop: the loop and the attempts in flight (an attempt cut short is leased; it is
        retried when the lease ends, by whichever coordinator runs)."""
        # The flag too: redis-py's read with a timeout can turn a cancellation that coincides
        # with its timeout into a plain timeout (None), and the loop would go on.
        self.closed = True
        tasks = [t for t in (self.task, *self.tasks) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
        await self._reset_pubsub()
        await self.http.aclose()

    # -- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Subscribe (the webhooks' channel, and the changes channel of each watched experiment),
        read the index once per connection, then sweep the watched experiments every poll and
        read one at once when its channel speaks. With no webhook anywhere it sends Redis
        nothing but the pub/sub connection's health checks."""
        backoff = 0.05
        while not self.closed:
            try:
                if self.pubsub is None:
                    await self.connect()
                await self.sweep()
                await self.listen(self.poll)
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, RuntimeError) as exc:
                log.warning("webhooks: Redis failed (%s); retrying", exc)
                await self._reset_pubsub()
                await asyncio.sleep(backoff)
                backoff = min(2 * backoff, RETRY_MAX_SECONDS)

    async def connect(self) -> None:
        """The pub/sub connection, then the index: an experiment that gets a webhook from now on
        is announced on the channel, and the ones before are in the index."""
        if self.listener is not None:
            self.pubsub = self.listener.pubsub()
            await self.pubsub.subscribe(keys.WEBHOOK_CHANNEL)
            self.channels = set()
        self.watched |= set(await self.records.watched())

    async def sweep(self) -> None:
        await self.subscribe({keys.changes(e) for e in self.watched})
        for exp in sorted(self.watched):
            await self.scan(exp, force=False)

    async def subscribe(self, channels: set[str]) -> None:
        if self.pubsub is None:
            return
        if added := channels - self.channels:
            await self.pubsub.subscribe(*added)
        if dropped := self.channels - channels:
            await self.pubsub.unsubscribe(*dropped)
        self.channels = set(channels)

    async def listen(self, seconds: float) -> None:
        """Wait `seconds`, reading at once the experiments whose changes channel speaks, and
        watching those the webhooks' channel names."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0 and not self.closed:
            if self.pubsub is None:
                await asyncio.sleep(left)
                return
            changed: set[str] = set()
            message = await self.pubsub.get_message(timeout=left)
            until = loop.time() + COALESCE_SECONDS
            while message is not None:
                if message.get("type") == "message":
                    channel = text(message["channel"])
                    if channel == keys.WEBHOOK_CHANNEL:
                        exp = text(message["data"])
                        self.watched.add(exp)
                    else:
                        exp = channel.removeprefix(f"{keys.PREFIX}:{{").split("}", 1)[0]
                    changed.add(exp)
                if loop.time() >= until:
                    break
                message = await self.pubsub.get_message(timeout=until - loop.time())
            if changed:
                await self.subscribe({keys.changes(e) for e in self.watched})
            for exp in sorted(changed & self.watched):
                await self.scan(exp, force=True)

    async def _reset_pubsub(self) -> None:
        pubsub, self.pubsub = self.pubsub, None
        self.channels = set()
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    # -- one experiment -----------------------------------------------------------------------
    async def scan(self, exp: str, force: bool) -> None:
        """Enqueue the experiment's new events, then start its due attempts."""
        hooks = await self.records.webhooks(exp)
        if not hooks:
            await self.records.unwatch_if_empty(exp)
            self.unwatch(exp)
            return
        fingerprint = await self.store.redis.hmget(keys.meta(exp), list(FINGERPRINT))
        created_at = fingerprint[0]
        if created_at is None or any(
            h.experiment_created_at != int(created_at) for h in hooks.values()
        ):
            await self.records.forget(exp)  # deleted, or another experiment under its id
            self.unwatch(exp)
            return
        if force or self.seen.get(exp) != fingerprint:
            try:
                state = await self.store.get_with_status(exp)
            except NotFound:
                return
            # a publication that waits will change what a read shows: read again next time
            self.seen[exp] = fingerprint if state.tags.publication_due_at is None else None
            for hook in hooks.values():
                for kind, event, fields in events_of(hook, state):
                    body = {
                        "event": kind,
                        "experiment": exp,
                        "webhook": hook.id,
                        "delivery": f"{hook.id}:{event}",
                        **fields,
                    }
                    record = {"webhook": hook.id, "event": kind, "body": json.dumps(body)}
                    if await self.records.enqueue(exp, hook.id, event, record):
                        log.info("webhooks: %s of %s enqueued for %s", kind, exp, hook.id)
        await self.dispatch(exp, hooks)

    def unwatch(self, exp: str) -> None:
        self.watched.discard(exp)
        self.seen.pop(exp, None)

    async def dispatch(self, exp: str, hooks: dict[str, Webhook]) -> None:
        now = time.time() * 1000
        for delivery_id, delivery in (await self.records.deliveries(exp)).items():
            due = delivery.get("status") == "pending" and delivery.get("next_at", 0) <= now + 50
            free = delivery.get("lease_until", 0) <= now + 50
            hook = hooks.get(str(delivery.get("webhook")))
            if due and free and hook is not None and (exp, delivery_id) not in self.sending:
                self.sending.add((exp, delivery_id))
                task = asyncio.create_task(self.attempt(exp, delivery_id, hook))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    # -- one attempt --------------------------------------------------------------------------
    async def attempt(self, exp: str, delivery_id: str, hook: Webhook) -> None:
        try:
            async with self.slots:
                delivery = await self.records.claim(exp, delivery_id, self.lease_ms)
                if delivery is None:
                    return  # another coordinator's, or not due yet by Redis's clock
                error, status = await self.post(hook, delivery_id, delivery)
                ATTEMPTS.labels(outcome="delivered" if error is None else "error").inc()
                await self.records.finish(
                    exp,
                    delivery_id,
                    int(delivery["attempts"]),
                    error,
                    status,
                    self.backoff_ms,
                    self.max_attempts,
                )
                if error is not None:
                    log.info("webhooks: %s to %s failed: %s", delivery_id, hook.url, error)
        except (RedisError, OSError) as exc:
            log.warning("webhooks: %s of %s: Redis failed (%s)", delivery_id, exp, exc)
        finally:
            self.sending.discard((exp, delivery_id))

    async def post(
        self, hook: Webhook, delivery_id: str, delivery: dict[str, Any]
    ) -> tuple[str | None, int]:
        """POST the delivery to the checked address of its URL: (error or None, HTTP status)."""
        body = str(delivery["body"]).encode()
        timestamp = int(time.time())
        try:
            async with asyncio.timeout(self.timeout):
                target = await targets.check(hook.url, self.allowed)
                headers = {
                    "Host": target.host_header,
                    "Content-Type": "application/json",
                    "User-Agent": "dexp-webhooks",
                    "X-Dexp-Event": str(delivery["event"]),
                    "X-Dexp-Delivery": delivery_id,
                    TIMESTAMP_HEADER: str(timestamp),
                    SIGNATURE_HEADER: signature(hook.secret, timestamp, body),
                }
                extensions = {"sni_hostname": target.server_name} if target.server_name else {}
                async with self.http.stream(
                    "POST", target.url, content=body, headers=headers, extensions=extensions
                ) as response:
                    status = response.status_code  # the body is never read
        except Invalid as exc:
            return exc.message, 0
        except TimeoutError:
            return f"no answer within {self.timeout:g} s", 0
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"[:300], 0
        if 200 <= status < 300:
            return None, status
        return f"HTTP {status}", status
