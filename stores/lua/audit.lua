-- KEYS: run. ARGV: P, id, event type, now, event data. An audit-only event
-- (e.g. auth.denied): it changes nothing else.
if redis.call('EXISTS', KEYS[1]) == 0 then return err('not_found') end
emit(ARGV[2], ARGV[3], ARGV[4], '', ARGV[5])
return {1}
