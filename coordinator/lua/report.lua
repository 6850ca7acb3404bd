-- One CDE report, authenticated and applied atomically: the rule of common/votes.py
-- (decide_report) in Lua. An agent reports one arm, once per experiment; the first arm that
-- `threshold` distinct agents reported is accepted and every other arm leaves at once.
-- KEYS[1] meta hash, KEYS[2] remaining set, KEYS[3] reporters set (every agent that reported, any
-- arm), KEYS[4] report counts hash (arm -> reports), KEYS[5] eliminations list, KEYS[6]
-- credentials hash (agent id -> SHA-256 digest of its token), KEYS[7] vote rate hash (agent id ->
-- GCRA state, gcra.lua, prepended: reports and votes share the per-agent rate).
-- ARGV[1] agent id, ARGV[2] arm index, ARGV[3] now (ms), ARGV[4] the SHA-256 hex digest of the
-- bearer token the report came with, ARGV[5] requests per second per agent (0: no limit),
-- ARGV[6] the burst, ARGV[7] the experiment's changes channel (changes.lua), ARGV[8] the
-- publication batch and ARGV[9] its cadence (ms) (publish.lua: a report is published with its
-- batch, and the acceptance at the cadence's next tick, as votes and eliminations are; the
-- published per-arm counters, p_votes, count reports in a CDE experiment).
-- Returns {outcome, version as published} (the store puts the version on the events channel at an
-- acceptance, as vote.lua's caller does; the HTTP reply carries only the outcome): counted, accepted (counted, and it brought its arm to the threshold),
-- duplicate (this agent reported already, whatever the arm: nothing changes, and the reply is the
-- same whatever the others reported meanwhile, accepted or not), decided (a first report after an
-- arm was accepted: ignored); each a message (`messages`, `epoch_messages`), the last two ignored
-- ones. Or an error sentinel that changes nothing and counts no message: {'no_experiment'},
-- {'unauthorized'}, {'not_reporting'} (not a CDE experiment: agents vote there), {'bad_arm',
-- n_arms}, {'rate_limited', ms to wait}. Which arm an agent reported is not kept, only the counts.
local meta = redis.call('HMGET', KEYS[1], 'threshold', 'n_arms', 'algorithm')
local threshold = tonumber(meta[1])
if not threshold then return {'no_experiment'} end
-- A plain comparison of digests, as in vote.lua.
if redis.call('HGET', KEYS[6], ARGV[1]) ~= ARGV[4] then return {'unauthorized'} end
if meta[3] ~= 'cde' then return {'not_reporting'} end
local n_arms = tonumber(meta[2])
local arm = tonumber(ARGV[2])
if not arm or arm < 0 or arm >= n_arms or arm ~= math.floor(arm) then
  return {'bad_arm', n_arms}
end
local wait = gcra(KEYS[7], ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[6]))
if wait > 0 then return {'rate_limited', math.ceil(wait)} end

local now = tonumber(ARGV[3])
redis.call('HINCRBY', KEYS[1], 'messages', 1)
redis.call('HINCRBY', KEYS[1], 'epoch_messages', 1)
local function reply(outcome)
  if due(KEYS[1], now, tonumber(ARGV[8]), tonumber(ARGV[9])) then
    publish(KEYS[1], KEYS[2], KEYS[5], ARGV[7])
  end
  return {outcome, tonumber(redis.call('HGET', KEYS[1], 'p_version') or 0)}
end
local function ignored(outcome)
  redis.call('HINCRBY', KEYS[1], 'ignored', 1)
  return reply(outcome)
end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return ignored('duplicate') end
if redis.call('SCARD', KEYS[2]) <= 1 then return ignored('decided') end

redis.call('SADD', KEYS[3], ARGV[1])
local count = redis.call('HINCRBY', KEYS[4], ARGV[2], 1)
pending_vote(KEYS[1], arm)
if count < threshold then return reply('counted') end
-- accepted: every other arm leaves at once, in index order, each with the reports it had
local others = {}
for _, a in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if tonumber(a) ~= arm then others[#others + 1] = tonumber(a) end
end
table.sort(others)
local order = redis.call('LLEN', KEYS[5])
for _, a in ipairs(others) do
  order = order + 1
  local reports = tonumber(redis.call('HGET', KEYS[4], tostring(a)) or 0)
  redis.call('SREM', KEYS[2], tostring(a))
  redis.call('RPUSH', KEYS[5], cjson.encode({arm = a, votes = reports, time = now, order = order}))
end
redis.call('HINCRBY', KEYS[1], 'version', 1)
changed(KEYS[1], now)
touched(ARGV[7])
return reply('accepted')
