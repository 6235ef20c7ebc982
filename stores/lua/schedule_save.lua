-- KEYS: schedule. ARGV: P, id, mode ('create' | 'ensure'), now, spec hash,
--       next tick|'' (none: the cron never matches again), flow, queue,
--       audit data|'' (with it, a save that writes is also an audit log entry),
--       field, value, ... (cron, tz, args, overlap, catchup: opaque to the script)
-- Create a schedule; or, with mode 'ensure' (a worker serving a @scheduled flow),
-- create it or update its spec, keeping its state (paused, last run, counters).
-- Returns 1 created, 0 the same spec was there (nothing written), 2 updated,
-- -1 another spec is there (mode 'create': nothing written).
local key, id, mode, now = KEYS[1], ARGV[2], ARGV[3], ARGV[4]
local bad = badnum(now, 'now') or badnum(ARGV[6], 'next tick', false, true)
if bad then return err('invalid', bad) end
if #ARGV % 2 == 0 then return err('invalid', 'fields must come in name, value pairs') end
local audit = ARGV[9]
bad = mistyped(key, 'hash')
if bad then return err('corrupt', key, bad) end
if audit ~= '' then
  bad = mistyped(P .. K.audit, 'stream')
  if bad then return err('corrupt', P .. K.audit, bad) end
end
local old = redis.call('HMGET', key, 'spec', 'flow')
if old[1] then
  if old[1] == ARGV[5] then return 0 end
  if mode ~= 'ensure' then return -1 end
  redis.call('ZREM', P .. K.sched_due .. old[2], id)
else
  redis.call('HSET', key, 'created_at', now, 'paused', '0', 'fired', '0', 'skipped', '0',
             'ver', '0', 'last_run', '', 'buffered', '', 'trigger', '')
  redis.call('ZADD', P .. K.schedules, now, id)
end
local fields = {'spec', ARGV[5], 'next', ARGV[6], 'flow', ARGV[7], 'queue', ARGV[8],
                'updated_at', now}
for i = 10, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', key, unpack(fields))
redis.call('HINCRBY', key, 'ver', 1)
sched_arm(id, now)
nudge(ARGV[8])
if audit ~= '' then
  audit_entry(K.audit, old[1] and 'schedule.replaced' or 'schedule.created', now, '', id, audit)
end
return old[1] and 2 or 1
