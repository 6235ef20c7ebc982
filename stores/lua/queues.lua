-- ARGV: P, now, m, queue limits * m, 0, [queue ...] (see scope_args; none:
-- every queue that has had runs, plus the ones named).
-- Reads only: for each queue {name, ready runs, executing runs, the oldest
-- ready pending run's creation or delayed start time|'', the limit holding it
-- back now|''}. The oldest is looked for among the partition's 1,000 oldest
-- pending runs (a bound on the work; older ones are a backlog either way).
-- A queue, or the list of queues, of another type answers err('index', key, what).
local bad = badnum(ARGV[2], 'now') or badnum(ARGV[3], 'limit count', true)
if bad then return err('invalid', bad) end
local queues, every, _, lims = scope_args(3)
if not queues then return err('invalid', every) end
bad = mistyped(P .. K.queues, 'set')
if bad then return err('index', P .. K.queues, bad) end
local seen = {}
for _, q in ipairs(queues) do seen[q] = true end
for _, q in ipairs(redis.call('SMEMBERS', P .. K.queues)) do
  if not seen[q] then queues[#queues + 1] = q; seen[q] = true end
end
for _, q in ipairs(queues) do
  bad = mistyped(P .. K.queue .. q, 'zset')
  if bad then return err('index', P .. K.queue .. q, bad) end
end
local oldest = {}
for _, id in ipairs(redis.call('ZRANGE', P .. K.status .. 'pending', 0, 999)) do
  local f = redis.pcall('HMGET', rk(id), 'queue', 'created_at', 'start_at')
  if not f.err and f[1] and seen[f[1]] and redis.call('ZSCORE', P .. K.queue .. f[1], id) then
    local at = math.max(tonumber(f[2]) or 0, tonumber(f[3]) or 0)
    if not oldest[f[1]] or at < oldest[f[1]] then oldest[f[1]] = at end
  end
end
local out = {}
for _, q in ipairs(queues) do
  local id, why = head(q, nil, lims[q], ARGV[2])
  if id then why = '' end
  -- (a slot set of another type counts as empty: the next claim replaces it)
  local busy = redis.pcall('ZCARD', P .. K.qslots .. q)
  out[#out + 1] = {q, redis.call('ZCARD', P .. K.queue .. q), type(busy) == 'number' and busy or 0,
                   oldest[q] and string.format('%.17g', oldest[q]) or '', why or ''}
end
return out
