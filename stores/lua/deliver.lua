-- KEYS: run. ARGV: P, id, index token, mailbox, payload JSON, dedup id, now, event data
-- Delivers one event to one run found in the filter's index (send_event): only
-- while one of its wait_for_event calls listens on that mailbox; an index entry
-- of a run that no longer listens (it ended, was deleted, or stopped waiting)
-- is dropped here. Answers {1} delivered, {0} the dedup id was seen, {2} not
-- listening; an event past the store's bounds (admit) is refused.
local id = ARGV[2]
local bad = badnum(ARGV[7], 'now')
if bad then return err('invalid', bad) end
local where, st
where, bad, st = damaged(id)
if not bad then
  where, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.dedup .. id, 'set',
                             mbk(id, ARGV[4]), 'list', P .. K.mailboxes .. id, 'set',
                             P .. K.waits .. id, 'set', P .. K.evwatch .. id, 'hash',
                             P .. K.evindex .. ARGV[3], 'set'})
end
if bad then return err('corrupt', where, bad) end
local listening = false
if st and not TERMINAL[st] then
  for _, b in ipairs(redis.call('HVALS', P .. K.evwatch .. id)) do
    if b == ARGV[4] then listening = true break end
  end
end
if not listening then
  redis.call('SREM', P .. K.evindex .. ARGV[3], id)
  return {2}
end
local wakes = (st == 'waiting_for_signal' or st == 'waiting_for_human')
  and redis.call('SISMEMBER', P .. K.waits .. id, ARGV[4]) == 1
if wakes then
  where, bad = wake_damage(id, st)
  if bad then return err('index', where, bad) end
end
if redis.call('SISMEMBER', P .. K.dedup .. id, ARGV[6]) == 1 then return {0} end
local full = admit(id, ARGV[4], ARGV[5], false)
if full then return full end
redis.call('SADD', P .. K.dedup .. id, ARGV[6])
redis.call('RPUSH', mbk(id, ARGV[4]), ARGV[5])
redis.call('SADD', P .. K.mailboxes .. id, ARGV[4])
tally(id, ARGV[4], 1, #ARGV[5])
emit(id, 'event.delivered', ARGV[7], '', ARGV[8])
if wakes then wake_run(id) end
return {1}
