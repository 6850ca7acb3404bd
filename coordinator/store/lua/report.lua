-- One CDE report, authenticated and applied atomically: the rule of common/votes.py
-- (decide_report) in Lua. An agent reports one arm, once per experiment; the first arm that
-- `threshold` distinct agents reported is accepted and every other arm leaves at once.
-- Returns {outcome, version as published} (the store puts the version on the events channel at an
-- acceptance, as vote.lua's caller does; the HTTP reply carries only the outcome): counted, accepted (counted, and it brought its arm to the threshold),
-- duplicate (this agent reported already, whatever the arm: nothing changes, and the reply is the
-- same whatever the others reported meanwhile, accepted or not), decided (a first report after an
-- arm was accepted: ignored); each a message (`messages`, `epoch_messages`), the last two ignored
-- ones. Or an error sentinel that changes nothing and counts no message: {'expired'} (run after
-- its deadline: deadline.lua), {'no_experiment'},
-- {'unauthorized'}, {'not_reporting'} (not a CDE experiment: agents vote there), {'crowd'} (an
-- LDP experiment: its devices send private reports, lua/ldp_report.lua), {'bad_arm',
-- n_arms}, {'rate_limited', ms to wait}. Which arm an agent reported is not kept, only the counts.
local meta_key = KEYS[1]  -- meta hash
local remaining_key = KEYS[2]  -- remaining set
local reporters_key = KEYS[3]  -- reporters set (every agent that reported, any arm)
local report_counts_key = KEYS[4]  -- report counts hash (arm -> reports)
local eliminations_key = KEYS[5]  -- eliminations list
local credentials_key = KEYS[6]  -- credentials hash (agent id -> SHA-256 digest of its token)
-- vote rate hash (agent id -> GCRA state, gcra.lua, prepended: reports and votes share the
-- per-agent rate)
local vote_rate_key = KEYS[7]
local agent_id = ARGV[1]
local arm_index = ARGV[2]
local now_ms = ARGV[3]
local token_digest = ARGV[4]  -- the SHA-256 hex digest of the bearer token the report came with
local vote_rate = ARGV[5]  -- requests per second per agent (0: no limit)
local vote_burst = ARGV[6]
local changes_channel = ARGV[7]  -- the experiment's changes channel (changes.lua)
-- the publication batch and its cadence (ms) (publish.lua: a report is published with its batch,
-- and the acceptance at the cadence's next tick, as votes and eliminations are; the published
-- per-arm counters, p_votes, count reports in a CDE experiment)
local publish_batch = ARGV[8]
local publish_cadence_ms = ARGV[9]
-- the deadline in Redis's clock (ms; 0: none): run later, the coordinator has answered 503, and
-- the script changes nothing (deadline.lua, prepended)
local deadline_ms = ARGV[10]

if expired(deadline_ms) then return {'expired'} end

local meta = redis.call('HMGET', meta_key, 'threshold', 'n_arms', 'algorithm')
local threshold = tonumber(meta[1])
if not threshold then return {'no_experiment'} end
-- A plain comparison of digests, as in vote.lua.
if redis.call('HGET', credentials_key, agent_id) ~= token_digest then return {'unauthorized'} end
if meta[3] == 'ldp' then return {'crowd'} end
if meta[3] ~= 'cde' then return {'not_reporting'} end
local n_arms = tonumber(meta[2])
local arm = tonumber(arm_index)
if not arm or arm < 0 or arm >= n_arms or arm ~= math.floor(arm) then
  return {'bad_arm', n_arms}
end
local wait = gcra(vote_rate_key, agent_id, tonumber(vote_rate), tonumber(vote_burst))
if wait > 0 then return {'rate_limited', math.ceil(wait)} end

local now = tonumber(now_ms)
redis.call('HINCRBY', meta_key, 'messages', 1)
redis.call('HINCRBY', meta_key, 'epoch_messages', 1)
local function reply(outcome)
  if due(meta_key, now, tonumber(publish_batch), tonumber(publish_cadence_ms)) then
    publish(meta_key, remaining_key, eliminations_key, changes_channel)
  end
  return {outcome, tonumber(redis.call('HGET', meta_key, 'p_version') or 0)}
end
local function ignored(outcome)
  redis.call('HINCRBY', meta_key, 'ignored', 1)
  return reply(outcome)
end
if redis.call('SISMEMBER', reporters_key, agent_id) == 1 then return ignored('duplicate') end
if redis.call('SCARD', remaining_key) <= 1 then return ignored('decided') end

redis.call('SADD', reporters_key, agent_id)
local count = redis.call('HINCRBY', report_counts_key, arm_index, 1)
pending_vote(meta_key, arm)
if count < threshold then return reply('counted') end
-- accepted: every other arm leaves at once, in index order, each with the reports it had
local others = {}
for _, a in ipairs(redis.call('SMEMBERS', remaining_key)) do
  if tonumber(a) ~= arm then others[#others + 1] = tonumber(a) end
end
table.sort(others)
local order = redis.call('LLEN', eliminations_key)
for _, a in ipairs(others) do
  order = order + 1
  local reports = tonumber(redis.call('HGET', report_counts_key, tostring(a)) or 0)
  redis.call('SREM', remaining_key, tostring(a))
  redis.call('RPUSH', eliminations_key,
    cjson.encode({arm = a, votes = reports, time = now, order = order}))
end
redis.call('HINCRBY', meta_key, 'version', 1)
changed(meta_key, now)
touched(changes_channel)
return reply('accepted')
