-- KEYS: run. ARGV: P, id, mailbox, payload JSON, dedup id|'', now, event data,
--       '1' for a decision (the run must be waiting on that mailbox)|'', actor
-- A message past the store's bounds (admit) is refused, writing nothing.
local id = ARGV[2]
local bad = badnum(ARGV[6], 'now')
if bad then return err('invalid', bad) end
local where, st
where, bad, st = damaged(id)
if not bad then
  where, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.dedup .. id, 'set',
                             mbk(id, ARGV[3]), 'list', P .. K.mailboxes .. id, 'set',
                             P .. K.waits .. id, 'set', P .. K.approvers .. id, 'hash'})
end
if bad then return err('corrupt', where, bad) end
if not st then return err('not_found') end
-- a repeated dedup id is answered as one in every status (a retried webhook whose
-- first delivery finished the run, a retried call): before the state checks
if ARGV[5] ~= '' and redis.call('SISMEMBER', P .. K.dedup .. id, ARGV[5]) == 1 then
  return {0}
end
if TERMINAL[st] then return err('transition', st, 'running') end
if ARGV[8] == '1' then
  if not (st == 'waiting_for_human'
          and redis.call('SISMEMBER', P .. K.waits .. id, ARGV[3]) == 1) then
    return err('not_waiting', st)
  end
  local allowed = redis.call('HGET', P .. K.approvers .. id, ARGV[3])
  if allowed and not string.find('\n' .. allowed .. '\n', '\n' .. ARGV[9] .. '\n', 1, true) then
    emit(id, 'auth.denied', ARGV[6], '', ARGV[7])
    return err('forbidden', ARGV[9])
  end
end
local wakes = (st == 'waiting_for_signal' or st == 'waiting_for_human')
  and redis.call('SISMEMBER', P .. K.waits .. id, ARGV[3]) == 1
if wakes then
  where, bad = wake_damage(id, st)
  if bad then return err('index', where, bad) end
end
local full = admit(id, ARGV[3], ARGV[4], ARGV[8] == '1')
if full then return full end
if ARGV[5] ~= '' then redis.call('SADD', P .. K.dedup .. id, ARGV[5]) end
redis.call('RPUSH', mbk(id, ARGV[3]), ARGV[4])
redis.call('SADD', P .. K.mailboxes .. id, ARGV[3])
tally(id, ARGV[3], 1, #ARGV[4])
emit(id, 'signal.received', ARGV[6], '', ARGV[7])
if wakes then wake_run(id) end
return {1}
