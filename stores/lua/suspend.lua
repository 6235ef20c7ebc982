-- KEYS: run, journal. ARGV: P, id, fence, now, deadline|'', waiting status,
--       n records, (key, record) * n, n mailboxes, mailbox * n,
--       sticky delay|'', waiting_on|'', (human mailbox, its approvers one per line) ...
-- waiting_on (the engine's JSON: what the run waits for) is kept in field
-- waiting_on while the run is parked; move() drops it when the run leaves its
-- waiting status.
-- With a sticky delay, the parking worker keeps the run in memory: field sticky
-- ("fence:jseq:delay:owner") routes its wake-up to that worker first (enqueue,
-- head) and lets its next claim leave the journal out (sticky_hit).
-- Re-checks the mailboxes (and the deadline) in the same script that parks the
-- run, so a signal that landed after the activation looked is not lost.
local id = ARGV[2]
local bad = badnum(ARGV[4], 'now') or badnum(ARGV[5], 'deadline', false, true)
  or badnum(ARGV[7], 'record count', true)
  or (ARGV[6] ~= 'waiting_for_signal' and ARGV[6] ~= 'waiting_for_human'
      and 'the status must be a waiting status')
  or badnum(ARGV[8 + 2 * (tonumber(ARGV[7]) or 0)], 'mailbox count', true)
if bad then return err('invalid', bad) end
local sticky_at = 9 + 2 * tonumber(ARGV[7]) + tonumber(ARGV[8 + 2 * tonumber(ARGV[7])])
bad = badnum(ARGV[sticky_at], 'sticky delay', false, true)
if bad then return err('invalid', bad) end
if (#ARGV - sticky_at - 1) % 2 ~= 0 then
  return err('invalid', 'approvers must come in mailbox, approvers pairs')
end
local run, where
run, where, bad = fenced(id, ARGV[3])
if not run then return bad and err('corrupt', where, bad) or -1 end
where, bad = damaged(id)  -- it moves and may queue the run
if not bad then
  local wants = {P .. K.jseq .. id, 'hash', P .. K.events .. id, 'stream',
                 P .. K.checkpoints .. id, 'stream', P .. K.waits .. id, 'set',
                 P .. K.approvers .. id, 'hash'}
  local at = 8 + 2 * tonumber(ARGV[7])
  for j = at + 1, at + tonumber(ARGV[at]) do
    wants[#wants + 1], wants[#wants + 2] = mbk(id, ARGV[j]), 'list'
  end
  where, bad = mistyped_any(wants)
end
if bad then return err('corrupt', where, bad) end
where, bad = queue_damage(redis.call('HGET', KEYS[1], 'queue'))  -- (a ready run is queued)
if not bad then where, bad = move_damage('running', ARGV[6], {P .. K.timers, 'zset'}) end
if bad then return err('index', where, bad) end
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  journaled(id, run, KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local ready = ARGV[5] ~= '' and tonumber(ARGV[4]) >= tonumber(ARGV[5])
-- a cancel request the flow was not given yet (it came in after the activation
-- looked): run again at once, to give it
if redis.call('HGET', KEYS[1], 'cancel_at') and not redis.call('HGET', KEYS[2], '~cancel') then
  ready = true
end
local boxes = {}
local nbox = tonumber(ARGV[i])
for j = i + 1, i + nbox do
  boxes[#boxes + 1] = ARGV[j]
  if redis.call('LLEN', mbk(id, ARGV[j])) > 0 then ready = true end
end
i = i + 3 + nbox  -- past the sticky delay and waiting_on
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
local owner = redis.call('HGET', KEYS[1], 'lease_owner')
if ARGV[sticky_at] ~= '' and owner then
  redis.call('HSET', KEYS[1], 'sticky', string.format('%.0f', fence) .. ':' .. (run[3] or '0')
             .. ':' .. ARGV[sticky_at] .. ':' .. owner)
  redis.call('HDEL', KEYS[1], 'sticky_seen')
else
  redis.call('HDEL', KEYS[1], 'sticky', 'sticky_seen')
end
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_exp')
redis.pcall('ZREM', P .. K.leases, id)  -- (a damaged index holds no entry)
vacate(id)  -- a parked run holds no slot of its queue
if ready then
  enqueue(id)
  return 0
end
move(id, ARGV[6])
if ARGV[sticky_at + 1] ~= '' then
  redis.call('HSET', KEYS[1], 'waiting_on', ARGV[sticky_at + 1])
end
emit(id, 'run.' .. ARGV[6], ARGV[4], '', '')
checkpoint(id, ARGV[6], '', ARGV[6], ARGV[4])
redis.call('DEL', P .. K.waits .. id)
if #boxes > 0 then redis.call('SADD', P .. K.waits .. id, unpack(boxes)) end
-- who may approve each human wait (mailbox -> actors, one per line)
redis.call('DEL', P .. K.approvers .. id)
for j = i, #ARGV, 2 do redis.call('HSET', P .. K.approvers .. id, ARGV[j], ARGV[j + 1]) end
if ARGV[5] ~= '' then
  redis.call('ZADD', P .. K.timers, ARGV[5], id)
  -- idle workers block until the deadline they knew of: let one look again
  nudge(redis.call('HGET', KEYS[1], 'queue'))
end
return 1
