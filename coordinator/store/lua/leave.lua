-- An agent leaves its experiment with its own token (DELETE /v1/agents/me: its host stopped),
-- atomically, as departure.lua says (prepended: the lease sweep's lapse.lua has the same effect).
-- Returns {1, 1} when it left and still counts in N, {1, 0} when it left and does not; {0, 0} if
-- the experiment does not exist; {-1, 0} if the token is not this experiment's agent's (or it
-- left already); {-7, 0} if the script ran after its deadline (deadline.lua). Only {1, _} changes
-- anything.
local meta_key = KEYS[1]  -- meta hash
local agents_key = KEYS[2]  -- agents zset
local credentials_key = KEYS[3]  -- credentials hash (agent id -> SHA-256 digest of its token)
local settled_key = KEYS[4]  -- settled set (CE)
local reporters_key = KEYS[5]  -- reporters set (CDE)
local simulated_key = KEYS[6]  -- simulated set
local leases_key = KEYS[7]  -- leases zset (agent id -> when its lease lapses)
local voters_keys = {unpack(KEYS, 8)}  -- each arm's voter set, in arm order
local agent_id = ARGV[1]
local token_digest = ARGV[2]  -- the SHA-256 hex digest of the bearer token it came with
-- the experiment's changes channel (changes.lua, prepended: the document changes, and fewer
-- agents may turn the experiment tied)
local changes_channel = ARGV[3]
local deadline_ms = ARGV[4]  -- as in enroll.lua (deadline.lua, prepended)

if expired(deadline_ms) then return {-7, 0} end
local epoch = redis.call('HGET', meta_key, 'epoch')
if not epoch then return {0, 0} end
if redis.call('HGET', credentials_key, agent_id) ~= token_digest then return {-1, 0} end

local counted = depart(meta_key, agents_key, credentials_key, settled_key, reporters_key,
  simulated_key, leases_key, voters_keys, agent_id, epoch)
revise(meta_key)
touched(changes_channel)
return {1, counted and 1 or 0}
