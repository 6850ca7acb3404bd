-- Enroll one agent, atomically: its enrollment number, its credential and its place in the agents
-- set appear together or not at all. KEYS[1] meta hash, KEYS[2] agent sequence, KEYS[3] agents
-- zset, KEYS[4] credentials hash. ARGV[1] the new agent id, ARGV[2] the SHA-256 digest of its token.
-- Returns the enrollment number (from 1); 0 if the experiment does not exist; -1 if the id is taken.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then return -1 end
local index = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], index, ARGV[1])
return index
