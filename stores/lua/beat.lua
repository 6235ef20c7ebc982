-- Register a worker, or renew its registration, and drop those that expired.
-- ARGV: P, worker id, heartbeat record (JSON), its expiry, now. Returns 1.
local bad = badnum(ARGV[4], 'expiry') or badnum(ARGV[5], 'now')
if bad then return err('invalid', bad) end
local where
where, bad = mistyped_any({P .. K.workers, 'zset', P .. K.worker, 'hash'})
if bad then return err('index', where, bad) end  -- (the repair pass rebuilds them)
local expired = redis.call('ZRANGEBYSCORE', P .. K.workers, '-inf', '(' .. ARGV[5])
for _, id in ipairs(expired) do
  redis.call('ZREM', P .. K.workers, id)
  redis.call('HDEL', P .. K.worker, id)
end
redis.call('HSET', P .. K.worker, ARGV[2], ARGV[3])
redis.call('ZADD', P .. K.workers, ARGV[4], ARGV[2])
return 1
