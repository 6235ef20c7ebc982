-- KEYS: run. ARGV: P, id, now, event data. Deletes a finished run and every
-- key of it; a run that has not finished is refused (nothing is deleted).
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return err('not_found') end
if not TERMINAL[st] then return err('not_terminal', st) end
delete_run(ARGV[2], ARGV[3], ARGV[4])
return {1}
