-- Drop a worker's registration. ARGV: P, worker id. Returns 1.
local where, bad = mistyped_any({P .. K.workers, 'zset', P .. K.worker, 'hash'})
if bad then return err('index', where, bad) end
redis.call('ZREM', P .. K.workers, ARGV[2])
redis.call('HDEL', P .. K.worker, ARGV[2])
return 1
