-- KEYS: the intent. ARGV: P, intent id, delivery number, now, outcome, due|'',
--       error JSON|'', event data.
-- Outcomes: sent; retry (at `due`); dead; release (due now, e.g. worker shutdown).
-- Only the newest delivery may report a failure or a release; a success is
-- taken from any delivery while the intent is pending (it was delivered). The
-- event goes to the run's log while the run lists the intent; an intent whose
-- run was deleted is dropped once settled.
local iid, now, outcome = ARGV[2], ARGV[4], ARGV[5]
local key = KEYS[1]
local st, d, id, ch, step =
  unpack(redis.call('HMGET', key, 'status', 'n', 'run', 'channel', 'step'))
if st ~= 'pending' then return 0 end
if outcome ~= 'sent' and d ~= ARGV[3] then return 0 end
local q = P .. K.outbox .. ch
if outcome == 'release' then
  redis.call('ZADD', q, now, iid)
  redis.call('HSET', key, 'due', now)
  wake_outbox(ch)
  return 1
end
local alive = redis.call('SISMEMBER', P .. K.intents .. id, iid) == 1
if outcome == 'retry' then
  redis.call('HINCRBY', key, 'f', 1)
  redis.call('HSET', key, 'error', ARGV[7], 'at', now, 'due', ARGV[6])
  redis.call('ZADD', q, ARGV[6], iid)
  if alive then emit(id, 'outbox.failed', now, step, ARGV[8]) end
  return 1
end
redis.call('ZREM', q, iid)
if not alive then
  redis.call('UNLINK', key)
  return 1
end
if outcome == 'dead' then
  redis.call('HINCRBY', key, 'f', 1)
  redis.call('HSET', key, 'error', ARGV[7])
end
redis.call('HSET', key, 'status', outcome, 'at', now)
redis.call('HDEL', key, 'due')
emit(id, 'outbox.' .. outcome, now, step, ARGV[8])
return 1
