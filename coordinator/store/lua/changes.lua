-- What the public sees change, prepended by the store (scripts.py) to the scripts that change an
-- experiment (create, vote, settled, enroll, reset, announce).
-- revise(meta): the experiment's document (GET /v1/experiments/{id} and .../best-arm) changed in a
--   way its counters (version, epoch, messages, ignored) may not show: a counted vote, a settled
--   agent, an enrollment. `revision` counts such changes and `revised_at` is Redis's clock (us) at
--   the last one, so that a change a failover lost and a different one after it never share a
--   revision (coordinator/caching.py builds the ETag from these fields).
-- announce(meta, channel): the public state (version, epoch, status, remaining arms) changed: a new
--   `event_id`, '<ms>-<seq>' from Redis's clock, greater than the last one (the SSE event id, see
--   coordinator/events.py), and 's' published on the experiment's changes channel.
-- touched(channel): a change that may turn the status tied or untied (only a coordinator can tell:
--   common/votes.py is_tied over every voter set): 'c' published, so that the coordinators that
--   stream the experiment read it again.
local function revise(meta)
  redis.call('HINCRBY', meta, 'revision', 1)
  local clock = redis.call('TIME')
  redis.call('HSET', meta, 'revised_at', clock[1] .. '.' .. clock[2])
end
local function next_event_id(meta)
  local clock = redis.call('TIME')
  local ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local seq = 0
  local last = redis.call('HGET', meta, 'event_id')
  if last then
    local last_ms, last_seq = string.match(last, '^(%d+)-(%d+)$')
    if last_ms and tonumber(last_ms) >= ms then
      ms, seq = tonumber(last_ms), tonumber(last_seq) + 1
    end
  end
  local id = string.format('%d-%d', ms, seq)
  redis.call('HSET', meta, 'event_id', id)
  return id
end
local function announce(meta, channel)
  local id = next_event_id(meta)
  redis.call('PUBLISH', channel, 's')
  return id
end
local function touched(channel)
  redis.call('PUBLISH', channel, 'c')
end
