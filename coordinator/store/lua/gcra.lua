-- Rate limiting, prepended by the store (scripts.py) to the scripts that use it (vote, settled, enroll,
-- reset).
-- GCRA, the generic cell rate algorithm: a token bucket of `burst` tokens refilled at `rate` per
-- second, kept as one number per client, the theoretical arrival time (TAT) of its next request in
-- ms of Redis's own clock (one clock for every coordinator replica). A request may go if it would
-- not bring the TAT more than `burst` intervals ahead of now; only then is the new TAT written, so a
-- refused request changes nothing. rate <= 0: no limit.
-- gcra_wait(hash, field, rate, burst): the ms to wait before a request may go (0: now); no write.
-- gcra(hash, field, rate, burst): the same, and records the request in HASH[field] when it may go.
local function gcra_next(hash, field, rate, burst)
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
  local interval = 1000 / rate
  local tat = tonumber(redis.call('HGET', hash, field)) or now
  if tat < now then tat = now end
  tat = tat + interval
  return tat, tat - burst * interval - now
end
local function gcra_wait(hash, field, rate, burst)
  if not rate or rate <= 0 then return 0 end
  local _, wait = gcra_next(hash, field, rate, burst)
  if wait > 0 then return wait end
  return 0
end
local function gcra(hash, field, rate, burst)
  if not rate or rate <= 0 then return 0 end
  local tat, wait = gcra_next(hash, field, rate, burst)
  if wait > 0 then return wait end
  redis.call('HSET', hash, field, tat)
  return 0
end
