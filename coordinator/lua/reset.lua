-- DSER4's global reset: every arm back, every vote cleared, a new epoch. Applied only if the caller
-- is still in the current epoch, so that concurrent resets from several agents make one new epoch.
-- KEYS[1] meta hash, KEYS[2] remaining set, KEYS[3] eliminations list, KEYS[4..] voters set of each
-- arm. ARGV[1] the epoch the caller is in ('' for an unconditional, administrative reset).
-- Returns {reset (1/0), version, epoch}; {-1, 0, 0} if the experiment does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0, 0} end
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch'))
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= epoch then
  return {0, tonumber(redis.call('HGET', KEYS[1], 'version')), epoch}
end
local n_arms = tonumber(redis.call('HGET', KEYS[1], 'n_arms'))
for i = 4, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('DEL', KEYS[2], KEYS[3])
for arm = 0, n_arms - 1 do redis.call('SADD', KEYS[2], arm) end
epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
local version = redis.call('HINCRBY', KEYS[1], 'version', 1)
return {1, version, epoch}
