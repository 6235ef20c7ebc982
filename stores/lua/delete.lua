-- KEYS: run. ARGV: P, id, now, event data, audit data|'' (default: the event
-- data). Deletes a finished run and every key of it; a run that has not
-- finished is refused (nothing is deleted). A run whose record is not a hash
-- or has no status that can be read is deleted too: no script runs it, and
-- deleting is how an operator gets rid of it. The deletion is also an entry of
-- the partition's audit log (K.audit), which outlives the run.
local bad = badnum(ARGV[3], 'now')
if bad then return err('invalid', bad) end
if not mistyped(KEYS[1], 'hash') then
  local st = redis.call('HGET', KEYS[1], 'status')
  if not st then
    if redis.call('EXISTS', KEYS[1]) == 0 then return err('not_found') end
  elseif ALLOWED[st] and not TERMINAL[st] then
    return err('not_terminal', st)
  end
end
bad = mistyped(P .. K.audit, 'stream')
if bad then return err('corrupt', P .. K.audit, bad) end
local audit = ARGV[5] or ''
audit_entry(K.audit, 'run.deleted', ARGV[3], ARGV[2], '', audit ~= '' and audit or ARGV[4])
delete_run(ARGV[2], ARGV[3], ARGV[4])
return {1}
