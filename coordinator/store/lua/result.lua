-- Keep a decided experiment's result (coordinator/store/reads.py, ExperimentReads._result): the
-- first coordinator that reads a decision writes what it saw (its time, counters and the load
-- generator's figures then), and every later reader, on any coordinator, gets that one back, so
-- the result stays after the load generator stops and its lease expires. While the run that fed
-- the decision still renews its lease, a reader may refresh the run's figures (compare-and-set on
-- the result it read). A result names the decision it is of (`key`: epoch, version, status and,
-- for a tie, the agents enrolled): another decision (a reset, an enrollment that reopened a tie,
-- then a new outcome) replaces it.
-- Returns the result kept (JSON), or false if the experiment does not exist (or is another one).
local meta_key = KEYS[1]  -- meta hash
-- the experiment's created_at (an experiment deleted and created again is another one)
local created_at = ARGV[1]
local decision_key = ARGV[2]  -- the decision's key
local result = ARGV[3]  -- the result (JSON, with that key)
local replaced = ARGV[4]  -- (a refresh) the kept result it replaces, as read; nil otherwise

local m = redis.call('HMGET', meta_key, 'created_at', 'result')
if not m[1] or m[1] ~= created_at then return false end
if replaced then
  if m[2] ~= replaced then return m[2] or false end
elseif m[2] then
  local ok, kept = pcall(cjson.decode, m[2])
  if ok and type(kept) == 'table' and kept['key'] == decision_key then return m[2] end
end
redis.call('HSET', meta_key, 'result', result)
return result
