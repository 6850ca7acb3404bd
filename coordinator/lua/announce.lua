-- Announce a change of the tie status (changes.lua, prepended). Whether an experiment is tied is
-- decided by a coordinator (common/votes.py is_tied over every voter set), not by the scripts that
-- change it; `tied` in the meta hash is the status of the last announcement. A coordinator that
-- streams the experiment and finds another verdict announces it here: a new event id and 's' on the
-- changes channel, once, whichever coordinator comes first.
-- KEYS[1] meta hash. ARGV[1] the verdict (1 tied, 0 not), ARGV[2] the experiment's changes channel,
-- ARGV[3] the experiment's created_at the verdict was reached on (an experiment deleted and created
-- again is another one).
-- Returns {1, event id} if announced, {0, event id} if that verdict was already the announced one,
-- {-1, ''} if the experiment does not exist (or is another one).
local meta = redis.call('HMGET', KEYS[1], 'created_at', 'tied', 'event_id')
if not meta[1] or meta[1] ~= ARGV[3] then return {-1, ''} end
if (meta[2] or '0') == ARGV[1] then return {0, meta[3] or ''} end
redis.call('HSET', KEYS[1], 'tied', ARGV[1])
return {1, announce(KEYS[1], ARGV[2])}
