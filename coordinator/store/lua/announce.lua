-- Announce a change of the tie status (changes.lua, prepended). Whether an experiment is tied is
-- decided by a coordinator (common/votes.py is_tied over every voter set), not by the scripts that
-- change it; `tied` in the meta hash is the status of the last announcement. A coordinator that
-- streams the experiment and finds another verdict announces it here: a new event id and 's' on the
-- changes channel, once, whichever coordinator comes first.
-- Returns {1, event id} if announced, {0, event id} if that verdict was already the announced one,
-- {-1, ''} if the experiment does not exist (or is another one).
local meta_key = KEYS[1]  -- meta hash
local tied = ARGV[1]  -- the verdict (1 tied, 0 not)
local changes_channel = ARGV[2]  -- the experiment's changes channel
-- the experiment's created_at the verdict was reached on (an experiment deleted and created again
-- is another one)
local created_at = ARGV[3]

local meta = redis.call('HMGET', meta_key, 'created_at', 'tied', 'event_id')
if not meta[1] or meta[1] ~= created_at then return {-1, ''} end
if (meta[2] or '0') == tied then return {0, meta[3] or ''} end
redis.call('HSET', meta_key, 'tied', tied)
return {1, announce(meta_key, changes_channel)}
