-- One agent's "settled" message (CE), authenticated and applied atomically: its local set holds one
-- arm and it votes no more (common/votes.py, GlobalState.settle). Under CE some votes are dropped,
-- so the coordinator cannot see an agent settle from its votes: the agent says it, once per settle.
-- A newly settled agent may make the experiment tied: it is published as an elimination is, at the
-- first tick of the cadence after it (publish.lua, prepended with changes.lua: `settled_changed`),
-- so that every coordinator's tie verdict, kept under the published counters (reads.py), is
-- decided again by then.
-- Returns {outcome, version, epoch, added (1: the agent was not settled yet, else 0), remaining
-- arms}, the version and the remaining arms as published (a reply shows no more than a reader
-- sees); outcome is settled or stale_epoch (counted as a message and an ignored one; nothing else
-- changes), or an error sentinel that changes nothing and counts no message: expired (run after its
-- deadline: deadline.lua), no_experiment,
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
local eliminations_key = KEYS[6]  -- eliminations list (publish.lua publishes its length)
local agent_id = ARGV[1]
local agent_epoch = ARGV[2]  -- the epoch the agent is in
local token_digest = ARGV[3]  -- the SHA-256 hex digest of the bearer token the message came with
local vote_rate = ARGV[4]  -- votes per second per agent (0: no limit)
local vote_burst = ARGV[5]
-- the experiment's changes channel (changes.lua: a newly settled agent revises the document and
-- may make the experiment tied)
local changes_channel = ARGV[6]
local now_ms = ARGV[7]
-- the publication batch and its cadence (ms) (publish.lua: a newly settled agent is published at
-- the cadence's next tick)
local publish_batch = ARGV[8]
local publish_cadence_ms = ARGV[9]
-- the deadline in Redis's clock (ms; 0: none): run later, the coordinator has answered 503, and
-- the script changes nothing (deadline.lua, prepended)
local deadline_ms = ARGV[10]

if expired(deadline_ms) then return {'expired', 0, 0, 0, {}} end

local meta = redis.call('HMGET', meta_key, 'config', 'version', 'epoch')
if not meta[1] then return {'no_experiment', 0, 0, 0, {}} end
if redis.call('HGET', credentials_key, agent_id) ~= token_digest then
  return {'unauthorized', 0, 0, 0, {}}
end
if cjson.decode(meta[1])['params']['algorithm'] ~= 'ce' then return {'not_ce', 0, 0, 0, {}} end
local wait = gcra(vote_rate_key, agent_id, tonumber(vote_rate), tonumber(vote_burst))
if wait > 0 then return {'rate_limited', math.ceil(wait), 0, 0, {}} end

local epoch = tonumber(meta[3])
local now = tonumber(now_ms)
redis.call('HINCRBY', meta_key, 'messages', 1)  -- every epoch's, as a vote
redis.call('HINCRBY', meta_key, 'epoch_messages', 1)  -- this epoch's (reset.lua zeroes it)
-- the reply: the publication (taken now if this message makes one due)
local function reply(outcome, added)
  if due(meta_key, now, tonumber(publish_batch), tonumber(publish_cadence_ms)) then
    publish(meta_key, remaining_key, eliminations_key, changes_channel)
  end
  local published = redis.call('HMGET', meta_key, 'p_version', 'p_remaining')
  local remaining
  if published[2] then
    remaining = cjson.decode(published[2])
  else  -- never published (created before publications): the live set
    remaining = redis.call('SMEMBERS', remaining_key)
  end
  return {outcome, tonumber(published[1] or meta[2]), epoch, added, remaining}
end
if tonumber(agent_epoch) ~= epoch then
  redis.call('HINCRBY', meta_key, 'ignored', 1)
  return reply('stale_epoch', 0)
end
local added = redis.call('SADD', settled_key, agent_id)
if added == 1 then
  revise(meta_key)
  settled_changed(meta_key, now)
end
return reply('settled', added)
