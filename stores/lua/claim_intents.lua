-- ARGV: P, now, lease expiry, limit, channel ...
-- Leases up to `limit` due intents of the channels: their index score becomes
-- the lease expiry, so an unsettled delivery (a dead worker) is due again then.
-- Returns the claims (id, run, body, delivery number, failures) and the
-- earliest score left in those channels ('' if none).
local bad = badnum(ARGV[2], 'now') or badnum(ARGV[3], 'lease expiry') or badnum(ARGV[4], 'limit', true)
if bad then return err('invalid', bad) end
local now, exp, limit = ARGV[2], ARGV[3], tonumber(ARGV[4])
local out, soonest = {}, nil
for c = 5, #ARGV do
  local ch = ARGV[c]
  local q = P .. K.outbox .. ch
  -- the channel's first entry: when it is not due, nothing is (an idle channel
  -- costs this read and the token's DEL)
  local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  local due = first[2] ~= nil and tonumber(first[2]) <= tonumber(now)
  if due and #out < limit then
    for _, iid in ipairs(redis.call('ZRANGEBYSCORE', q, '-inf', now, 'LIMIT', 0, limit - #out)) do
      local key = ik(iid)
      local h = redis.pcall('HMGET', key, 'status', 'run', 'body', 'f', 'n')
      if h.err then h = {} end  -- not a hash: no intent can be read there
      local st, id, body, f = h[1], h[2], h[3], h[4]
      if st == 'pending' and id and body and (not h[5] or isint(h[5])) then
        local d = redis.call('HINCRBY', key, 'n', 1)
        redis.call('ZADD', q, exp, iid)
        out[#out + 1] = {iid, id, body, d, isint(f) and f or '0'}
      else
        redis.call('ZREM', q, iid)  -- settled or gone meanwhile (or unreadable): a stale entry
      end
    end
  end
  -- tokens are hints: with nothing due they would only cause empty claims
  if not due or #redis.call('ZRANGEBYSCORE', q, '-inf', now, 'LIMIT', 0, 1) == 0 then
    redis.call('DEL', P .. K.outbox_wake .. ch)
  end
  if due then first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES') end  -- claims moved it
  if first[2] and (soonest == nil or tonumber(first[2]) < tonumber(soonest)) then
    soonest = first[2]
  end
end
return {out, soonest or ''}
