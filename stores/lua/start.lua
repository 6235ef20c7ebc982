-- KEYS: run. ARGV: P, id, args_hash, event data, field, value, ...
local key, id = KEYS[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then
  local where, bad, st = damaged(id)
  if bad then return err('corrupt', where, bad) end
  local same = redis.call('HGET', key, 'args_hash') == ARGV[3]
  return {same and 0 or -1, st}
end
local fields = {'args_hash', ARGV[3]}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local bad = bad_fields(fields)
if bad then return err('invalid', bad) end
local log = P .. K.events .. id
bad = mistyped(log, 'stream')
if bad then return err('corrupt', log, bad) end
redis.call('HSET', key, unpack(fields))
move(id, 'pending')
local created = redis.call('HGET', key, 'created_at')
redis.call('ZADD', P .. K.runs, created, id)
local parent = redis.call('HGET', key, 'parent')
if parent then redis.call('ZADD', P .. K.children .. parent, created, id) end
emit(id, 'run.created', created, '', ARGV[4])
enqueue(id)
return {1, 'pending'}
