-- KEYS: run. ARGV: P, id, reason, now, event data,
--       [grace deadline|'', request event data, forced event data, forcing event data]
-- With a grace deadline, a run that has started (running, replaying, waiting)
-- and has no cancel request yet gets one: reason, deadline and the data of the
-- run.canceled event that forcing it at the deadline writes (maintain() does).
-- The run is woken if it waits, so a worker delivers the cancel to the flow.
-- Returns {2} then. Anything else (no grace, a pending run, a second cancel)
-- cancels the run at once: {1}. A run forced by a second cancel keeps the
-- request's reason; its event data is the forcing event data.
local id = ARGV[2]
local grace = ARGV[6] or ''
local bad = badnum(ARGV[4], 'now') or badnum(grace, 'grace deadline', false, true)
if bad then return err('invalid', bad) end
local where, st
where, bad, st = damaged(id)
if not bad then
  where, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
end
if not bad then where, bad = intents_mistyped(id) end
if bad then return err('corrupt', where, bad) end
if not st then return err('not_found') end
local asked = redis.call('HGET', KEYS[1], 'cancel_at')
if grace ~= '' and not asked and st ~= 'pending' and not TERMINAL[st] then
  if st == 'waiting_for_signal' or st == 'waiting_for_human' then  -- woken: queued
    where, bad = wake_damage(id, st)
  end
  if not bad then where, bad = mistyped_any({P .. K.cancels, 'zset'}) end
  if bad then return err('index', where, bad) end
  redis.call('HSET', KEYS[1], 'cancel_reason', ARGV[3], 'cancel_at', grace, 'cancel_ev', ARGV[8])
  redis.call('ZADD', P .. K.cancels, grace, id)
  emit(id, 'run.cancel_requested', ARGV[4], '', ARGV[7])
  if st == 'waiting_for_signal' or st == 'waiting_for_human' then
    wake_run(id)
  else
    -- idle workers block until the deadline they knew of: let one look again
    nudge(redis.call('HGET', KEYS[1], 'queue'))
  end
  return {2}
end
if not TERMINAL[st] then  -- canceled now (a finished run: refused by move below)
  where, bad = move_damage(st, 'canceled', {P .. K.expiry, 'zset'})
  if bad then return err('index', where, bad) end
end
local reason, data = ARGV[3], ARGV[5]
if asked and not TERMINAL[st] then
  reason = redis.call('HGET', KEYS[1], 'cancel_reason') or reason
  if (ARGV[9] or '') ~= '' then data = ARGV[9] end
end
local e = cancel_now(id, reason, ARGV[4], data)
if e then return e end
return {1}
