-- Drop a worker's registration. ARGV: P, worker id. Returns 1.
redis.call('ZREM', P .. K.workers, ARGV[2])
redis.call('HDEL', P .. K.worker, ARGV[2])
return 1
