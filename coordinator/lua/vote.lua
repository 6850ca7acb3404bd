-- One vote, applied atomically: the rule of common/votes.py (decide_vote) in Lua.
-- KEYS[1] meta hash, KEYS[2] remaining set, KEYS[3] voters set of the arm, KEYS[4] eliminations
-- list, KEYS[5] enrolled agents zset.
-- ARGV[1] agent id, ARGV[2] arm index, ARGV[3] the epoch the agent is in, ARGV[4] now (ms).
-- Returns {outcome, version, epoch, votes on the arm}; outcome is one of counted, eliminated,
-- duplicate, arm_out, last_arm, stale_epoch, or an error sentinel: no_experiment, bad_arm,
-- unknown_agent (those change nothing and count no message).
local threshold = tonumber(redis.call('HGET', KEYS[1], 'threshold'))
if not threshold then return {'no_experiment', 0, 0, 0} end
local n_arms = tonumber(redis.call('HGET', KEYS[1], 'n_arms'))
local arm = tonumber(ARGV[2])
if not arm or arm < 0 or arm >= n_arms or arm ~= math.floor(arm) then
  return {'bad_arm', 0, 0, 0}
end
if not redis.call('ZSCORE', KEYS[5], ARGV[1]) then return {'unknown_agent', 0, 0, 0} end

local version = tonumber(redis.call('HGET', KEYS[1], 'version'))
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch'))
redis.call('HINCRBY', KEYS[1], 'messages', 1)
local function ignored(outcome)
  redis.call('HINCRBY', KEYS[1], 'ignored', 1)
  return {outcome, version, epoch, redis.call('SCARD', KEYS[3])}
end
if tonumber(ARGV[3]) ~= epoch then return ignored('stale_epoch') end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 0 then return ignored('arm_out') end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return ignored('duplicate') end

redis.call('SADD', KEYS[3], ARGV[1])
local votes = redis.call('SCARD', KEYS[3])
if votes < threshold then return {'counted', version, epoch, votes} end
if redis.call('SCARD', KEYS[2]) <= 1 then return {'last_arm', version, epoch, votes} end
redis.call('SREM', KEYS[2], ARGV[2])
version = redis.call('HINCRBY', KEYS[1], 'version', 1)
local order = redis.call('LLEN', KEYS[4]) + 1
redis.call('RPUSH', KEYS[4], cjson.encode({arm = arm, votes = votes, time = tonumber(ARGV[4]), order = order}))
return {'eliminated', version, epoch, votes}
