-- KEYS: run. ARGV: P, id, fence|'', now, error JSON.
-- Fails a run whose data cannot be read or worked with (a worker found it so:
-- a claim, a tick, an activation's write): status failed, reason
-- corrupt_record, `error`; off every queue, timer, lease and status index but
-- `failed`; a run.failed event, a run_finished checkpoint and a done notice,
-- as far as its damaged keys allow. What was damaged stays as it was found.
-- With a fence, only while the run is leased on it; without, only while no
-- lease is held. Returns 1; 0 when there was nothing to do (ended, gone,
-- leased by another); -1 when its record is not a hash (nothing can be written);
-- err('index', ...) when the index of failed runs is not a sorted set.
local id, key, now = ARGV[2], KEYS[1], ARGV[4]
local bad = badnum(now, 'now') or (ARGV[3] ~= '' and badnum(ARGV[3], 'fence', true))
if bad then return err('invalid', bad) end
local t = redis.call('TYPE', key)['ok']
if t == 'none' then return 0 end
if t ~= 'hash' then return -1 end
local st, fence, created, q, cp = unpack(redis.call('HMGET', key, 'status', 'fence', 'created_at',
                                                    'queue', 'cp_n'))
if ARGV[3] ~= '' then
  if fence ~= ARGV[3] then return 0 end
elseif redis.call('ZSCORE', P .. K.leases, id) then
  return 0
end
if st and TERMINAL[st] then return 0 end
bad = mistyped(P .. K.status .. 'failed', 'zset')
if bad then return err('index', P .. K.status .. 'failed', bad) end
vacate(id)
-- (pcall: an index of another type holds no entry to take off)
for s in pairs(ALLOWED) do redis.pcall('ZREM', P .. K.status .. s, id) end
if q then redis.pcall('ZREM', P .. K.queue .. q, id) end
redis.pcall('ZREM', P .. K.timers, id)
redis.pcall('ZREM', P .. K.leases, id)
redis.call('DEL', P .. K.waits .. id)
redis.call('HDEL', key, 'lease_owner', 'lease_exp', 'waiting_on')
redis.call('HSET', key, 'status', 'failed', 'reason', 'corrupt_record', 'error', ARGV[5],
           'finished_at', now)
if not fence or isint(fence) then redis.call('HINCRBY', key, 'fence', 1) end
redis.call('ZADD', P .. K.status .. 'failed', isnum(created) and created or now, id)
if not mistyped(P .. K.events .. id, 'stream') then emit(id, 'run.failed', now, '', ARGV[5]) end
if (not cp or isint(cp)) and not mistyped(P .. K.checkpoints .. id, 'stream') then
  checkpoint(id, 'run_finished', '', 'failed', now)
end
finished(id, 'failed', now)
return 1
