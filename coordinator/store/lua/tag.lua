-- The parts of a public document's ETag (coordinator/store/reads.py, ExperimentReads.tag_parts):
-- what a full read's transaction read (HGETALL of the meta hash, LRANGE of the eliminations, GET of
-- the load generator's lease), in one EVALSHA, which costs the coordinator less client CPU than a
-- MULTI/EXEC of three commands. Reads only.
-- Returns {meta hash as a flat list (empty if the experiment does not exist), lease}: the lease is
-- nil when absent, and 0 when unreadable (written by a process without admin rights, it may be a
-- key of another type: a WRONGTYPE must not fail the read).
local meta_key = KEYS[1]  -- meta hash
local eliminations_key = KEYS[2]  -- eliminations list (read as a full read reads it: its errors)
local load_generator_key = KEYS[3]  -- the load generator's lease

local meta = redis.call('HGETALL', meta_key)
redis.call('LRANGE', eliminations_key, 0, -1)
local lease = redis.pcall('GET', load_generator_key)
if type(lease) == 'table' and lease['err'] then lease = 0 end
return {meta, lease}
