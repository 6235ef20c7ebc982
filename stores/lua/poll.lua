-- ARGV: P, owner, now, expiry, limit, max recoveries, error JSON,
--       m, queue limits * m, n, flow * n, [queue ...] (see scope_args)
-- A worker's whole loop in one round trip: maintain, then take. The next due
-- time includes when a rate-limited queue next has room; the 7th tick value
-- lists the runs maintain failed (id, flow, reason, ...); the 8th is 1 when a
-- ready run waits for this worker's own cap (worker_concurrency); the 9th, in
-- the schedules' partition (0: tag p0, or p0.<n> with several), is when a
-- schedule of a served flow next needs a worker ('' if none): the worker reads
-- the schedules only then; the 10th lists the shared keys maintain rebuilt.
local bad = badnum(ARGV[3], 'now') or badnum(ARGV[4], 'expiry') or badnum(ARGV[5], 'limit', true)
  or badnum(ARGV[6], 'max recoveries', true) or badnum(ARGV[8], 'limit count', true)
if bad then return err('invalid', bad) end
local queues, every, served, lims = scope_args(8)
if not queues then return err('invalid', every) end
local f, r, nt, nl, fixed, damage, failed, rebuilt = maintain(ARGV[3], 100, ARGV[6], ARGV[7])
-- A negative limit -k peeks (see peek): nothing is taken, the k best come third.
local limit, best = tonumber(ARGV[5]), nil
local out, room, capped = take(ARGV[2], ARGV[3], ARGV[4], math.max(limit, 0), queues, every,
                               served, lims)
if room ~= '' and (nt == '' or tonumber(room) < tonumber(nt)) then nt = room end
if limit < 0 then
  best, capped, room = peek(-limit, ARGV[2], queues, every, served, lims, ARGV[3])
  if room and (nt == '' or room < tonumber(nt)) then nt = string.format('%.17g', room) end
end
local sched = ''
if served and (string.find(P, '{p0}:', 1, true) or string.find(P, '{p0.', 1, true)) then
  local names = {}  -- a scope is a name, or a name, a newline and a version
  for scope in pairs(served) do names[string.match(scope, '^[^\n]*')] = true end
  for name in pairs(names) do
    local first = redis.call('ZRANGE', P .. K.sched_due .. name, 0, 0, 'WITHSCORES')
    if first[2] and (sched == '' or tonumber(first[2]) < tonumber(sched)) then sched = first[2] end
  end
end
return {{f, r, nt, nl, fixed, damage, failed, capped and 1 or 0, sched, rebuilt}, out, best}
