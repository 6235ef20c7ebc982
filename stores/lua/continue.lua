-- continue_as_new. KEYS: run, journal. ARGV: P, id, fence, now, new args,
--   data of the live run's run.continued_as_new event, data of the archive's.
-- The generation the run is in ends: its record (copied, status completed,
-- reason continued_as_new, field continued_as), journal, write sequence,
-- checkpoints and lineage move to the run id "<id>~g<generation>" (the same
-- hash tag, so RENAME stays in this partition). The run keeps its id, its
-- signal mailboxes, dedup ids, outbox and event log, and starts its next generation
-- with the new arguments and an empty journal: still running, queued again.
local id, now = ARGV[2], ARGV[4]
local bad = badnum(now, 'now')
if bad then return err('invalid', bad) end
local run, where
run, where, bad = fenced(id, ARGV[3])
if not run then return bad and err('corrupt', where, bad) or -1 end
where, bad = damaged(id)
if bad then return err('corrupt', where, bad) end
local key = KEYS[1]
local gen = redis.call('HGET', key, 'gen') or '0'
if not isint(gen) then return err('corrupt', key, "field 'gen' is not an integer") end
local arch = id .. '~g' .. gen
local moved = {K.journal, K.jseq, K.checkpoints, K.lineage}
if redis.call('EXISTS', rk(arch), P .. K.events .. arch) > 0 then
  return err('corrupt', rk(arch), 'the id of the archive of generation ' .. gen .. ' is taken')
end
local watch = P .. K.evwatch .. id
where, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream',
                           watch, 'hash'})
if bad then return err('corrupt', where, bad) end
where, bad = queue_damage(redis.call('HGET', key, 'queue'))
if bad then return err('index', where, bad) end
-- the archived generation: a finished run record
local h = redis.call('HGETALL', key)
local kept = {}
local skip = {lease_owner = true, lease_exp = true, deadline = true, result = true,
              result_type = true, error = true, reason = true, slot = true,
              mail_n = true, mail_b = true}  -- the mailboxes stay with the run
for i = 1, #h, 2 do
  if not skip[h[i]] then kept[#kept + 1] = h[i]; kept[#kept + 1] = h[i + 1] end
end
redis.call('HSET', rk(arch), unpack(kept))
redis.call('HSET', rk(arch), 'status', 'completed', 'finished_at', now,
           'reason', 'continued_as_new', 'continued_as', id)
for _, s in ipairs(moved) do
  if redis.call('EXISTS', P .. s .. id) == 1 then redis.call('RENAME', P .. s .. id, P .. s .. arch) end
end
local created = redis.call('HGET', key, 'created_at')
redis.call('ZADD', P .. K.runs, created, arch)
redis.call('ZADD', P .. K.status .. 'completed', created, arch)
emit(arch, 'run.continued_as_new', now, '', ARGV[7])
checkpoint(arch, 'run_finished', '', 'completed', now)
finished(arch, 'completed')
expire(arch, now, '')
-- the live run: the next generation, from an empty journal. Its wait_for_event
-- calls that still listen (a race's losers) ended with the generation: they stop
-- listening, and events delivered for them go (index entries go at the next send).
for _, box in ipairs(redis.call('HVALS', watch)) do drop_box(id, box) end
redis.call('DEL', watch, P .. K.waits .. id)
redis.call('ZREM', P .. K.timers, id)
redis.call('HDEL', key, 'current_step', 'resume_from_checkpoint_id', 'lease_owner', 'lease_exp')
redis.call('HSET', key, 'args', ARGV[5], 'gen', string.format('%.0f', tonumber(gen) + 1),
           'jseq', '0', 'cp_n', '0', 'recoveries', '0')
redis.call('HINCRBY', key, 'fence', 1)
redis.call('ZREM', P .. K.leases, id)
vacate(id)  -- the next generation takes a slot again when it is claimed
emit(id, 'run.continued_as_new', now, '', ARGV[6])
checkpoint(id, 'run_started', '', 'running', now)
enqueue(id)
return 1
