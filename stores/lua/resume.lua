-- KEYS: run, journal. ARGV: P, id, step key whose failure record to discard|'',
--       now, event data, flow version to move the run to|'' (keep it),
--       [fence, checkpoint id|'', key * n: a canceled run's rewind]
-- The explicit way out of failed/canceled (and a nudge for a waiting run). It
-- continues from the checkpoint head (waiting) or the newest checkpoint before
-- the run finished (failed, canceled): resume_from_checkpoint_id.
-- A rewind (a canceled run whose flow was given its cancel): the records at the
-- keys go (the cancel and what the flow's cleanup wrote after it; the caller
-- read the run at `fence` and chose them), their step_completed checkpoints
-- stay listed (moved into the checkpoint stream, like a failure's), and the run
-- continues from the checkpoint given. Refused with 'changed' unless the run
-- is still canceled at that fence (every claim and cancel bumps it): the caller
-- reads it again.
-- With a version, also a queued run that no activation holds (pending,
-- replaying after its lease expired, or running and handed back) moves onto it,
-- keeping its queue position.
local id = ARGV[2]
local rewind = (ARGV[7] or '') ~= ''
local bad = badnum(ARGV[4], 'now')
  or (rewind and (badnum(ARGV[7], 'fence', true) or badnum(ARGV[8], 'checkpoint id', true, true)))
if bad then return err('invalid', bad) end
local where, st
where, bad, st = damaged(id)
if not bad then
  where, bad = mistyped_any({KEYS[2], 'hash', P .. K.jseq .. id, 'hash',
                             P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
end
if not bad then where, bad = intents_mistyped(id) end
if bad then return err('corrupt', where, bad) end
if not st then return err('not_found') end
local version = ARGV[6] or ''
local queued = version ~= '' and (st == 'pending' or st == 'replaying'
    or (st == 'running' and not redis.call('ZSCORE', P .. K.leases, id)))
if not (queued or st == 'failed' or st == 'canceled' or st == 'waiting_for_signal'
        or st == 'waiting_for_human') then
  return err('transition', st, 'running')
end
if rewind and (st ~= 'canceled' or redis.call('HGET', KEYS[1], 'fence') ~= ARGV[7]) then
  return err('changed', st)
end
where, bad = queue_damage(redis.call('HGET', KEYS[1], 'queue'))
if not bad and not queued then
  where, bad = move_damage(st, 'running', {P .. K.timers, 'zset', P .. K.expiry, 'zset',
                                           P .. K.deadlines, 'zset'})
end
if bad then return err('index', where, bad) end
if version ~= '' then redis.call('HSET', KEYS[1], 'flow_version', version) end
if queued then
  emit(id, 'run.resumed', ARGV[4], '', ARGV[5])
  local q = redis.call('HGET', KEYS[1], 'queue')
  if redis.call('ZSCORE', P .. K.queue .. q, id) then nudge(q) end
  return {1}
end
local head = tonumber(redis.call('HGET', KEYS[1], 'cp_n') or '0')
if TERMINAL[st] and head > 0 then head = head - 1 end  -- the one before run_finished
if ARGV[3] ~= '' then
  -- the failure is discarded: when the newest checkpoint before run_finished
  -- is the one the failing step took, continue from the one before it
  local last = redis.call('XREVRANGE', P .. K.checkpoints .. id, '+', '-', 'COUNT', 2)[2]
  if last then
    local f = {}
    for j = 1, #last[2], 2 do f[last[2][j]] = last[2][j + 1] end
    if tonumber(f.id) == head and f.step == ARGV[3] then head = head - 1 end
  end
  redis.call('HDEL', KEYS[2], ARGV[3])
  redis.call('HDEL', P .. K.jseq .. id, ARGV[3])
end
local dropped = {}
if rewind then
  local js, cps = P .. K.jseq .. id, P .. K.checkpoints .. id
  for j = 9, #ARGV do
    local step = ARGV[j]
    local seq, cid, at = string.match(redis.call('HGET', js, step) or '', '^(%d+):(%d+):(.+)$')
    if cid then
      redis.call('XADD', cps, '*', 'id', cid, 'kind', 'step_completed', 'step', step,
                 'status', 'running', 'at', at, 'seq', seq)
    end
    redis.call('HDEL', KEYS[2], step)
    redis.call('HDEL', js, step)
    dropped[step] = true
  end
  head = tonumber(ARGV[8]) or 0
  -- (a worker keeping the run in memory holds its cleanup: it must replay)
  redis.call('HDEL', KEYS[1], 'sticky', 'sticky_seen')
end
redis.call('HDEL', KEYS[1], 'result', 'result_type', 'error', 'reason', 'finished_at',
           'expires_at')
redis.call('ZREM', P .. K.expiry, id)
redis.call('HSET', KEYS[1], 'recoveries', '0', 'resume_from_checkpoint_id', head)
redis.call('DEL', P .. K.done .. id)
move(id, 'running', true)
emit(id, 'run.resumed', ARGV[4], '', ARGV[5])
if st == 'canceled' then restore_intents(id, ARGV[4], dropped) end
redis.call('DEL', P .. K.waits .. id)
redis.call('ZREM', P .. K.timers, id)
-- an ended run starts over with its whole timeout, and its cancel request is
-- over; a waiting one keeps its deadline (and its request still stands)
if TERMINAL[st] then
  arm(id, ARGV[4])
  redis.call('HDEL', KEYS[1], 'cancel_reason', 'cancel_at', 'cancel_ev')
end
enqueue(id)
return {1}
