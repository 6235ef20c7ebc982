-- KEYS: run. ARGV: P, id, reason, now, event data
local id = ARGV[2]
local bad = badnum(ARGV[4], 'now')
if bad then return err('invalid', bad) end
local where, st
where, bad, st = damaged(id)
if not bad then
  where, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
end
if not bad then where, bad = intents_mistyped(id) end
if bad then return err('corrupt', where, bad) end
if not st then return err('not_found') end
local e = move(id, 'canceled')
if e then return e end
redis.call('HSET', KEYS[1], 'reason', ARGV[3], 'finished_at', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'fence', 1)
unqueue(id)
emit(id, 'run.canceled', ARGV[4], '', ARGV[5])
cancel_intents(id, ARGV[4])
checkpoint(id, 'run_finished', '', 'canceled', ARGV[4])
finished(id, 'canceled')
expire(id, ARGV[4])
return {1}
