-- DSER4's global reset: every arm back, every vote cleared, a new epoch (epoch_messages 0,
-- epoch_started_at now in Redis's clock; `messages` stays the total of every epoch). Applied only if
-- the caller is still in the current epoch, so that concurrent resets from several agents make one
-- new epoch.
-- An agent's reset is rate-limited, per agent and per experiment (gcra.lua, prepended by store.py),
-- and recorded per agent for the admin; an admin's reset is neither.
-- KEYS[1] meta hash, KEYS[2] remaining set, KEYS[3] eliminations list, KEYS[4] reset rate hash
-- (agent id or '*' -> GCRA state), KEYS[5] resets hash (agent id -> count, '<id>:last' -> ms),
-- KEYS[6] settled set (agents that said they settled, CE), KEYS[7] reset requests (sorted set:
-- agent id -> ms), KEYS[8..] voters set of each arm.
-- ARGV[1] the epoch the caller is in ('' for an unconditional, administrative reset), ARGV[2] the
-- agent id ('' for the admin), ARGV[3] resets per second per agent, ARGV[4] its burst, ARGV[5]
-- resets per second per experiment, ARGV[6] its burst (rate 0: no limit), ARGV[7] the experiment's
-- changes channel (changes.lua: a reset revises the document and is published and announced at
-- once, publish.lua; nothing is tied after it), ARGV[8] the quorum: distinct agents whose requests make a reset (f + 1 with a
-- tolerance f; 1: any agent's request resets at once, as in the papers), ARGV[9] the window (ms)
-- in which those requests must fall.
-- Returns {reset (1/0), version, epoch, requests}; {2, version, epoch, requests} if the request is
-- recorded and the quorum not reached yet; {-1, 0, 0, 0} if the experiment does not exist; {-2, ms
-- to wait, 0, 0} if the agent or the experiment resets too fast; {-3, 0, 0, 0} if it is a CDE
-- experiment, which is never reset: each agent reports once per experiment, and a new epoch would
-- let it report again (nothing changes).
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0, 0, 0} end
if redis.call('HGET', KEYS[1], 'algorithm') == 'cde' then return {-3, 0, 0, 0} end
local agent = ARGV[2]
if agent ~= '' then
  -- Both limits are checked before either is recorded: a refusal changes nothing.
  local rate, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
  local wait = gcra_wait(KEYS[4], agent, rate, burst)
  local shared = gcra_wait(KEYS[4], '*', tonumber(ARGV[5]), tonumber(ARGV[6]))
  if shared > wait then wait = shared end
  if wait > 0 then return {-2, math.ceil(wait), 0, 0} end
  gcra(KEYS[4], agent, rate, burst)
  gcra(KEYS[4], '*', tonumber(ARGV[5]), tonumber(ARGV[6]))
end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch'))
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= epoch then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'version')), epoch, 0}
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local requests = 1
if agent ~= '' and tonumber(ARGV[8]) > 1 then
  -- f liars must not reset alone: f + 1 distinct agents within the window
  redis.call('ZADD', KEYS[7], now, agent)
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - tonumber(ARGV[9]))
  requests = redis.call('ZCARD', KEYS[7])
  if requests < tonumber(ARGV[8]) then
    redis.call('HINCRBY', KEYS[5], agent .. ':requests', 1)
    return {2, tonumber(redis.call('HGET', KEYS[1], 'version')), epoch, requests}
  end
end
local n_arms = tonumber(redis.call('HGET', KEYS[1], 'n_arms'))
for i = 6, #KEYS do redis.call('DEL', KEYS[i]) end  -- settled agents and every voter set
redis.call('DEL', KEYS[2], KEYS[3])
for arm = 0, n_arms - 1 do redis.call('SADD', KEYS[2], arm) end
epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'epoch_messages', 0, 'epoch_started_at', now, 'tied', 0,
  'p_votes', zeros(n_arms), 'pending_votes', '{}')
revise(KEYS[1])
publish(KEYS[1], KEYS[2], KEYS[3], ARGV[7])  -- at once: a new epoch must reach every agent
if agent ~= '' then
  redis.call('HINCRBY', KEYS[5], agent, 1)
  redis.call('HSET', KEYS[5], agent .. ':last', now)
end
return {1, version, epoch, requests}
