-- The agents of one experiment whose lease lapsed leave it (the coordinators' lease sweep,
-- coordinator/leases.py): their host renewed nothing for a whole lease (killed, crashed, cut
-- off), so nobody runs them. Each leaves as DELETE /v1/agents/me would make it (departure.lua,
-- prepended): the counts, the load generator's agent list and the certificate follow, and what
-- it said this epoch stands. At most `batch` agents a run, so that the script stays short (Redis
-- serves nobody else meanwhile): the sweep runs it again while a run takes a full batch. The
-- lease's end is read on Redis's clock, as the renewal writes it, so coordinators whose clocks
-- differ agree. Idempotent: an agent leaves once, whichever coordinator's sweep comes first.
-- Returns {leases left, the ids of the agents that left...}; {0} if the experiment does not
-- exist (its leases went with it).
local meta_key = KEYS[1]  -- meta hash
local agents_key = KEYS[2]  -- agents zset
local credentials_key = KEYS[3]  -- credentials hash
local settled_key = KEYS[4]  -- settled set (CE)
local reporters_key = KEYS[5]  -- reporters set (CDE)
local simulated_key = KEYS[6]  -- simulated set
local leases_key = KEYS[7]  -- leases zset (agent id -> when its lease lapses, unix ms)
local voters_keys = {unpack(KEYS, 8)}  -- each arm's voter set, in arm order
local batch = ARGV[1]  -- most agents leaving in one run
-- the experiment's changes channel (changes.lua, prepended: fewer agents may turn it tied)
local changes_channel = ARGV[2]

local epoch = redis.call('HGET', meta_key, 'epoch')
if not epoch then return {0} end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', leases_key, '-inf', now, 'LIMIT', 0, tonumber(batch))
for _, agent_id in ipairs(lapsed) do
  depart(meta_key, agents_key, credentials_key, settled_key, reporters_key, simulated_key,
    leases_key, voters_keys, agent_id, epoch)
end
if #lapsed > 0 then
  revise(meta_key)
  touched(changes_channel)
end
return {redis.call('ZCARD', leases_key), unpack(lapsed)}
