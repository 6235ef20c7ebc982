-- KEYS: run. ARGV: P, id, args_hash, event data, max pending|'', field, value, ...
-- Returns {1, 'pending'} (created), {0 | -1, status} (the id exists: same
-- arguments or not), or {-2, depth} when the run's queue already holds `max
-- pending` ready runs (nothing written). A run with a start_at field later
-- than its creation waits on the timer index until then (maintain queues it).
-- A shared key it would write that cannot be worked with (its queue, an index)
-- answers err('index', key, what): nothing written.
local key, id = KEYS[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then
  local where, bad, st = damaged(id)
  if bad then return err('corrupt', where, bad) end
  local same = redis.call('HGET', key, 'args_hash') == ARGV[3]
  return {same and 0 or -1, st}
end
local fields = {'args_hash', ARGV[3]}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
local bad = bad_fields(fields) or badnum(ARGV[5], 'max pending', true, true)
if bad then return err('invalid', bad) end
local q, at, parent = nil, nil, nil
for i = 1, #fields, 2 do
  if fields[i] == 'queue' then q = fields[i + 1] elseif fields[i] == 'start_at' then at = fields[i + 1]
  elseif fields[i] == 'parent' then parent = fields[i + 1] end
end
if at and not isnum(at) then return err('invalid', 'start_at must be a finite number') end
-- the shared keys it writes (a queue of another type must not half-write a run)
local where
where, bad = queue_damage(q)
if not bad then
  local wants = {P .. K.status .. 'pending', 'zset', P .. K.runs, 'zset', P .. K.timers, 'zset',
                 P .. K.expiry, 'zset'}
  if parent then wants[9], wants[10] = P .. K.children .. parent, 'zset' end
  where, bad = mistyped_any(wants)
end
if bad then return err('index', where, bad) end
if ARGV[5] ~= '' then
  local depth = redis.call('ZCARD', P .. K.queue .. q)
  if depth >= tonumber(ARGV[5]) then return {-2, tostring(depth)} end
end
local log = P .. K.events .. id
bad = mistyped(log, 'stream')
if bad then return err('corrupt', log, bad) end
redis.call('HSET', key, unpack(fields))
move(id, 'pending')
local created = redis.call('HGET', key, 'created_at')
redis.call('ZADD', P .. K.runs, created, id)
if parent then redis.call('ZADD', P .. K.children .. parent, created, id) end
emit(id, 'run.created', created, '', ARGV[4])
if at and tonumber(at) > tonumber(created) then
  redis.call('ZADD', P .. K.timers, at, id)
  -- idle workers block until the deadline they knew of: let one look again
  nudge(q)
else
  enqueue(id)
end
return {1, 'pending'}
