-- ARGV: P, now, limit, flow, ...
-- The schedules of these flows that need a worker at `now` (a tick due, a trigger,
-- a buffered tick whose previous run ended), up to `limit`: each {id, its fields
-- (HGETALL), the status of its last run ('' if none or gone)}; and the earliest
-- time after `now` one will ('' if none). A schedule that is gone, or whose key
-- is not a hash, is taken off the index.
local now = ARGV[2]
local bad = badnum(now, 'now') or badnum(ARGV[3], 'limit', true)
if bad then return err('invalid', bad) end
local left = tonumber(ARGV[3])
local out, nxt = {}, nil
for i = 4, #ARGV do
  local due = P .. K.sched_due .. ARGV[i]
  if left > 0 then
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', due, '-inf', now, 'LIMIT', 0, left)) do
      local h = redis.pcall('HGETALL', P .. K.schedule .. id)
      if h.err or #h == 0 then
        redis.call('ZREM', due, id)
      else
        local last = ''
        for j = 1, #h, 2 do if h[j] == 'last_run' then last = h[j + 1] end end
        local st = last ~= '' and redis.pcall('HGET', rk(last), 'status')
        out[#out + 1] = {id, h, type(st) == 'string' and st or ''}
        left = left - 1
      end
    end
  end
  local later = redis.call('ZRANGEBYSCORE', due, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if later[2] and (not nxt or tonumber(later[2]) < tonumber(nxt)) then nxt = later[2] end
end
return {nxt or '', out}
