-- KEYS: run. ARGV: P, id, fence, status, now, event data,
--       delete on success: the tombstone's deadline|'', retention seconds|'',
--       field, value, ...
local id = ARGV[2]
local bad = badnum(ARGV[5], 'now') or badnum(ARGV[7], 'deletion deadline', false, true)
  or badnum(ARGV[8], 'retention', false, true)
if bad then return err('invalid', bad) end
local run, where
run, where, bad = fenced(id, ARGV[3])
if not run then return bad and err('corrupt', where, bad) or -1 end
where, bad = damaged(id)  -- it moves the run, and may schedule its deletion
if not bad then
  where, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
end
if bad then return err('corrupt', where, bad) end
if ALLOWED.running[ARGV[4]] then  -- (another move is refused by move below)
  where, bad = move_damage('running', ARGV[4], {P .. K.expiry, 'zset'})
  if bad then return err('index', where, bad) end
end
local e = move(id, ARGV[4])
if e then return e end
local fields = {'finished_at', ARGV[5]}
for i = 9, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HINCRBY', KEYS[1], 'fence', 1)
unqueue(id)
emit(id, 'run.' .. ARGV[4], ARGV[5], '', ARGV[6])
checkpoint(id, 'run_finished', '', ARGV[4], ARGV[5])
if ARGV[4] == 'completed' and ARGV[7] ~= '' then
  entomb(id, ARGV[5], ARGV[7])
  return 1
end
finished(id, ARGV[4], ARGV[5])
expire(id, ARGV[5], ARGV[8])
return 1
