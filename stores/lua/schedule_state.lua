-- KEYS: schedule. ARGV: P, id, op ('pause' | 'resume' | 'delete' | 'trigger'), now,
--       next tick|'' (resume: the first tick after now), audit data|'' (with it,
--       the operation is also an entry 'schedule.<op>d' of the audit log)
-- Pause (a buffered tick is dropped; ticks stop until resumed), resume (from the
-- first tick after now: ticks missed while paused are not caught up), delete, or
-- trigger (a run now: the next worker pass of the flow starts it; field trigger).
-- Returns 1, or 0 for no such schedule.
local key, id, op, now = KEYS[1], ARGV[2], ARGV[3], ARGV[4]
local bad = badnum(now, 'now') or badnum(ARGV[5], 'next tick', false, true)
if bad then return err('invalid', bad) end
bad = mistyped(key, 'hash')
if bad then return err('corrupt', key, bad) end
local f = redis.call('HMGET', key, 'flow', 'queue', 'paused')
if not f[1] then return 0 end
local done = {pause = 'schedule.paused', resume = 'schedule.resumed',
              delete = 'schedule.deleted', trigger = 'schedule.triggered'}
if not done[op] then return err('invalid', 'unknown schedule operation ' .. op) end
local audit = ARGV[6] or ''
if audit ~= '' then
  bad = mistyped(P .. K.audit, 'stream')
  if bad then return err('corrupt', P .. K.audit, bad) end
  audit_entry(K.audit, done[op], now, '', id, audit)
end
if op == 'delete' then
  redis.call('DEL', key)
  redis.call('ZREM', P .. K.schedules, id)
  redis.call('ZREM', P .. K.sched_due .. f[1], id)
  return 1
elseif op == 'pause' then
  redis.call('HSET', key, 'paused', '1', 'buffered', '')
elseif op == 'resume' then
  if f[3] == '1' then redis.call('HSET', key, 'paused', '0', 'next', ARGV[5]) end
elseif op == 'trigger' then
  redis.call('HSET', key, 'trigger', now)
  nudge(f[2])
end
redis.call('HINCRBY', key, 'ver', 1)
sched_arm(id, now)
return 1
