-- A named API key is revoked (DELETE /v1/keys/{name}): its digest leaves with its name, so the
-- next request with the key finds nothing (401). Returns 1 (revoked) or 0 (no such key).
local names_key = KEYS[1]  -- hash: key name -> JSON {digest, role, created_at}
local digests_key = KEYS[2]  -- hash: SHA-256 digest of the key -> JSON {name, role}
local name = ARGV[1]

local doc = redis.call('HGET', names_key, name)
if not doc then return 0 end
redis.call('HDEL', digests_key, cjson.decode(doc)['digest'])
redis.call('HDEL', names_key, name)
return 1
