-- Enroll one agent, atomically: its enrollment number, its credential and its place in the agents
-- set appear together or not at all, and only within the experiment's limits.
-- KEYS[1] meta hash, KEYS[2] agent sequence, KEYS[3] agents zset, KEYS[4] credentials hash,
-- KEYS[5] enrollment rate hash (client -> GCRA state), KEYS[6] enrollers hash (client -> agents).
-- ARGV[1] the new agent id, ARGV[2] the SHA-256 digest of its token, ARGV[3] the client's address,
-- ARGV[4] most agents in the experiment, ARGV[5] most agents per client (0: no limit for either),
-- ARGV[6] enrollments per second per client, ARGV[7] burst (rate 0: no limit).
-- Returns {index (from 1), 0} when enrolled; {0, 0} if the experiment does not exist; {-1, 0} if the
-- id is taken; {-2, max} if the experiment is full; {-3, max} if the client enrolled its maximum;
-- {-4, ms to wait} if the client enrolls too fast. Only the first changes anything.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local max_agents = tonumber(ARGV[4])
if max_agents > 0 and redis.call('ZCARD', KEYS[3]) >= max_agents then return {-2, max_agents} end
local max_client = tonumber(ARGV[5])
if max_client > 0 and (tonumber(redis.call('HGET', KEYS[6], ARGV[3])) or 0) >= max_client then
  return {-3, max_client}
end
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then return {-1, 0} end
local wait = gcra(KEYS[5], ARGV[3], tonumber(ARGV[6]), tonumber(ARGV[7]))
if wait > 0 then return {-4, math.ceil(wait)} end
local index = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], index, ARGV[1])
redis.call('HINCRBY', KEYS[6], ARGV[3], 1)
return {index, 0}
