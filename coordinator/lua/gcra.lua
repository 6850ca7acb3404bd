-- Rate limiting, prepended by coordinator/store.py to the scripts that use it (vote, enroll).
-- GCRA, the generic cell rate algorithm: a token bucket of `burst` tokens refilled at `rate` per
-- second, kept as one number per client, the theoretical arrival time (TAT) of its next request in
-- ms of Redis's own clock (one clock for every coordinator replica). A request may go if it would
-- not bring the TAT more than `burst` intervals ahead of now; only then is the new TAT written, so a
-- refused request changes nothing. rate <= 0: no limit.
-- Returns 0 if the request may go (and records it in HASH[field]), else the ms to wait.
local function gcra(hash, field, rate, burst)
  if not rate or rate <= 0 then return 0 end
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
  local interval = 1000 / rate
  local tat = tonumber(redis.call('HGET', hash, field)) or now
  if tat < now then tat = now end
  tat = tat + interval
  local wait = tat - burst * interval - now
  if wait > 0 then return wait end
  redis.call('HSET', hash, field, tat)
  return 0
end
