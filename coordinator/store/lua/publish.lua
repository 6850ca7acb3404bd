-- Publication, prepended (after changes.lua) to the scripts that count votes, settle agents or
-- start an epoch. What anyone may read of the votes (GET /v1/experiments/{id}, .../best-arm, the
-- event streams, an agent's vote and settled replies and GET /v1/agents/me) is the last
-- publication: the p_* fields of the meta hash, a snapshot of the votes per arm, the global set,
-- the eliminations and the message counters. A new one is taken once `batch` counted messages
-- (votes or reports that moved a count) came since the last, or, when the global set changed (an
-- elimination) or an agent newly settled (CE: it may make the experiment tied), at the first tick
-- of the cadence (every `cadence` ms) after the first such change. An ignored message (a
-- duplicate, another epoch, an arm out) moves no count and so no batch: what a client can send
-- over and over cannot time a publication. A reader who polls, and knows when a device voted,
-- sees its vote arrive with at least batch - 1 other counted messages, never alone unless it
-- removed an arm in a quiet moment (docs/PRIVACY.md). batch 1 and cadence 0: every message at
-- once, ignored ones too.
-- pending_vote(meta, arm): a counted vote, in `pending_votes` until the next publication.
-- pending_one(meta, arm): LDP: a counted report whose bit is 1 (its report is a pending_vote), in
--   `pending_ones` until the next publication, which adds them to `p_ones` (LDP's experiments only
--   have it: create.lua).
-- waiting(raw): the counted messages in `pending_votes` (its JSON, or nil): what the batch counts.
-- changed(meta, now): the global set changed at `now` (ms): published at the next tick.
-- settled_changed(meta, now): an agent newly settled at `now` (ms): published at the next tick
--   after the first such message since the last publication (`settled_at`, which publish clears).
-- due(meta, now, batch, cadence): whether a publication is due.
-- publish(meta, remaining, eliminations, channel): take it: the document's `published` counter
--   and `published_at` (Redis's clock, us) move, and the change is announced (a new global set:
--   a new event id, 's') or touched ('c': the counts, and so maybe the tie status, moved).
-- remember(meta, votes, ms): the publication's total votes (CDE: reports) at `ms`, in `p_history`:
--   {e = epoch, p = {{ms, total}, ...}}, this epoch's only, at most HISTORY_POINTS points (the
--   older half thinned when full), so that a reader who comes late still draws the votes over time.
local HISTORY_POINTS = 120
local function remember(meta, votes, ms)
  local total = 0
  for _, n in ipairs(votes) do total = total + n end
  local m = redis.call('HMGET', meta, 'p_history', 'epoch')
  local epoch = tonumber(m[2] or 0)
  local ok, history = pcall(cjson.decode, m[1] or '')
  if not ok or type(history) ~= 'table' or history['e'] ~= epoch then
    history = {e = epoch, p = {}}
  end
  local points = history['p']
  local last = points[#points]
  if last and last[2] == total then return end
  points[#points + 1] = {ms, total}
  if #points > HISTORY_POINTS then
    local half = math.floor(#points / 2)
    local kept = {}
    for i = 1, #points do
      if i > half or i % 2 == 1 then kept[#kept + 1] = points[i] end
    end
    history['p'] = kept
  end
  redis.call('HSET', meta, 'p_history', cjson.encode(history))
end
local function pending_vote(meta, arm)
  local pending = cjson.decode(redis.call('HGET', meta, 'pending_votes') or '{}')
  local key = tostring(arm)
  pending[key] = (pending[key] or 0) + 1
  redis.call('HSET', meta, 'pending_votes', cjson.encode(pending))
end
local function pending_one(meta, arm)
  local pending = cjson.decode(redis.call('HGET', meta, 'pending_ones') or '{}')
  local key = tostring(arm)
  pending[key] = (pending[key] or 0) + 1
  redis.call('HSET', meta, 'pending_ones', cjson.encode(pending))
end
local function waiting(raw)
  local n = 0
  for _, count in pairs(cjson.decode(raw or '{}')) do n = n + count end
  return n
end
local function changed(meta, now)
  redis.call('HSET', meta, 'changed_at', now)
end
local function settled_changed(meta, now)
  redis.call('HSETNX', meta, 'settled_at', now)
end
local function due(meta, now, batch, cadence)
  local m = redis.call('HMGET', meta, 'pending_votes', 'version', 'p_version', 'changed_at',
    'p_votes', 'settled_at', 'messages', 'p_messages')
  if not m[5] then return false end  -- published by a reader (reads.py), who has the voter sets
  if waiting(m[1]) >= batch then return true end
  if batch <= 1 and m[7] ~= m[8] then return true end  -- no batches: every message at once
  local since = nil  -- the first change that waits for its tick (ms)
  if m[2] ~= m[3] then since = tonumber(m[4] or 0) end
  if m[6] and (not since or tonumber(m[6]) < since) then since = tonumber(m[6]) end
  if not since then return false end
  if cadence <= 0 then return true end
  return now >= (math.floor(since / cadence) + 1) * cadence
end
local function publish(meta, remaining, eliminations, channel)
  local m = redis.call('HMGET', meta, 'p_votes', 'pending_votes', 'messages', 'ignored',
    'epoch_messages', 'version', 'p_version', 'p_ones', 'pending_ones')
  local votes = cjson.decode(m[1])
  for arm, n in pairs(cjson.decode(m[2] or '{}')) do
    local i = tonumber(arm) + 1
    votes[i] = votes[i] + n
  end
  if m[8] then  -- LDP: the ones move with the reports
    local ones = cjson.decode(m[8])
    for arm, n in pairs(cjson.decode(m[9] or '{}')) do
      local i = tonumber(arm) + 1
      ones[i] = ones[i] + n
    end
    redis.call('HSET', meta, 'p_ones', cjson.encode(ones), 'pending_ones', '{}')
  end
  local arms = {}
  for _, arm in ipairs(redis.call('SMEMBERS', remaining)) do arms[#arms + 1] = tonumber(arm) end
  table.sort(arms)
  redis.call('HSET', meta, 'p_votes', cjson.encode(votes), 'pending_votes', '{}',
    'p_remaining', cjson.encode(arms), 'p_eliminations', redis.call('LLEN', eliminations),
    'p_messages', m[3], 'p_ignored', m[4], 'p_epoch_messages', m[5] or 0, 'p_version', m[6])
  redis.call('HDEL', meta, 'settled_at')
  redis.call('HINCRBY', meta, 'published', 1)
  local clock = redis.call('TIME')
  redis.call('HSET', meta, 'published_at', clock[1] .. '.' .. clock[2])
  remember(meta, votes, tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000))
  if m[6] ~= m[7] then announce(meta, channel) else touched(channel) end
end
local function zeros(n)
  local votes = {}
  for i = 1, n do votes[i] = 0 end
  return cjson.encode(votes)
end
