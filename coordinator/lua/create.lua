-- Create an experiment if its id is free. KEYS[1] meta hash, KEYS[2] remaining set, KEYS[3]
-- eliminations list (empty). ARGV[1] config JSON, ARGV[2] threshold, ARGV[3] n_arms, ARGV[4]
-- created_at (ms), ARGV[5] the experiment's changes channel, ARGV[6] the algorithm (the scripts
-- that take votes and reports check it: lua/vote.lua, lua/report.lua, lua/reset.lua).
-- The current epoch (0) starts now: epoch_messages 0, epoch_started_at = created_at. Its document
-- gets its first revision and its public state its first event id and publication (changes.lua
-- and publish.lua, prepended).
-- Returns 1 if created, 0 if the id exists.
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'config', ARGV[1], 'threshold', ARGV[2], 'n_arms', ARGV[3],
  'created_at', ARGV[4], 'version', 0, 'epoch', 0, 'messages', 0, 'ignored', 0,
  'epoch_messages', 0, 'epoch_started_at', ARGV[4], 'algorithm', ARGV[6])
for arm = 0, tonumber(ARGV[3]) - 1 do redis.call('SADD', KEYS[2], arm) end
revise(KEYS[1])
next_event_id(KEYS[1])
redis.call('HSET', KEYS[1], 'p_votes', zeros(tonumber(ARGV[3])), 'pending_votes', '{}',
  'p_remaining', '[]', 'p_eliminations', 0, 'p_messages', 0, 'p_ignored', 0,
  'p_epoch_messages', 0, 'p_version', 0, 'published', 0)
publish(KEYS[1], KEYS[2], KEYS[3], ARGV[5])
return 1
