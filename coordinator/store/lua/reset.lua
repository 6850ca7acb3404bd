-- DSER4's global reset: every arm back, every vote cleared, a new epoch (epoch_messages 0,
-- epoch_started_at now in Redis's clock; `messages` stays the total of every epoch). Applied only if
-- the caller is still in the current epoch, so that concurrent resets from several agents make one
-- new epoch.
-- An agent's reset is rate-limited, per agent and per experiment (gcra.lua, prepended by the store),
-- and recorded per agent for the admin; an admin's reset is neither.
-- Returns {reset (1/0), version, epoch, requests}; {2, version, epoch, requests} if the request is
-- recorded and the quorum not reached yet; {-1, 0, 0, 0} if the experiment does not exist; {-2, ms
-- to wait, 0, 0} if the agent or the experiment resets too fast; {-3, 0, 0, 0} if it is a CDE
-- experiment, which is never reset: each agent reports once per experiment, and a new epoch would
-- let it report again (nothing changes); {-4, 0, 0, 0} if it is an LDP experiment, never reset
-- either: its decisions are final, and each device's B reports are its privacy budget; {-5, 0, 0,
-- 0} if the script ran after its deadline (deadline.lua): nothing changes.
local meta_key = KEYS[1]  -- meta hash
local remaining_key = KEYS[2]  -- remaining set
local eliminations_key = KEYS[3]  -- eliminations list
local reset_rate_key = KEYS[4]  -- reset rate hash (agent id or '*' -> GCRA state)
local resets_key = KEYS[5]  -- resets hash (agent id -> count, '<id>:last' -> ms)
local settled_key = KEYS[6]  -- settled set (agents that said they settled, CE)
local reset_requests_key = KEYS[7]  -- reset requests (sorted set: agent id -> ms)
local voters_keys = {unpack(KEYS, 8)}  -- the voters set of each arm
-- the epoch the caller is in ('' for an unconditional, administrative reset)
local caller_epoch = ARGV[1]
local agent_id = ARGV[2]  -- '' for the admin
local agent_reset_rate = ARGV[3]  -- resets per second per agent (0: no limit)
local agent_reset_burst = ARGV[4]
local experiment_reset_rate = ARGV[5]  -- resets per second per experiment (0: no limit)
local experiment_reset_burst = ARGV[6]
-- the experiment's changes channel (changes.lua: a reset revises the document and is published and
-- announced at once, publish.lua; nothing is tied after it)
local changes_channel = ARGV[7]
-- distinct agents whose requests make a reset (f + 1 with a tolerance f; 1: any agent's request
-- resets at once, as in the papers)
local quorum = ARGV[8]
local quorum_window_ms = ARGV[9]  -- the window in which those requests must fall
-- the deadline in Redis's clock (ms; 0: none): run later, the coordinator has answered 503, and
-- the script changes nothing (deadline.lua, prepended)
local deadline_ms = ARGV[10]

if expired(deadline_ms) then return {-5, 0, 0, 0} end

if redis.call('EXISTS', meta_key) == 0 then return {-1, 0, 0, 0} end
local algorithm = redis.call('HGET', meta_key, 'algorithm')
if algorithm == 'cde' then return {-3, 0, 0, 0} end
if algorithm == 'ldp' then return {-4, 0, 0, 0} end
if agent_id ~= '' then
  -- Both limits are checked before either is recorded: a refusal changes nothing.
  local rate, burst = tonumber(agent_reset_rate), tonumber(agent_reset_burst)
  local shared_rate, shared_burst = tonumber(experiment_reset_rate), tonumber(experiment_reset_burst)
  local wait = gcra_wait(reset_rate_key, agent_id, rate, burst)
  local shared = gcra_wait(reset_rate_key, '*', shared_rate, shared_burst)
  if shared > wait then wait = shared end
  if wait > 0 then return {-2, math.ceil(wait), 0, 0} end
  gcra(reset_rate_key, agent_id, rate, burst)
  gcra(reset_rate_key, '*', shared_rate, shared_burst)
end
local epoch = tonumber(redis.call('HGET', meta_key, 'epoch'))
if caller_epoch ~= '' and tonumber(caller_epoch) ~= epoch then
  return {0, tonumber(redis.call('HGET', meta_key, 'version')), epoch, 0}
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local requests = 1
if agent_id ~= '' and tonumber(quorum) > 1 then
  -- f liars must not reset alone: f + 1 distinct agents within the window
  redis.call('ZADD', reset_requests_key, now, agent_id)
  redis.call('ZREMRANGEBYSCORE', reset_requests_key, '-inf', now - tonumber(quorum_window_ms))
  requests = redis.call('ZCARD', reset_requests_key)
  if requests < tonumber(quorum) then
    redis.call('HINCRBY', resets_key, agent_id .. ':requests', 1)
    return {2, tonumber(redis.call('HGET', meta_key, 'version')), epoch, requests}
  end
end
local n_arms = tonumber(redis.call('HGET', meta_key, 'n_arms'))
-- the settled agents, the reset requests and every voter set
redis.call('DEL', settled_key)
redis.call('DEL', reset_requests_key)
for _, voters_key in ipairs(voters_keys) do redis.call('DEL', voters_key) end
redis.call('DEL', remaining_key, eliminations_key)
for arm = 0, n_arms - 1 do redis.call('SADD', remaining_key, arm) end
epoch = redis.call('HINCRBY', meta_key, 'epoch', 1)
local version = redis.call('HINCRBY', meta_key, 'version', 1)
redis.call('HSET', meta_key, 'epoch_messages', 0, 'epoch_started_at', now, 'tied', 0,
  'p_votes', zeros(n_arms), 'pending_votes', '{}')
revise(meta_key)
publish(meta_key, remaining_key, eliminations_key, changes_channel)  -- at once: a new epoch must reach every agent
if agent_id ~= '' then
  redis.call('HINCRBY', resets_key, agent_id, 1)
  redis.call('HSET', resets_key, agent_id .. ':last', now)
end
return {1, version, epoch, requests}
