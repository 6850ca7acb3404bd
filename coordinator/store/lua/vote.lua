-- One vote, authenticated and applied atomically: the rule of common/votes.py (decide_vote) in Lua.
-- Returns {outcome, version, epoch, votes on the arm}, the version and the votes as published
-- (publish.lua: a reply shows no more than a reader sees); outcome is one of counted, eliminated,
-- duplicate, arm_out, last_arm, stale_epoch, or an error sentinel that changes nothing and counts
-- no message: expired (run after its deadline: deadline.lua), no_experiment, unauthorized (no such agent in this experiment, or a wrong token),
-- not_voting (a CDE experiment: its agents send one report each, lua/report.lua), crowd (an LDP
-- experiment: its devices send private reports, lua/ldp_report.lua),
-- bad_arm (then the second element is the number of arms), rate_limited (then the second element
-- is the ms the agent must wait). Any other vote is a message: one more in `messages` (every
-- epoch's) and in `epoch_messages` (this epoch's; reset.lua zeroes it). A vote against the last
-- arm (identified) is ignored: last_arm. A replayed vote (same
-- agent, arm and epoch) is a duplicate, even once the arm is out (so that its replies cannot time
-- the elimination): it counts as a message and an ignored one, and changes no vote count, arm or
-- version. An elimination keeps only the settled agents that voted against the
-- arm that left (GlobalState.vote): a settled agent that did not may have held that arm, and
-- restarts.
local meta_key = KEYS[1]  -- meta hash
local remaining_key = KEYS[2]  -- remaining set
local voters_key = KEYS[3]  -- voters set of the arm
local eliminations_key = KEYS[4]  -- eliminations list
local credentials_key = KEYS[5]  -- credentials hash (agent id -> SHA-256 digest of its token)
-- vote rate hash (agent id -> GCRA state, see gcra.lua, which the store prepends to this script)
local vote_rate_key = KEYS[6]
local settled_key = KEYS[7]  -- settled set (agents that said they settled, CE)
local agent_id = ARGV[1]
local arm_index = ARGV[2]
local agent_epoch = ARGV[3]  -- the epoch the agent is in
local now_ms = ARGV[4]
local token_digest = ARGV[5]  -- the SHA-256 hex digest of the bearer token the vote came with
local vote_rate = ARGV[6]  -- votes per second per agent (0: no limit)
local vote_burst = ARGV[7]  -- the votes an agent may send at once
-- the experiment's changes channel (changes.lua, prepended with gcra.lua: a publication revises
-- the document and may change the tie status; one with an elimination is announced)
local changes_channel = ARGV[8]
-- when the agent's epoch began ('' if it does not say): an epoch's identity, with its number (an
-- epoch a failover lost and a later one may share a number, never a start)
local agent_epoch_started_at = ARGV[9]
-- the publication batch and its cadence (ms) (publish.lua, prepended: a vote is published with
-- its batch)
local publish_batch = ARGV[10]
local publish_cadence_ms = ARGV[11]
-- the deadline in Redis's clock (ms; 0: none): run later, the coordinator has answered 503, and
-- the script changes nothing (deadline.lua, prepended)
local deadline_ms = ARGV[12]

if expired(deadline_ms) then return {'expired', 0, 0, 0} end

local meta = redis.call('HMGET', meta_key, 'threshold', 'n_arms', 'version', 'epoch',
  'epoch_started_at', 'algorithm')
local threshold = tonumber(meta[1])
if not threshold then return {'no_experiment', 0, 0, 0} end
-- A plain (not constant-time) comparison is acceptable here: what is compared is the SHA-256 digest
-- of a random 192-bit secret, not the secret. Timing can at best reveal a prefix of the stored
-- digest, and a matching prefix of a digest does not help find a token that hashes to it.
if redis.call('HGET', credentials_key, agent_id) ~= token_digest then
  return {'unauthorized', 0, 0, 0}
end
if meta[6] == 'cde' then return {'not_voting', 0, 0, 0} end
if meta[6] == 'ldp' then return {'crowd', 0, 0, 0} end
local n_arms = tonumber(meta[2])
local arm = tonumber(arm_index)
if not arm or arm < 0 or arm >= n_arms or arm ~= math.floor(arm) then
  return {'bad_arm', n_arms, 0, 0}
end
-- Every well-formed vote of an authenticated agent counts against its rate, counted or ignored.
local wait = gcra(vote_rate_key, agent_id, tonumber(vote_rate), tonumber(vote_burst))
if wait > 0 then return {'rate_limited', math.ceil(wait), 0, 0} end

local epoch = tonumber(meta[4])
local now = tonumber(now_ms)
redis.call('HINCRBY', meta_key, 'messages', 1)  -- every epoch's
redis.call('HINCRBY', meta_key, 'epoch_messages', 1)  -- this epoch's (reset.lua zeroes it)
-- the reply: the publication (taken now if this message makes one due)
local function reply(outcome)
  if due(meta_key, now, tonumber(publish_batch), tonumber(publish_cadence_ms)) then
    publish(meta_key, remaining_key, eliminations_key, changes_channel)
  end
  local published = redis.call('HMGET', meta_key, 'p_version', 'p_votes')
  local votes = published[2] and cjson.decode(published[2])[arm + 1] or 0
  return {outcome, tonumber(published[1] or meta[3]), epoch, votes}
end
local function ignored(outcome)
  redis.call('HINCRBY', meta_key, 'ignored', 1)
  return reply(outcome)
end
if tonumber(agent_epoch) ~= epoch then return ignored('stale_epoch') end
if agent_epoch_started_at ~= '' and meta[5] and agent_epoch_started_at ~= meta[5] then
  return ignored('stale_epoch')
end
if redis.call('SISMEMBER', voters_key, agent_id) == 1 then return ignored('duplicate') end
if redis.call('SISMEMBER', remaining_key, arm_index) == 0 then return ignored('arm_out') end
-- identified: the last arm's answer is final, a vote against it is ignored (and says so)
if redis.call('SCARD', remaining_key) <= 1 then return ignored('last_arm') end

redis.call('SADD', voters_key, agent_id)
-- it votes: whatever it said, it has not settled (a settled claim counts only while it keeps still)
redis.call('SREM', settled_key, agent_id)
pending_vote(meta_key, arm)
local votes = redis.call('SCARD', voters_key)
if votes < threshold then return reply('counted') end
redis.call('SREM', remaining_key, arm_index)
redis.call('SINTERSTORE', settled_key, settled_key, voters_key)
redis.call('HINCRBY', meta_key, 'version', 1)
local order = redis.call('LLEN', eliminations_key) + 1
redis.call('RPUSH', eliminations_key, cjson.encode({arm = arm, votes = votes, time = now, order = order}))
changed(meta_key, now)
touched(changes_channel)  -- the coordinators that stream it read it again: they learn when it is due
return reply('eliminated')
