-- KEYS: run, journal. ARGV: P, id, fence, step key, mailbox, now, deadline|'',
--       record prefix (ends in "value":), timeout record,
--       and for a wait_for_event: index token, event name, filter shape
-- A wait_for_event listens (evw: step key -> mailbox; its run in the filter's
-- index) from its first consume until it takes an event or times out; its
-- run's last wait on that mailbox leaving drops the index entry and any events
-- left in the mailbox (an event counts only for the waits it was sent during).
local id = ARGV[2]
local index = ARGV[10] or ''
local function unwatch()
  if index == '' then return end
  local w = P .. K.evwatch .. id
  redis.call('HDEL', w, ARGV[4])
  for _, b in ipairs(redis.call('HVALS', w)) do if b == ARGV[5] then return end end
  redis.call('SREM', P .. K.evindex .. index, id)
  drop_box(id, ARGV[5])
end
local bad = badnum(ARGV[6], 'now') or badnum(ARGV[7], 'deadline', false, true)
if bad then return err('invalid', bad) end
local run, where
run, where, bad = fenced(id, ARGV[3])
if not run then return bad and err('corrupt', where, bad) or {-1} end
where, bad = mistyped_any({KEYS[2], 'hash', P .. K.jseq .. id, 'hash', P .. K.events .. id, 'stream',
                           mbk(id, ARGV[5]), 'list'})
if not bad and index ~= '' then
  where, bad = mistyped_any({P .. K.evwatch .. id, 'hash', P .. K.evindex .. index, 'set',
                             P .. K.evshapes .. ARGV[11], 'set'})
end
if bad then return err('corrupt', where, bad) end
-- The client retries a call whose reply was lost: if the first run already
-- consumed (or timed out), answer the same instead of popping another signal.
local prev = redis.call('HGET', KEYS[2], ARGV[4])
if prev then
  if string.sub(prev, 1, #ARGV[8]) == ARGV[8] then
    return {1, string.sub(prev, #ARGV[8] + 1, -2)}
  end
  if prev == ARGV[9] then return {2} end
end
if index ~= '' then
  redis.call('HSET', P .. K.evwatch .. id, ARGV[4], ARGV[5])
  redis.call('SADD', P .. K.evindex .. index, id)
  redis.call('SADD', P .. K.evshapes .. ARGV[11], ARGV[12])
end
local v = redis.call('LPOP', mbk(id, ARGV[5]))
if v then
  tally(id, ARGV[5], -1, -#v)
  unwatch()
  journaled(id, run, KEYS[2], ARGV[4], ARGV[8] .. v .. '}')
  emit(id, 'wait.completed', ARGV[6], ARGV[4], '', run[3])
  return {1, v}
end
if ARGV[7] ~= '' and tonumber(ARGV[6]) >= tonumber(ARGV[7]) then
  unwatch()
  journaled(id, run, KEYS[2], ARGV[4], ARGV[9])
  emit(id, 'wait.timed_out', ARGV[6], ARGV[4], '', run[3])
  return {2}
end
return {0}
