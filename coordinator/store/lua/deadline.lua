-- A deadline, prepended by the store (scripts.py) to the scripts that change an experiment for an
-- agent's or the admin's call (vote, report, ldp_report, settled, enroll, reset).
-- expired(deadline): whether Redis's clock (TIME, ms) is past `deadline` (ms of Redis's clock, as
--   the coordinator reckons it from its own: StoreCore.deadline_ms; 0: none). Checked before any
--   write: a script Redis runs after the coordinator gave up waiting for it (a hung Redis that
--   resumed, the call answered 503) changes nothing, as a refused call must not.
local function expired(deadline)
  local limit = tonumber(deadline)
  if not limit or limit <= 0 then return false end
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) > limit
end
