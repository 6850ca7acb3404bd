"""Webhooks and their deliveries in Redis, in the experiment's hash slot (common/redis_keys.py).

Several coordinators may share one Redis and each watches the experiments that have webhooks: a
delivery is created once, by a Lua HSETNX keyed by webhook and event (`ENQUEUE`), whichever saw the
event first; an attempt is claimed by a lease (`CLAIM`: one sender at a time; a sender that dies
mid-attempt leaves a lease that expires, and any coordinator retries after it); its outcome sets
the next attempt with an exponential back-off, or ends it (`FINISH`). Every time is Redis's clock.
Deliveries live in Redis, so a restart loses none. A delivery is sent at least once and, unless a
sender outlives its lease, once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from common import redis_keys as keys
from coordinator.redis_client import AnyRedis
from coordinator.store.core import text

MAX_KEPT_DELIVERIES = 20  # finished deliveries kept per experiment for GET .../webhooks
BACKOFF_CAP_MS = 3_600_000  # no wait between attempts is longer than an hour

NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: webhooks hash, meta hash. ARGV: id, record JSON, max webhooks, experiment created_at.
# Returns 1; -1 if the experiment is gone or another one under its id; -2 if it has max webhooks.
ADD = """
if redis.call('HGET', KEYS[2], 'created_at') ~= ARGV[4] then return -1 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return -2 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: webhooks hash, deliveries hash. ARGV: webhook id, delivery id, record JSON, max kept.
# Creates the delivery (pending, due now) unless it exists or its webhook is gone: 1 if created.
# Then trims the oldest finished deliveries beyond `max kept`.
ENQUEUE = (
    NOW
    + """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local record = cjson.decode(ARGV[3])
record.created_at = now
record.next_at = now
record.lease_until = 0
record.attempts = 0
record.status = 'pending'
if redis.call('HSETNX', KEYS[2], ARGV[2], cjson.encode(record)) == 0 then return 0 end
local all = redis.call('HGETALL', KEYS[2])
local finished = {}
for i = 1, #all, 2 do
  local d = cjson.decode(all[i + 1])
  if d.status ~= 'pending' then finished[#finished + 1] = {all[i], d.created_at} end
end
local excess = #finished - tonumber(ARGV[4])
if excess > 0 then
  table.sort(finished, function(a, b) return a[2] < b[2] end)
  for i = 1, excess do redis.call('HDEL', KEYS[2], finished[i][1]) end
end
return 1
"""
)

# KEYS: deliveries hash. ARGV: delivery id, lease ms. The delivery with one more attempt, leased
# to the caller, if it is pending, due and not leased; else nil.
CLAIM = (
    NOW
    + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return nil end
local d = cjson.decode(raw)
if d.status ~= 'pending' or d.next_at > now or d.lease_until > now then return nil end
d.attempts = d.attempts + 1
d.lease_until = now + tonumber(ARGV[2])
d.last_attempt_at = now
local encoded = cjson.encode(d)
redis.call('HSET', KEYS[1], ARGV[1], encoded)
return encoded
"""
)

# KEYS: deliveries hash. ARGV: delivery id, attempt, ok (1/0), error, HTTP status (0: none),
# back-off ms, max attempts, back-off cap ms. Records the attempt's outcome if the delivery is
# still pending at that attempt: delivered, or due again after back-off * 2^(attempt-1), or
# failed after max attempts.
FINISH = (
    NOW
    + """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local d = cjson.decode(raw)
if d.status ~= 'pending' or d.attempts ~= tonumber(ARGV[2]) then return 0 end
d.lease_until = 0
if tonumber(ARGV[5]) > 0 then d.last_status = tonumber(ARGV[5]) end
if ARGV[3] == '1' then
  d.status = 'delivered'
  d.delivered_at = now
  d.last_error = nil
else
  d.last_error = ARGV[4]
  if d.attempts >= tonumber(ARGV[7]) then
    d.status = 'failed'
  else
    local wait = tonumber(ARGV[6]) * 2 ^ (d.attempts - 1)
    if wait > tonumber(ARGV[8]) then wait = tonumber(ARGV[8]) end
    d.next_at = now + math.floor(wait)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(d))
return 1
"""
)

# KEYS: webhooks hash, deliveries hash. ARGV: webhook id. Removes it and its deliveries: 1, or 0.
REMOVE = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local prefix = ARGV[1] .. ':'
for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do
  if string.sub(id, 1, #prefix) == prefix then redis.call('HDEL', KEYS[2], id) end
end
return 1
"""


@dataclass(frozen=True)
class Webhook:
    id: str
    url: str
    secret: str
    created_at: int  # unix ms
    experiment_created_at: int  # of the experiment it was created for (another under its id: gone)
    since_epoch: int  # events from the state it was created in on: resets after this epoch,
    since_decision: str  # and decisions other than this one (results.decision)

    @classmethod
    def of(cls, raw: bytes | str) -> Webhook:
        return cls(**json.loads(raw))

    def public(self) -> dict[str, Any]:
        """What GET answers: never the secret."""
        return {"id": self.id, "url": self.url, "created_at": self.created_at}


class WebhookRecords:
    """The webhooks of every experiment, and their deliveries, on one Redis client."""

    def __init__(self, redis: AnyRedis) -> None:
        self.redis = redis
        self._add = redis.register_script(ADD)
        self._enqueue = redis.register_script(ENQUEUE)
        self._claim = redis.register_script(CLAIM)
        self._finish = redis.register_script(FINISH)
        self._remove = redis.register_script(REMOVE)

    async def add(self, exp: str, webhook: Webhook, limit: int) -> int:
        """1 if added; -1 if the experiment is gone; -2 if it has `limit` webhooks already."""
        code = await self._add(
            keys=[keys.webhooks(exp), keys.meta(exp)],
            args=[
                webhook.id,
                json.dumps(webhook.__dict__),
                limit,
                webhook.experiment_created_at,
            ],
        )
        if int(code) == 1:
            await self.redis.sadd(keys.WEBHOOK_INDEX, exp)
            await self.redis.publish(keys.WEBHOOK_CHANNEL, exp)  # every dispatcher watches it now
        return int(code)

    async def webhooks(self, exp: str) -> dict[str, Webhook]:
        raw = await self.redis.hgetall(keys.webhooks(exp))
        return {text(k): Webhook.of(v) for k, v in raw.items()}

    async def deliveries(self, exp: str) -> dict[str, dict[str, Any]]:
        raw = await self.redis.hgetall(keys.webhook_deliveries(exp))
        return {text(k): json.loads(v) for k, v in raw.items()}

    async def remove(self, exp: str, webhook_id: str) -> bool:
        code = await self._remove(
            keys=[keys.webhooks(exp), keys.webhook_deliveries(exp)], args=[webhook_id]
        )
        return int(code) == 1

    async def forget(self, exp: str) -> None:
        """The experiment is gone (or another under its id): its webhooks go with it."""
        await self.redis.delete(keys.webhooks(exp), keys.webhook_deliveries(exp))
        await self.redis.srem(keys.WEBHOOK_INDEX, exp)

    async def watched(self) -> list[str]:
        return sorted(text(e) for e in await self.redis.smembers(keys.WEBHOOK_INDEX))

    async def unwatch_if_empty(self, exp: str) -> None:
        if not await self.redis.exists(keys.webhooks(exp)):
            await self.redis.srem(keys.WEBHOOK_INDEX, exp)

    async def enqueue(self, exp: str, webhook_id: str, event: str, record: dict[str, Any]) -> bool:
        code = await self._enqueue(
            keys=[keys.webhooks(exp), keys.webhook_deliveries(exp)],
            args=[webhook_id, f"{webhook_id}:{event}", json.dumps(record), MAX_KEPT_DELIVERIES],
        )
        return int(code) == 1

    async def claim(self, exp: str, delivery_id: str, lease_ms: int) -> dict[str, Any] | None:
        raw = await self._claim(keys=[keys.webhook_deliveries(exp)], args=[delivery_id, lease_ms])
        return None if raw is None else dict(json.loads(raw))

    async def finish(
        self,
        exp: str,
        delivery_id: str,
        attempt: int,
        error: str | None,
        status: int,
        backoff_ms: int,
        max_attempts: int,
    ) -> None:
        await self._finish(
            keys=[keys.webhook_deliveries(exp)],
            args=[
                delivery_id,
                attempt,
                1 if error is None else 0,
                (error or "")[:300],
                status,
                backoff_ms,
                max_attempts,
                BACKOFF_CAP_MS,
            ],
        )
