-- ARGV: P, owner, now, expiry, limit, n, flow * n, [queue ...] (see scope_args)
local queues, every, served = scope_args(6)
return take(ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), queues, every, served)
