-- KEYS: the intent. ARGV: P, intent id, delivery number, now, outcome, due|'',
--       error JSON|'', event data.
-- Outcomes: sent; retry (at `due`); dead; release (due now, e.g. worker shutdown).
-- Only the newest delivery may report a failure or a release; a success is
-- taken from any delivery while the intent is pending (it was delivered). The
-- event goes to the run's log while the run lists the intent; an intent whose
-- run was deleted is dropped once settled.
local iid, now, outcome = ARGV[2], ARGV[4], ARGV[5]
local bad = badnum(now, 'now') or (outcome == 'retry' and badnum(ARGV[6], 'due'))
if bad then return err('invalid', bad) end
local key = KEYS[1]
local h = redis.pcall('HMGET', key, 'status', 'n', 'run', 'channel', 'step', 'f')
if h.err then return 0 end  -- not a hash: no intent to settle
local st, d, id, ch, step = h[1], h[2], h[3], h[4], h[5]
if st ~= 'pending' or not ch or not id or (h[6] and not isint(h[6])) then return 0 end
if outcome ~= 'sent' and d ~= ARGV[3] then return 0 end
local q = P .. K.outbox .. ch
if outcome == 'release' then
  redis.call('ZADD', q, now, iid)
  redis.call('HSET', key, 'due', now)
  wake_outbox(ch)
  return 1
end
local alive = redis.call('SISMEMBER', P .. K.intents .. id, iid) == 1
-- a run's event log of another type cannot take the event: the intent settles without it
local logged = alive and not mistyped(P .. K.events .. id, 'stream')
if outcome == 'retry' then
  redis.call('HINCRBY', key, 'f', 1)
  redis.call('HSET', key, 'error', ARGV[7], 'at', now, 'due', ARGV[6])
  redis.call('ZADD', q, ARGV[6], iid)
  if logged then emit(id, 'outbox.failed', now, step, ARGV[8]) end
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
if logged then emit(id, 'outbox.' .. outcome, now, step, ARGV[8]) end
return 1
