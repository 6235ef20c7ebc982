-- ARGV: P, lease expiry, (intent id, delivery number) ... Extends the leases of
-- deliveries in progress; returns the ids no longer held (settled, canceled,
-- or delivered again by another worker after the lease ran out).
local bad = badnum(ARGV[2], 'lease expiry')
if bad then return err('invalid', bad) end
local lost = {}
for i = 3, #ARGV, 2 do
  local iid = ARGV[i]
  local h = redis.pcall('HMGET', ik(iid), 'status', 'n', 'channel')
  if h.err then h = {} end  -- not a hash: lost
  local st, d, ch = h[1], h[2], h[3]
  if st == 'pending' and d == ARGV[i + 1] and ch then
    redis.call('ZADD', P .. K.outbox .. ch, ARGV[2], iid)
  else
    lost[#lost + 1] = iid
  end
end
return lost
