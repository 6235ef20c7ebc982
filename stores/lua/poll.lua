-- ARGV: P, owner, now, expiry, limit, max recoveries, error JSON,
--       n, flow * n, [queue ...] (see scope_args)
-- A worker's whole loop in one round trip: maintain, then take.
local f, r, nt, nl = maintain(ARGV[3], 100, ARGV[6], ARGV[7])
local queues, every, served = scope_args(8)
return {{f, r, nt, nl},
        take(ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), queues, every, served)}
