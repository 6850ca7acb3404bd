-- Take a publication if one is due (publish.lua, prepended with changes.lua): run before each full
-- read of an experiment's public documents, so that a reader sees the global set change at its
-- cadence's tick even when no vote comes after it.
-- Returns 1 if a publication was taken, 0 if none was due, -1 if the experiment does not exist.
local meta_key = KEYS[1]  -- meta hash
local remaining_key = KEYS[2]  -- remaining set
local eliminations_key = KEYS[3]  -- eliminations list
-- the voter set of each arm, given only for an experiment that has never been published (created
-- before publications existed): its counts are then taken from them
local voters_keys = {unpack(KEYS, 4)}
local now_ms = ARGV[1]
local publish_batch = ARGV[2]
local publish_cadence_ms = ARGV[3]
local changes_channel = ARGV[4]  -- the experiment's changes channel

if redis.call('EXISTS', meta_key) == 0 then return -1 end
if not redis.call('HGET', meta_key, 'p_votes') then
  if #voters_keys == 0 then return 0 end
  local votes = {}
  for _, voters_key in ipairs(voters_keys) do votes[#votes + 1] = redis.call('SCARD', voters_key) end
  redis.call('HSET', meta_key, 'p_votes', cjson.encode(votes), 'pending_votes', '{}')
  publish(meta_key, remaining_key, eliminations_key, changes_channel)
  return 1
end
if not due(meta_key, tonumber(now_ms), tonumber(publish_batch), tonumber(publish_cadence_ms)) then
  return 0
end
publish(meta_key, remaining_key, eliminations_key, changes_channel)
return 1
