-- Apply an LDP decision (common/ldp.py `decide`, run by a coordinator on publication
-- `publication`'s counts: coordinator/store/decisions.py), atomically. Decisions only ever remove
-- arms, and one that identified an arm ends the experiment, so they are idempotent and monotone:
-- whichever coordinator applies which decision first, an arm that left never comes back, a decided
-- experiment stays decided, and a decision on a publication older than the last one decided is
-- ignored. The arms in `eliminate` leave (those still in the global set, in index order, never the
-- last one); when `leader` is identified, every other remaining arm leaves after them, and the
-- experiment is identified with the leader as its best arm (one arm left). The new global set is
-- published at once (p_remaining, p_eliminations, p_version: the counts are not, they move only
-- with their batch), the document revised and the change announced (changes.lua, prepended).
-- Returns {'applied', arms that left, version}, or, changing nothing but `decided` (the
-- publication decided on): {'unchanged', 0, version}; or a refusal that changes nothing:
-- {'no_experiment'} (or another one: another created_at), {'not_crowd'}, {'decided'} (no longer
-- exploring), {'known'} (a decision on this publication or a later one was applied).
local meta_key = KEYS[1]  -- meta hash
local remaining_key = KEYS[2]  -- remaining set
local eliminations_key = KEYS[3]  -- eliminations list
-- the experiment's created_at the decision was made for (deleted and created again: another one)
local created_at = ARGV[1]
local publication = ARGV[2]  -- the `published` counter of the counts decided on
local eliminate = ARGV[3]  -- JSON list of the arm indices that leave
local leader = ARGV[4]  -- the identified arm's index, or -1 while none is
local now_ms = ARGV[5]
local changes_channel = ARGV[6]  -- the experiment's changes channel

local m = redis.call('HMGET', meta_key, 'created_at', 'algorithm', 'decided', 'p_votes')
if not m[1] or m[1] ~= created_at then return {'no_experiment'} end
if m[2] ~= 'ldp' then return {'not_crowd'} end
if redis.call('SCARD', remaining_key) <= 1 then return {'decided'} end
local at = tonumber(publication)
if m[3] and tonumber(m[3]) >= at then return {'known'} end

local reports = cjson.decode(m[4])  -- each elimination records the arm's published reports
local now = tonumber(now_ms)
local leaving = {}
for _, a in ipairs(cjson.decode(eliminate)) do leaving[#leaving + 1] = tonumber(a) end
table.sort(leaving)
local winner = tonumber(leader)
if winner >= 0 and redis.call('SISMEMBER', remaining_key, winner) == 1 then
  local others = {}
  for _, a in ipairs(redis.call('SMEMBERS', remaining_key)) do
    if tonumber(a) ~= winner then others[#others + 1] = tonumber(a) end
  end
  table.sort(others)
  for _, a in ipairs(others) do leaving[#leaving + 1] = a end
end
local order = redis.call('LLEN', eliminations_key)
local removed = 0
for _, a in ipairs(leaving) do
  if redis.call('SCARD', remaining_key) > 1 and redis.call('SREM', remaining_key, a) == 1 then
    order = order + 1
    removed = removed + 1
    redis.call('RPUSH', eliminations_key,
      cjson.encode({arm = a, votes = reports[a + 1] or 0, time = now, order = order}))
  end
end
redis.call('HSET', meta_key, 'decided', at)
if removed == 0 then
  return {'unchanged', 0, tonumber(redis.call('HGET', meta_key, 'version'))}
end
local version = redis.call('HINCRBY', meta_key, 'version', 1)
local arms = {}
for _, a in ipairs(redis.call('SMEMBERS', remaining_key)) do arms[#arms + 1] = tonumber(a) end
table.sort(arms)
redis.call('HSET', meta_key, 'p_remaining', cjson.encode(arms), 'p_version', version,
  'p_eliminations', redis.call('LLEN', eliminations_key))
revise(meta_key)
announce(meta_key, changes_channel)
return {'applied', removed, version}
