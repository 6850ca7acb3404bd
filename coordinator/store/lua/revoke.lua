-- The admin revokes one agent's token, atomically with the checks that it is an agent of this
-- experiment and that the experiment exists (never a credentials hash outliving its experiment).
-- Its credential becomes a marker no token digest equals ("revoked:<unix ms>"), so every script
-- and read that compares digests refuses the token from then on (401). Its votes, reports and
-- resets stay as they were: they were the agent's when counted (docs/DEVICES.md, "A lost device").
-- Returns {1, now_ms} (revoked now), {2, its revocation's unix ms} (revoked before: nothing
-- changes), {0, 0} (no such experiment) or {-1, 0} (no such agent in it).
local meta_key = KEYS[1]  -- meta hash
local agents_key = KEYS[2]  -- agents sorted set (agent id -> enrollment index)
local credentials_key = KEYS[3]  -- credentials hash (agent id -> SHA-256 digest of its token)
local agent_id = ARGV[1]
local now_ms = ARGV[2]

if redis.call('EXISTS', meta_key) == 0 then return {0, 0} end
if not redis.call('ZSCORE', agents_key, agent_id) then return {-1, 0} end
local stored = redis.call('HGET', credentials_key, agent_id)
if stored and string.sub(stored, 1, 8) == 'revoked:' then
  return {2, tonumber(string.sub(stored, 9))}
end
redis.call('HSET', credentials_key, agent_id, 'revoked:' .. now_ms)
return {1, tonumber(now_ms)}
