-- KEYS: an anchor key of the partition. ARGV: P, log ('changes' | 'refusals'),
-- event type, now, run id|'', schedule id|'', data. An entry of the partition's
-- audit log (e.g. the auth.denied of a refused start): it changes nothing else.
local bad = badnum(ARGV[4], 'now')
if bad then return err('invalid', bad) end
local log
if ARGV[2] == 'changes' then log = K.audit
elseif ARGV[2] == 'refusals' then log = K.denied
else return err('invalid', 'unknown audit log ' .. ARGV[2]) end
bad = mistyped(P .. log, 'stream')
if bad then return err('corrupt', P .. log, bad) end
audit_entry(log, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
return {1}
