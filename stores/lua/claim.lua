-- ARGV: P, owner, now, expiry, limit, m, queue limits * m, n, flow * n,
--       [queue ...] (see scope_args)
local bad = badnum(ARGV[3], 'now') or badnum(ARGV[4], 'expiry') or badnum(ARGV[5], 'limit', true)
  or badnum(ARGV[6], 'limit count', true)
if bad then return err('invalid', bad) end
local queues, every, served, lims = scope_args(6)
if not queues then return err('invalid', every) end
-- A negative limit -k peeks (see peek): nothing is taken.
if tonumber(ARGV[5]) < 0 then
  return (peek(-tonumber(ARGV[5]), ARGV[2], queues, every, served, lims, ARGV[3]))
end
return (take(ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), queues, every, served, lims))
