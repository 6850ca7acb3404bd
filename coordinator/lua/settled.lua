-- One agent's "settled" message (CE), authenticated and applied atomically: its local set holds one
-- arm and it votes no more (common/votes.py, GlobalState.settle). Under CE some votes are dropped,
-- so the coordinator cannot see an agent settle from its votes: the agent says it, once per settle.
-- KEYS[1] meta hash, KEYS[2] settled set, KEYS[3] remaining set, KEYS[4] credentials hash (agent id
-- -> SHA-256 digest of its token), KEYS[5] vote rate hash (agent id -> GCRA state, see gcra.lua,
-- which store.py prepends to this script: a settled message counts against the agent's vote rate).
-- ARGV[1] agent id, ARGV[2] the epoch the agent is in, ARGV[3] the SHA-256 hex digest of the bearer
-- token the message came with, ARGV[4] votes per second per agent (0: no limit), ARGV[5] the burst,
-- ARGV[6] the experiment's changes channel (changes.lua: a newly settled agent revises the document
-- and may make the experiment tied).
-- Returns {outcome, version, epoch, added (1: the agent was not settled yet, else 0), remaining arms};
-- outcome is settled or stale_epoch (counted as a message and an ignored one; nothing else
-- changes), or an error sentinel that changes nothing and counts no message: no_experiment,
-- unauthorized (no such agent in this experiment, or a wrong token), not_ce (the experiment is not
-- CE: every vote is sent, so settling shows in the votes), rate_limited (then the second element is
-- the ms the agent must wait).
local meta = redis.call('HMGET', KEYS[1], 'config', 'version', 'epoch')
if not meta[1] then return {'no_experiment', 0, 0, 0, {}} end
if redis.call('HGET', KEYS[4], ARGV[1]) ~= ARGV[3] then return {'unauthorized', 0, 0, 0, {}} end
if cjson.decode(meta[1])['params']['algorithm'] ~= 'ce' then return {'not_ce', 0, 0, 0, {}} end
local wait = gcra(KEYS[5], ARGV[1], tonumber(ARGV[4]), tonumber(ARGV[5]))
if wait > 0 then return {'rate_limited', math.ceil(wait), 0, 0, {}} end

local version = tonumber(meta[2])
local epoch = tonumber(meta[3])
redis.call('HINCRBY', KEYS[1], 'messages', 1)  -- every epoch's, as a vote
redis.call('HINCRBY', KEYS[1], 'epoch_messages', 1)  -- this epoch's (reset.lua zeroes it)
if tonumber(ARGV[2]) ~= epoch then
  redis.call('HINCRBY', KEYS[1], 'ignored', 1)
  return {'stale_epoch', version, epoch, 0, redis.call('SMEMBERS', KEYS[3])}
end
local added = redis.call('SADD', KEYS[2], ARGV[1])
if added == 1 then
  revise(KEYS[1])
  touched(ARGV[6])
end
return {'settled', version, epoch, added, redis.call('SMEMBERS', KEYS[3])}
