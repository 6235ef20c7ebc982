-- KEYS: run. ARGV: P, id, fence. Gives a claimed run back (worker shutdown).
local id = ARGV[2]
local run, where, bad = fenced(id, ARGV[3])
if not run then return bad and err('corrupt', where, bad) or -1 end
where, bad = damaged(id)  -- enqueue computes with its priority
if bad then return err('corrupt', where, bad) end
where, bad = queue_damage(redis.call('HGET', KEYS[1], 'queue'))
if bad then return err('index', where, bad) end
redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_exp')
redis.pcall('ZREM', P .. K.leases, id)  -- (a damaged index holds no entry)
vacate(id)
enqueue(id)
return 1
