-- Keep a decided experiment's result (coordinator/store.py, ExperimentStore._result): the first
-- coordinator that reads a decision writes what it saw (its time, counters and the load
-- generator's figures then), and every later reader, on any coordinator, gets that one back, so
-- the result stays after the load generator stops and its lease expires. While the run that fed
-- the decision still renews its lease, a reader may refresh the run's figures (compare-and-set on
-- the result it read). A result names the decision it is of (`key`: epoch, version, status and,
-- for a tie, the agents enrolled): another decision (a reset, an enrollment that reopened a tie,
-- then a new outcome) replaces it.
-- KEYS[1] meta hash. ARGV[1] the experiment's created_at (an experiment deleted and created again
-- is another one), ARGV[2] the decision's key, ARGV[3] the result (JSON, with that key), ARGV[4]
-- (a refresh) the kept result it replaces, as read.
-- Returns the result kept (JSON), or false if the experiment does not exist (or is another one).
local m = redis.call('HMGET', KEYS[1], 'created_at', 'result')
if not m[1] or m[1] ~= ARGV[1] then return false end
if ARGV[4] then
  if m[2] ~= ARGV[4] then return m[2] or false end
elseif m[2] then
  local ok, kept = pcall(cjson.decode, m[2])
  if ok and type(kept) == 'table' and kept['key'] == ARGV[2] then return m[2] end
end
redis.call('HSET', KEYS[1], 'result', ARGV[3])
return ARGV[3]
