-- KEYS: run. ARGV: P, id, fence, status, now, event data,
--       delete on success: the tombstone's deadline|'', retention seconds|'',
--       field, value, ...
local id = ARGV[2]
if not fenced(id, ARGV[3]) then return -1 end
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
finished(id, ARGV[4])
expire(id, ARGV[5], ARGV[8])
return 1
