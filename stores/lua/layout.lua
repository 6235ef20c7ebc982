-- The deployment's partition count: the one recorded under its prefix, or
-- ARGV[2] (this store's), recorded now by the first script call of the first
-- store to ask. The caller compares (stores._storecore.StoreCore). A hash, so
-- the commands are those the app user's ACL already grants (docs/security.md).
-- KEYS: layout. ARGV: P (unused), partitions.
local bad = badnum(ARGV[2], 'partitions', true)
if bad then return err('invalid', bad) end
bad = mistyped(KEYS[1], 'hash')
if bad then return err('corrupt', KEYS[1], bad) end
local recorded = redis.call('HGET', KEYS[1], 'partitions')
if recorded then return recorded end
redis.call('HSET', KEYS[1], 'partitions', ARGV[2])
return ARGV[2]
