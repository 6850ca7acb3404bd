-- An agent leaves its experiment with its own token (DELETE /v1/agents/me: its host stopped),
-- atomically: it is no longer enrolled (out of the agents set, so the load generator no longer
-- feeds it and the enrollment limit frees its place), its token stops working (its credential
-- becomes a tombstone that no digest equals: the id is never enrolled again), and it is no longer
-- counted as simulated. What it said stands: its votes (voter sets), its settled message and its
-- CDE report stay counted, and so does the agent in N, the number of agents the certificate and
-- the tie verdict count, for this epoch: an agent that voted may have erred (the certificate's
-- Bin(N - f, p) counts it), and it may still hold arms. The meta hash's `departed` field,
-- '<epoch>:<agents>', counts those agents (coordinator/store/state.py departed_of); a reset (a new
-- epoch, its voter sets empty) drops them from N. An agent that said nothing this epoch leaves N
-- at once. Returns {1, 1} when it left and still counts in N, {1, 0} when it left and does not;
-- {0, 0} if the experiment does not exist; {-1, 0} if the token is not this experiment's agent's
-- (or it left already); {-7, 0} if the script ran after its deadline (deadline.lua). Only {1, _}
-- changes anything.
local meta_key = KEYS[1]  -- meta hash
local agents_key = KEYS[2]  -- agents zset
local credentials_key = KEYS[3]  -- credentials hash (agent id -> SHA-256 digest of its token)
local settled_key = KEYS[4]  -- settled set (CE)
local reporters_key = KEYS[5]  -- reporters set (CDE)
local simulated_key = KEYS[6]  -- simulated set
local voters_keys = {unpack(KEYS, 7)}  -- each arm's voter set, in arm order
local agent_id = ARGV[1]
local token_digest = ARGV[2]  -- the SHA-256 hex digest of the bearer token it came with
-- the experiment's changes channel (changes.lua, prepended: the document changes, and fewer
-- agents may turn the experiment tied)
local changes_channel = ARGV[3]
local deadline_ms = ARGV[4]  -- as in enroll.lua (deadline.lua, prepended)

if expired(deadline_ms) then return {-7, 0} end
local epoch = redis.call('HGET', meta_key, 'epoch')
if not epoch then return {0, 0} end
if redis.call('HGET', credentials_key, agent_id) ~= token_digest then return {-1, 0} end

local counted = redis.call('SISMEMBER', settled_key, agent_id) == 1
  or redis.call('SISMEMBER', reporters_key, agent_id) == 1
for _, voters_key in ipairs(voters_keys) do
  if counted then break end
  counted = redis.call('SISMEMBER', voters_key, agent_id) == 1
end
redis.call('ZREM', agents_key, agent_id)
redis.call('HSET', credentials_key, agent_id, 'left')
redis.call('SREM', simulated_key, agent_id)
if counted then
  local departed = redis.call('HGET', meta_key, 'departed')
  local at, count = string.match(departed or '', '^(%d+):(%d+)$')
  local agents = (at == epoch) and tonumber(count) + 1 or 1
  redis.call('HSET', meta_key, 'departed', epoch .. ':' .. agents)
end
revise(meta_key)
touched(changes_channel)
return {1, counted and 1 or 0}
