-- Take a publication if one is due (publish.lua, prepended with changes.lua): run before each full
-- read of an experiment's public documents, so that a reader sees the global set change at its
-- cadence's tick even when no vote comes after it.
-- KEYS[1] meta hash, KEYS[2] remaining set, KEYS[3] eliminations list, KEYS[4..] the voter set of
-- each arm, given only for an experiment that has never been published (created before
-- publications existed): its counts are then taken from them.
-- ARGV[1] now (ms), ARGV[2] batch, ARGV[3] cadence (ms), ARGV[4] the experiment's changes channel.
-- Returns 1 if a publication was taken, 0 if none was due, -1 if the experiment does not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if not redis.call('HGET', KEYS[1], 'p_votes') then
  if #KEYS < 4 then return 0 end
  local votes = {}
  for i = 4, #KEYS do votes[#votes + 1] = redis.call('SCARD', KEYS[i]) end
  redis.call('HSET', KEYS[1], 'p_votes', cjson.encode(votes), 'pending_votes', '{}')
  publish(KEYS[1], KEYS[2], KEYS[3], ARGV[4])
  return 1
end
if not due(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])) then return 0 end
publish(KEYS[1], KEYS[2], KEYS[3], ARGV[4])
return 1
