-- KEYS: run. ARGV: P, id, event type, now, event data. An audit-only event
-- (e.g. auth.denied): it changes nothing else.
if redis.call('EXISTS', KEYS[1]) == 0 then return err('not_found') end
local bad = badnum(ARGV[4], 'now')
if bad then return err('invalid', bad) end
local log = P .. K.events .. ARGV[2]
bad = mistyped(log, 'stream')
if bad then return err('corrupt', log, bad) end
emit(ARGV[2], ARGV[3], ARGV[4], '', ARGV[5])
return {1}
