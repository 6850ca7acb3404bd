-- One agent's departure, prepended by the store (scripts.py) to leave.lua (its own token: DELETE
-- /v1/agents/me) and lapse.lua (its lease lapsed: its host is gone without a word), so that both
-- have one effect. depart(...) takes it out of the experiment: no longer enrolled (out of the
-- agents set, so the load generator no longer feeds it and the enrollment limit frees its place),
-- no lease left, its token dead (its credential becomes 'left', a tombstone no digest equals: the
-- id is never enrolled again; a revoked one keeps its revocation), no longer counted as
-- simulated. What it said stands: its votes (voter sets), its settled message and its CDE report
-- stay counted, and so does the agent in N, the number of agents the certificate and the tie
-- verdict count, for this epoch: an agent that voted may have erred (the certificate's
-- Bin(N - f, p) counts it), and it may still hold arms. The meta hash's `departed` field,
-- '<epoch>:<agents>', counts those agents (coordinator/store/state.py departed_of); a reset (a new
-- epoch, its voter sets empty) drops them from N. An agent that said nothing this epoch leaves N
-- at once. Returns whether it still counts in N. The caller revises the document.
local function depart(meta_key, agents_key, credentials_key, settled_key, reporters_key,
                      simulated_key, leases_key, voters_keys, agent_id, epoch)
  local counted = redis.call('SISMEMBER', settled_key, agent_id) == 1
    or redis.call('SISMEMBER', reporters_key, agent_id) == 1
  for _, voters_key in ipairs(voters_keys) do
    if counted then break end
    counted = redis.call('SISMEMBER', voters_key, agent_id) == 1
  end
  redis.call('ZREM', agents_key, agent_id)
  redis.call('ZREM', leases_key, agent_id)
  local stored = redis.call('HGET', credentials_key, agent_id)
  if not (stored and string.sub(stored, 1, 8) == 'revoked:') then
    redis.call('HSET', credentials_key, agent_id, 'left')
  end
  redis.call('SREM', simulated_key, agent_id)
  if counted then
    local departed = redis.call('HGET', meta_key, 'departed')
    local at, count = string.match(departed or '', '^(%d+):(%d+)$')
    local agents = (at == epoch) and tonumber(count) + 1 or 1
    redis.call('HSET', meta_key, 'departed', epoch .. ':' .. agents)
  end
  return counted
end
