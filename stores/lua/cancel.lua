-- KEYS: run. ARGV: P, id, reason, now, event data
local id = ARGV[2]
local st = redis.call('HGET', KEYS[1], 'status')
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
