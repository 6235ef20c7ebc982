-- ARGV: P, expiry, (id, fence) ... Returns {the ids whose lease is lost, (id,
-- reason) of each run whose lease holds and that has a cancel request its flow
-- was not given yet (no ~cancel journal record)}. A run whose record cannot be
-- worked with counts as lost: its next write says why.
local bad = badnum(ARGV[2], 'expiry')
if bad then return err('invalid', bad) end
local lost, asked = {}, {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if fenced(id, ARGV[i + 1]) then
    local key = rk(id)
    redis.call('HSET', key, 'lease_exp', ARGV[2])
    redis.call('ZADD', P .. K.leases, ARGV[2], id)
    if redis.call('HGET', key, 'cancel_at')
        and not redis.pcall('HGET', P .. K.journal .. id, '~cancel') then
      asked[#asked + 1] = id
      asked[#asked + 1] = redis.call('HGET', key, 'cancel_reason') or ''
    end
  else
    lost[#lost + 1] = id
  end
end
return {lost, asked}
