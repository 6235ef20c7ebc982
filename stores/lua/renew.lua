-- ARGV: P, expiry, (id, fence) ... Returns the ids whose lease is lost (a run
-- whose record cannot be worked with counts as lost: its next write says why).
local bad = badnum(ARGV[2], 'expiry')
if bad then return err('invalid', bad) end
local lost = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if fenced(id, ARGV[i + 1]) then
    redis.call('HSET', rk(id), 'lease_exp', ARGV[2])
    redis.call('ZADD', P .. K.leases, ARGV[2], id)
  else
    lost[#lost + 1] = id
  end
end
return lost
