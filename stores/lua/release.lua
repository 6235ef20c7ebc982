-- KEYS: run. ARGV: P, id, fence. Gives a claimed run back (worker shutdown).
local id = ARGV[2]
if not fenced(id, ARGV[3]) then return -1 end
redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_exp')
redis.call('ZREM', P .. K.leases, id)
enqueue(id)
return 1
