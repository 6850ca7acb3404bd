-- Create an experiment if its id is free.
-- The current epoch (0) starts now: epoch_messages 0, epoch_started_at = created_at. Its document
-- gets its first revision and its public state its first event id and publication (changes.lua
-- and publish.lua, prepended).
-- Returns 1 if created, 0 if the id exists.
local meta_key = KEYS[1]  -- meta hash
local remaining_key = KEYS[2]  -- remaining set
local eliminations_key = KEYS[3]  -- eliminations list (empty)
local config = ARGV[1]  -- config JSON
local threshold = ARGV[2]
local n_arms = ARGV[3]
local created_at = ARGV[4]  -- ms
local changes_channel = ARGV[5]  -- the experiment's changes channel
-- the algorithm (the scripts that take votes and reports check it: vote.lua, report.lua,
-- ldp_report.lua, reset.lua; LDP's publications carry the ones too, p_ones)
local algorithm = ARGV[6]

if redis.call('EXISTS', meta_key) == 1 then return 0 end
redis.call('HSET', meta_key, 'config', config, 'threshold', threshold, 'n_arms', n_arms,
  'created_at', created_at, 'version', 0, 'epoch', 0, 'messages', 0, 'ignored', 0,
  'epoch_messages', 0, 'epoch_started_at', created_at, 'algorithm', algorithm)
for arm = 0, tonumber(n_arms) - 1 do redis.call('SADD', remaining_key, arm) end
revise(meta_key)
next_event_id(meta_key)
redis.call('HSET', meta_key, 'p_votes', zeros(tonumber(n_arms)), 'pending_votes', '{}',
  'p_remaining', '[]', 'p_eliminations', 0, 'p_messages', 0, 'p_ignored', 0,
  'p_epoch_messages', 0, 'p_version', 0, 'published', 0)
if algorithm == 'ldp' then  -- `decided`: the publication last decided (ldp_decide.lua)
  redis.call('HSET', meta_key, 'p_ones', zeros(tonumber(n_arms)), 'pending_ones', '{}',
    'decided', 0)
end
publish(meta_key, remaining_key, eliminations_key, changes_channel)
return 1
