-- One agent's "settled" message (CE), authenticated and applied atomically: its local set holds one
-- arm and it votes no more (common/votes.py, GlobalState.settle). Under CE some votes are dropped,
-- so the coordinator cannot see an agent settle from its votes: the agent says it, once per settle.
-- Returns {outcome, version, epoch, added (1: the agent was not settled yet, else 0), remaining arms};
-- outcome is settled or stale_epoch (counted as a message and an ignored one; nothing else
-- changes), or an error sentinel that changes nothing and counts no message: no_experiment,
-- unauthorized (no such agent in this experiment, or a wrong token), not_ce (the experiment is not
-- CE: every vote is sent, so settling shows in the votes), rate_limited (then the second element is
-- the ms the agent must wait).
local meta_key = KEYS[1]  -- meta hash
local settled_key = KEYS[2]  -- settled set
local remaining_key = KEYS[3]  -- remaining set
local credentials_key = KEYS[4]  -- credentials hash (agent id -> SHA-256 digest of its token)
-- vote rate hash (agent id -> GCRA state, see gcra.lua, which the store prepends to this script:
-- a settled message counts against the agent's vote rate)
local vote_rate_key = KEYS[5]
local agent_id = ARGV[1]
local agent_epoch = ARGV[2]  -- the epoch the agent is in
local token_digest = ARGV[3]  -- the SHA-256 hex digest of the bearer token the message came with
local vote_rate = ARGV[4]  -- votes per second per agent (0: no limit)
local vote_burst = ARGV[5]
-- the experiment's changes channel (changes.lua: a newly settled agent revises the document and
-- may make the experiment tied)
local changes_channel = ARGV[6]

local meta = redis.call('HMGET', meta_key, 'config', 'version', 'epoch')
if not meta[1] then return {'no_experiment', 0, 0, 0, {}} end
if redis.call('HGET', credentials_key, agent_id) ~= token_digest then
  return {'unauthorized', 0, 0, 0, {}}
end
if cjson.decode(meta[1])['params']['algorithm'] ~= 'ce' then return {'not_ce', 0, 0, 0, {}} end
local wait = gcra(vote_rate_key, agent_id, tonumber(vote_rate), tonumber(vote_burst))
if wait > 0 then return {'rate_limited', math.ceil(wait), 0, 0, {}} end

local version = tonumber(meta[2])
local epoch = tonumber(meta[3])
redis.call('HINCRBY', meta_key, 'messages', 1)  -- every epoch's, as a vote
redis.call('HINCRBY', meta_key, 'epoch_messages', 1)  -- this epoch's (reset.lua zeroes it)
if tonumber(agent_epoch) ~= epoch then
  redis.call('HINCRBY', meta_key, 'ignored', 1)
  return {'stale_epoch', version, epoch, 0, redis.call('SMEMBERS', remaining_key)}
end
local added = redis.call('SADD', settled_key, agent_id)
if added == 1 then
  revise(meta_key)
  touched(changes_channel)
end
return {'settled', version, epoch, added, redis.call('SMEMBERS', remaining_key)}
