-- ARGV: P, lease expiry, (intent id, delivery number) ... Extends the leases of
-- deliveries in progress; returns the ids no longer held (settled, canceled,
-- or delivered again by another worker after the lease ran out).
local lost = {}
for i = 3, #ARGV, 2 do
  local iid = ARGV[i]
  local st, d, ch = unpack(redis.call('HMGET', ik(iid), 'status', 'n', 'channel'))
  if st == 'pending' and d == ARGV[i + 1] then
    redis.call('ZADD', P .. K.outbox .. ch, ARGV[2], iid)
  else
    lost[#lost + 1] = iid
  end
end
return lost
