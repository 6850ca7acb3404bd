-- Enroll one agent, atomically: its enrollment number, its credential and its place in the agents
-- set appear together or not at all, and only within the experiment's limits. Two ways in:
-- a ticket (ticket_digest): the ticket must be unused and unexpired, and this enrollment
-- consumes it; or open enrollment (ticket_digest ''): the per-client cap and rate apply instead.
-- Returns {index (from 1), 0} when enrolled; {0, 0} if the experiment does not exist; {-1, 0} if the
-- id is taken; {-2, max} if the experiment is full; {-3, max} if the client enrolled its maximum;
-- {-4, ms to wait} if the client enrolls too fast; {-5, 0} if the ticket is unknown (never issued,
-- used, or another experiment's); {-6, 0} if it expired; {-7, 0} if the script ran after its
-- deadline (deadline.lua). Only the first changes anything.
local meta_key = KEYS[1]  -- meta hash
local agent_seq_key = KEYS[2]  -- agent sequence
local agents_key = KEYS[3]  -- agents zset
local credentials_key = KEYS[4]  -- credentials hash
local enroll_rate_key = KEYS[5]  -- enrollment rate hash (client -> GCRA state)
local enrollers_key = KEYS[6]  -- enrollers hash (client -> agents)
local tickets_key = KEYS[7]  -- tickets zset (digest -> expiry, unix ms)
local simulated_key = KEYS[8]  -- simulated set (the agents that said they are simulated)
local leases_key = KEYS[9]  -- leases zset (agent id -> when its lease lapses, unix ms)
-- stream secrets hash (agent id -> the secret in its activation stream's name): written with the
-- agent, so that nobody sees the agent enrolled without it (the load generator names the streams
-- it writes from it; the coordinator creates the stream after this script)
local stream_secrets_key = KEYS[10]
local agent_id = ARGV[1]  -- the new agent id
local token_digest = ARGV[2]  -- the SHA-256 digest of its token
local client = ARGV[3]  -- the client's address
local max_agents = ARGV[4]  -- most agents in the experiment (0: no limit)
local max_agents_per_client = ARGV[5]  -- most agents per client (0: no limit)
local enroll_rate = ARGV[6]  -- enrollments per second per client (0: no limit)
local enroll_burst = ARGV[7]
local ticket_digest = ARGV[8]  -- the SHA-256 digest of the ticket ('' for open enrollment)
-- the experiment's changes channel (changes.lua: an enrollment revises the document; it may reopen
-- a tie announced as such, or, as the agents reach the threshold, make the experiment tied, so it
-- is published then)
local changes_channel = ARGV[9]
-- the deadline in Redis's clock (ms; 0: none): run later, the coordinator has answered 503, and
-- the script changes nothing (deadline.lua, prepended)
local deadline_ms = ARGV[10]
local simulated = ARGV[11]  -- '1': the agent says it is simulated (the agent service's), else '0'
-- the lease's length in ms ('0': no lease): the agent asked for one (the agent service's agents
-- do), so it leaves unless its host renews it in time (renew.lua, lapse.lua)
local lease_ms = ARGV[12]
local stream_secret = ARGV[13]  -- the secret in its activation stream's name (redis_keys)

if expired(deadline_ms) then return {-7, 0} end

if redis.call('EXISTS', meta_key) == 0 then return {0, 0} end
if ticket_digest ~= '' then
  local expiry = tonumber(redis.call('ZSCORE', tickets_key, ticket_digest))
  if not expiry then return {-5, 0} end
  local clock = redis.call('TIME')
  if expiry <= tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) then
    return {-6, 0}
  end
end
local most = tonumber(max_agents)
if most > 0 and redis.call('ZCARD', agents_key) >= most then return {-2, most} end
if redis.call('HEXISTS', credentials_key, agent_id) == 1 then return {-1, 0} end
if ticket_digest == '' then
  local most_per_client = tonumber(max_agents_per_client)
  if most_per_client > 0
    and (tonumber(redis.call('HGET', enrollers_key, client)) or 0) >= most_per_client then
    return {-3, most_per_client}
  end
  local wait = gcra(enroll_rate_key, client, tonumber(enroll_rate), tonumber(enroll_burst))
  if wait > 0 then return {-4, math.ceil(wait)} end
  redis.call('HINCRBY', enrollers_key, client, 1)
else
  redis.call('ZREM', tickets_key, ticket_digest)
end
local index = redis.call('INCR', agent_seq_key)
redis.call('HSET', credentials_key, agent_id, token_digest)
redis.call('ZADD', agents_key, index, agent_id)
redis.call('HSET', stream_secrets_key, agent_id, stream_secret)
if simulated == '1' then redis.call('SADD', simulated_key, agent_id) end
if tonumber(lease_ms) > 0 then
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  redis.call('ZADD', leases_key, now + tonumber(lease_ms), agent_id)
end
revise(meta_key)
local tied = redis.call('HGET', meta_key, 'tied')
if tied == '1'
  or redis.call('ZCARD', agents_key) == tonumber(redis.call('HGET', meta_key, 'threshold')) then
  touched(changes_channel)
end
return {index, 0}
