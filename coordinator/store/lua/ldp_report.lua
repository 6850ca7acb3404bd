-- One LDP report, authenticated and counted atomically (common/ldp.py): a device played `arm`,
-- drawn from the published allocation, and sends the bit its mechanism made of the reward. The
-- report is numbered by the device (`seq`, 1 to B = reports_per_agent): the reports it sent that
-- counted are kept per agent (report_seq), so a retry or a replay of a counted report is a
-- duplicate and the next number counts. What is counted (the arm's reports and ones) is published
-- with its batch, as votes are (publish.lua: p_votes counts the reports, p_ones the ones); the
-- coordinator decides on each publication (coordinator/store/decisions.py, lua/ldp_decide.lua).
-- Returns {outcome, reports counted for this agent, B, published (1: this report's batch was
-- published now)}, outcome counted or duplicate (a report numbered at most the agent's count:
-- nothing changes, not even a counter, and the reply is the same whatever the others sent); or a
-- refusal that changes nothing: {'expired'} (run after its deadline: deadline.lua), {'no_experiment'}, {'unauthorized'} (no such agent in this
-- experiment, or a wrong token), {'not_crowd'} (not an LDP experiment), {'bad_arm', n_arms},
-- {'bad_bit'}, {'bad_seq'} (not an integer >= 1), {'decided', count, B} (an arm was identified:
-- nothing more is counted), {'spent', count, B} (beyond B), {'out_of_order', count, B} (not the
-- next number), {'rate_limited', ms to wait}. Which arm and bit an agent sent is not kept.
local meta_key = KEYS[1]  -- meta hash
local remaining_key = KEYS[2]  -- remaining set
local report_counts_key = KEYS[3]  -- report counts hash (arm -> reports)
local report_ones_key = KEYS[4]  -- report ones hash (arm -> reports whose bit is 1)
local report_seq_key = KEYS[5]  -- report seq hash (agent id -> its reports that counted)
local eliminations_key = KEYS[6]  -- eliminations list (publish.lua publishes its length)
local credentials_key = KEYS[7]  -- credentials hash (agent id -> SHA-256 digest of its token)
-- vote rate hash (agent id -> GCRA state, gcra.lua, prepended: reports and votes share the
-- per-agent rate)
local vote_rate_key = KEYS[8]
local agent_id = ARGV[1]
local arm_index = ARGV[2]
local bit = ARGV[3]  -- the privatized bit, '0' or '1'
local seq = ARGV[4]  -- the report's number for this agent, from 1
local now_ms = ARGV[5]
local token_digest = ARGV[6]  -- the SHA-256 hex digest of the bearer token the report came with
local vote_rate = ARGV[7]  -- requests per second per agent (0: no limit)
local vote_burst = ARGV[8]
local changes_channel = ARGV[9]  -- the experiment's changes channel (changes.lua)
-- the publication batch and its cadence (ms) (publish.lua: a report is published with its batch)
local publish_batch = ARGV[10]
local publish_cadence_ms = ARGV[11]
-- the deadline in Redis's clock (ms; 0: none): run later, the coordinator has answered 503, and
-- the script changes nothing (deadline.lua, prepended)
local deadline_ms = ARGV[12]

if expired(deadline_ms) then return {'expired'} end

local meta = redis.call('HMGET', meta_key, 'n_arms', 'algorithm', 'config')
local n_arms = tonumber(meta[1])
if not n_arms then return {'no_experiment'} end
-- A plain comparison of digests, as in vote.lua.
if redis.call('HGET', credentials_key, agent_id) ~= token_digest then return {'unauthorized'} end
if meta[2] ~= 'ldp' then return {'not_crowd'} end
local arm = tonumber(arm_index)
if not arm or arm < 0 or arm >= n_arms or arm ~= math.floor(arm) then
  return {'bad_arm', n_arms}
end
if bit ~= '0' and bit ~= '1' then return {'bad_bit'} end
local number = tonumber(seq)
if not number or number < 1 or number ~= math.floor(number) then return {'bad_seq'} end
local budget = tonumber(cjson.decode(meta[3])['params']['reports_per_agent'])
local sent = tonumber(redis.call('HGET', report_seq_key, agent_id) or 0)
if number <= sent then return {'duplicate', sent, budget, 0} end
if redis.call('SCARD', remaining_key) <= 1 then return {'decided', sent, budget} end
if number > budget then return {'spent', sent, budget} end
if number ~= sent + 1 then return {'out_of_order', sent, budget} end
local wait = gcra(vote_rate_key, agent_id, tonumber(vote_rate), tonumber(vote_burst))
if wait > 0 then return {'rate_limited', math.ceil(wait)} end

redis.call('HINCRBY', meta_key, 'messages', 1)
redis.call('HINCRBY', meta_key, 'epoch_messages', 1)
redis.call('HSET', report_seq_key, agent_id, number)
redis.call('HINCRBY', report_counts_key, arm_index, 1)
redis.call('HINCRBY', report_ones_key, arm_index, tonumber(bit))
pending_vote(meta_key, arm)
if bit == '1' then pending_one(meta_key, arm) end
local published = 0
if due(meta_key, tonumber(now_ms), tonumber(publish_batch), tonumber(publish_cadence_ms)) then
  publish(meta_key, remaining_key, eliminations_key, changes_channel)
  published = 1
end
return {'counted', number, budget, published}
