-- One vote, authenticated and applied atomically: the rule of common/votes.py (decide_vote) in Lua.
-- KEYS[1] meta hash, KEYS[2] remaining set, KEYS[3] voters set of the arm, KEYS[4] eliminations
-- list, KEYS[5] credentials hash (agent id -> SHA-256 digest of its token), KEYS[6] vote rate hash
-- (agent id -> GCRA state, see gcra.lua, which store.py prepends to this script), KEYS[7] settled
-- set (agents that said they settled, CE).
-- ARGV[1] agent id, ARGV[2] arm index, ARGV[3] the epoch the agent is in, ARGV[4] now (ms),
-- ARGV[5] the SHA-256 hex digest of the bearer token the vote came with, ARGV[6] votes per second
-- per agent (0: no limit), ARGV[7] the burst of votes an agent may send at once, ARGV[8] the
-- experiment's changes channel (changes.lua, prepended with gcra.lua: a publication revises the
-- document and may change the tie status; one with an elimination is announced), ARGV[9] when the agent's
-- epoch began ('' if it does not say): an epoch's identity, with its number (an epoch a failover
-- lost and a later one may share a number, never a start), ARGV[10] the publication batch and
-- ARGV[11] its cadence (ms) (publish.lua, prepended: a vote is published with its batch).
-- Returns {outcome, version, epoch, votes on the arm}, the version and the votes as published
-- (publish.lua: a reply shows no more than a reader sees); outcome is one of counted, eliminated,
-- duplicate, arm_out, last_arm, stale_epoch, or an error sentinel that changes nothing and counts
-- no message: no_experiment, unauthorized (no such agent in this experiment, or a wrong token),
-- not_voting (a CDE experiment: its agents send one report each, lua/report.lua),
-- bad_arm (then the second element is the number of arms), rate_limited (then the second element
-- is the ms the agent must wait). Any other vote is a message: one more in `messages` (every
-- epoch's) and in `epoch_messages` (this epoch's; reset.lua zeroes it). A vote against the last
-- arm (identified) is ignored: last_arm. A replayed vote (same
-- agent, arm and epoch) is a duplicate, even once the arm is out (so that its replies cannot time
-- the elimination): it counts as a message and an ignored one, and changes no vote count, arm or
-- version. An elimination keeps only the settled agents that voted against the
-- arm that left (GlobalState.vote): a settled agent that did not may have held that arm, and
-- restarts.
local meta = redis.call('HMGET', KEYS[1], 'threshold', 'n_arms', 'version', 'epoch', 'epoch_started_at',
  'algorithm')
local threshold = tonumber(meta[1])
if not threshold then return {'no_experiment', 0, 0, 0} end
-- A plain (not constant-time) comparison is acceptable here: what is compared is the SHA-256 digest
-- of a random 192-bit secret, not the secret. Timing can at best reveal a prefix of the stored
-- digest, and a matching prefix of a digest does not help find a token that hashes to it.
if redis.call('HGET', KEYS[5], ARGV[1]) ~= ARGV[5] then return {'unauthorized', 0, 0, 0} end
if meta[6] == 'cde' then return {'not_voting', 0, 0, 0} end
local n_arms = tonumber(meta[2])
local arm = tonumber(ARGV[2])
if not arm or arm < 0 or arm >= n_arms or arm ~= math.floor(arm) then
  return {'bad_arm', n_arms, 0, 0}
end
-- Every well-formed vote of an authenticated agent counts against its rate, counted or ignored.
local wait = gcra(KEYS[6], ARGV[1], tonumber(ARGV[6]), tonumber(ARGV[7]))
if wait > 0 then return {'rate_limited', math.ceil(wait), 0, 0} end

local epoch = tonumber(meta[4])
local now = tonumber(ARGV[4])
redis.call('HINCRBY', KEYS[1], 'messages', 1)  -- every epoch's
redis.call('HINCRBY', KEYS[1], 'epoch_messages', 1)  -- this epoch's (reset.lua zeroes it)
-- the reply: the publication (taken now if this message makes one due)
local function reply(outcome)
  if due(KEYS[1], now, tonumber(ARGV[10]), tonumber(ARGV[11])) then
    publish(KEYS[1], KEYS[2], KEYS[4], ARGV[8])
  end
  local published = redis.call('HMGET', KEYS[1], 'p_version', 'p_votes')
  local votes = published[2] and cjson.decode(published[2])[arm + 1] or 0
  return {outcome, tonumber(published[1] or meta[3]), epoch, votes}
end
local function ignored(outcome)
  redis.call('HINCRBY', KEYS[1], 'ignored', 1)
  return reply(outcome)
end
if tonumber(ARGV[3]) ~= epoch then return ignored('stale_epoch') end
if ARGV[9] ~= '' and meta[5] and ARGV[9] ~= meta[5] then return ignored('stale_epoch') end
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then return ignored('duplicate') end
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 0 then return ignored('arm_out') end
-- identified: the last arm's answer is final, a vote against it is ignored (and says so)
if redis.call('SCARD', KEYS[2]) <= 1 then return ignored('last_arm') end

redis.call('SADD', KEYS[3], ARGV[1])
-- it votes: whatever it said, it has not settled (a settled claim counts only while it keeps still)
redis.call('SREM', KEYS[7], ARGV[1])
pending_vote(KEYS[1], arm)
local votes = redis.call('SCARD', KEYS[3])
if votes < threshold then return reply('counted') end
redis.call('SREM', KEYS[2], ARGV[2])
redis.call('SINTERSTORE', KEYS[7], KEYS[7], KEYS[3])
redis.call('HINCRBY', KEYS[1], 'version', 1)
local order = redis.call('LLEN', KEYS[4]) + 1
redis.call('RPUSH', KEYS[4], cjson.encode({arm = arm, votes = votes, time = now, order = order}))
changed(KEYS[1], now)
touched(ARGV[8])  -- the coordinators that stream it read it again: they learn when it is due
return reply('eliminated')
