-- KEYS: one partition's wake-up lists, in the order to take from. Takes one
-- token from the first list that has one: 1, or 0 when all are empty (what
-- BLPOP takes, without blocking). On Redis Cluster a worker waits for the
-- lists' sharded channels to ring and then takes a token with this
-- (stores._wakeups), on one partition whose lists have one.
for _, k in ipairs(KEYS) do
  if redis.call('LPOP', k) then return 1 end
end
return 0
