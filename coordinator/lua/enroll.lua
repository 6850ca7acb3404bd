-- Enroll one agent, atomically: its enrollment number, its credential and its place in the agents
-- set appear together or not at all, and only within the experiment's limits. Two ways in:
-- a ticket (ARGV[8] its digest): the ticket must be unused and unexpired, and this enrollment
-- consumes it; or open enrollment (ARGV[8] ''): the per-client cap and rate apply instead.
-- KEYS[1] meta hash, KEYS[2] agent sequence, KEYS[3] agents zset, KEYS[4] credentials hash,
-- KEYS[5] enrollment rate hash (client -> GCRA state), KEYS[6] enrollers hash (client -> agents),
-- KEYS[7] tickets zset (digest -> expiry, unix ms).
-- ARGV[1] the new agent id, ARGV[2] the SHA-256 digest of its token, ARGV[3] the client's address,
-- ARGV[4] most agents in the experiment, ARGV[5] most agents per client (0: no limit for either),
-- ARGV[6] enrollments per second per client, ARGV[7] burst (rate 0: no limit), ARGV[8] the
-- SHA-256 digest of the ticket ('' for open enrollment), ARGV[9] the experiment's changes channel
-- (changes.lua: an enrollment revises the document; it may reopen a tie announced as such, or, as
-- the agents reach the threshold, make the experiment tied, so it is published then).
-- Returns {index (from 1), 0} when enrolled; {0, 0} if the experiment does not exist; {-1, 0} if the
-- id is taken; {-2, max} if the experiment is full; {-3, max} if the client enrolled its maximum;
-- {-4, ms to wait} if the client enrolls too fast; {-5, 0} if the ticket is unknown (never issued,
-- used, or another experiment's); {-6, 0} if it expired. Only the first changes anything.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local ticket = ARGV[8]
if ticket ~= '' then
  local expiry = tonumber(redis.call('ZSCORE', KEYS[7], ticket))
  if not expiry then return {-5, 0} end
  local clock = redis.call('TIME')
  if expiry <= tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) then
    return {-6, 0}
  end
end
local max_agents = tonumber(ARGV[4])
if max_agents > 0 and redis.call('ZCARD', KEYS[3]) >= max_agents then return {-2, max_agents} end
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then return {-1, 0} end
if ticket == '' then
  local max_client = tonumber(ARGV[5])
  if max_client > 0 and (tonumber(redis.call('HGET', KEYS[6], ARGV[3])) or 0) >= max_client then
    return {-3, max_client}
  end
  local wait = gcra(KEYS[5], ARGV[3], tonumber(ARGV[6]), tonumber(ARGV[7]))
  if wait > 0 then return {-4, math.ceil(wait)} end
  redis.call('HINCRBY', KEYS[6], ARGV[3], 1)
else
  redis.call('ZREM', KEYS[7], ticket)
end
local index = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], index, ARGV[1])
revise(KEYS[1])
local tied = redis.call('HGET', KEYS[1], 'tied')
if tied == '1' or redis.call('ZCARD', KEYS[3]) == tonumber(redis.call('HGET', KEYS[1], 'threshold')) then
  touched(ARGV[9])
end
return {index, 0}
