-- A named API key is created if no key has its name (POST /v1/keys): both hashes at once, so that
-- a name is never bound to two keys and a digest never outlives its name. Returns 1 (created) or
-- 0 (the name is taken: nothing changes).
local names_key = KEYS[1]  -- hash: key name -> JSON {digest, role, created_at}
local digests_key = KEYS[2]  -- hash: SHA-256 digest of the key -> JSON {name, role}
local name = ARGV[1]
local digest = ARGV[2]
local name_doc = ARGV[3]
local digest_doc = ARGV[4]

if redis.call('HEXISTS', names_key, name) == 1 then return 0 end
redis.call('HSET', names_key, name, name_doc)
redis.call('HSET', digests_key, digest, digest_doc)
return 1
