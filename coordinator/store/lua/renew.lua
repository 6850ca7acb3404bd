-- Renew the leases of some agents of one experiment (POST /v1/agents/leases: their host is
-- alive), each with its own token: an agent is renewed only if the digest given for it is its
-- credential's, and only if it has a lease (one is taken at enrollment, `lease: true`, never
-- here). The lease then lapses `lease_ms` after Redis's clock now (lapse.lua reads that clock).
-- Returns one outcome per agent, in order: 1 renewed; 0 its token is good but it has no lease
-- (nothing changes); -1 gone: not an agent of this experiment with this token (unknown, left,
-- its lease lapsed, revoked, or the experiment deleted).
local leases_key = KEYS[1]  -- leases zset (agent id -> when its lease lapses, unix ms)
local credentials_key = KEYS[2]  -- credentials hash (agent id -> SHA-256 digest of its token)
local lease_ms = ARGV[1]  -- the lease's length (DEXP_AGENT_LEASE_SECONDS, in ms)
local agent_ids = ARGV[2]  -- the agents' ids, comma-separated (ids have no comma)
local token_digests = ARGV[3]  -- the digests of their tokens, comma-separated, in the same order

local clock = redis.call('TIME')
local lapses = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  + tonumber(lease_ms)
local digests = {}
for token_digest in string.gmatch(token_digests, '[^,]+') do digests[#digests + 1] = token_digest end
local outcomes = {}
local i = 0
for agent_id in string.gmatch(agent_ids, '[^,]+') do
  i = i + 1
  local outcome = -1
  if redis.call('HGET', credentials_key, agent_id) == digests[i] then
    outcome = 0
    if redis.call('ZSCORE', leases_key, agent_id) then
      redis.call('ZADD', leases_key, lapses, agent_id)
      outcome = 1
    end
  end
  outcomes[i] = outcome
end
return outcomes
