-- ARGV: P, owner, now, expiry, limit, max recoveries, error JSON,
--       n, flow * n, [queue ...] (see scope_args)
-- A worker's whole loop in one round trip: maintain, then take.
local bad = badnum(ARGV[3], 'now') or badnum(ARGV[4], 'expiry') or badnum(ARGV[5], 'limit', true)
  or badnum(ARGV[6], 'max recoveries', true) or badnum(ARGV[8], 'flow count', true)
if bad then return err('invalid', bad) end
local f, r, nt, nl, fixed, damage = maintain(ARGV[3], 100, ARGV[6], ARGV[7])
local queues, every, served = scope_args(8)
return {{f, r, nt, nl, fixed, damage},
        take(ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), queues, every, served)}
