-- The helpers every script may use. A script gets only the definitions it
-- uses, transitively (Redis runs a script's whole prelude on every call), each
-- with the comment lines right above it; stores._scripts assembles them once.
--
-- Filled in when the scripts are built:
-- - @EVENTS_MAX@: the store's max_events_per_run;
-- - the `@generated` line: ALLOWED (the transition table), TERMINAL and
--   RUN_KEYS, generated from their one Python source;
-- - K.name: the key suffix itself (a table of them would be built per call).
--
-- Rules that keep real Redis and fakeredis in agreement: see stores._scripts.
-- These header lines (up to the first line that is not a comment) are not sent.

local P = ARGV[1]
local unpack = unpack or table.unpack
local EVENTS_MAX = @EVENTS_MAX@
-- @generated: ALLOWED, TERMINAL, RUN_KEYS (stores._scripts._lua_table)

local function rk(id) return P .. K.run .. id end
-- run ids may contain ':', so the mailbox key length-prefixes the id
local function mbk(id, name) return P .. K.mailbox .. #id .. ':' .. id .. ':' .. name end
local function err(code, a, b) return {'err', code, a or '', b or ''} end

-- Move a run to `to`, keeping the per-status index right. Returns an error
-- table when the transition table forbids it (unless `explicit`), else nil.
local function move(id, to, explicit)
  local key = rk(id)
  local from = redis.call('HGET', key, 'status')
  if from then
    if not explicit and not (ALLOWED[from] and ALLOWED[from][to]) then
      return err('transition', from, to)
    end
    redis.call('ZREM', P .. K.status .. from, id)
  else
    -- a new run: drop what a deleted run of the same id left for its
    -- result() waiters (tombstone, done notice), or it would look finished
    redis.call('UNLINK', P .. K.gone .. id, P .. K.done .. id)
    redis.call('ZREM', P .. K.expiry, id)
  end
  redis.call('HSET', key, 'status', to)
  redis.call('ZADD', P .. K.status .. to, redis.call('HGET', key, 'created_at'), id)
  return nil
end

-- Put a run on its ready queue (lower priority first, FIFO within one) and
-- leave a wake-up token for the workers of that queue and of every queue.
local function nudge(q)
  for _, w in ipairs({P .. K.wake .. q, P .. K.wake .. '*'}) do
    redis.call('LPUSH', w, '1')
    redis.call('LTRIM', w, 0, 1023)
  end
end

local function enqueue(id)
  local key = rk(id)
  local q = redis.call('HGET', key, 'queue')
  local prio = tonumber(redis.call('HGET', key, 'priority'))
  local seq = redis.call('INCR', P .. K.seq)
  redis.call('ZADD', P .. K.queue .. q, string.format('%.0f', prio * 1099511627776 + seq), id)
  redis.call('SADD', P .. K.queues, q)
  nudge(q)
end

-- Take a run off every index that would make it run or wake.
local function unqueue(id)
  local key = rk(id)
  redis.call('ZREM', P .. K.queue .. redis.call('HGET', key, 'queue'), id)
  redis.call('ZREM', P .. K.timers, id)
  redis.call('ZREM', P .. K.leases, id)
  redis.call('DEL', P .. K.waits .. id)
  redis.call('HDEL', key, 'lease_owner', 'lease_exp')
end

-- A write of an activation is allowed only with the current fencing token
-- while the run is running: a lost lease, a takeover or a cancel all bump it.
-- Returns the run's write counters {fence, status, jseq, cp_n} (for
-- journaled) when the write may go ahead, else nil.
local function fenced(id, fence)
  local run = redis.call('HMGET', rk(id), 'fence', 'status', 'jseq', 'cp_n')
  if run[1] == fence and run[2] == 'running' then return run end
  return nil
end

-- Append an event to the run's log and publish it on the partition's feed.
-- Fields, not JSON: `data` is JSON made by the client and passed through.
-- The log is capped (MAXLEN ~ EVENTS_MAX) by a separate XTRIM: trimming costs
-- an XADD several µs, so an event that comes with a numbered write (`seq`: a
-- journal write's number, or an optional step_started checkpoint's id) trims
-- only at every 100th; every other event trims at once.
local function emit(id, etype, at, step, data, seq)
  step, data = step or '', data or ''
  local log = P .. K.events .. id
  local eid
  if step == '' and data == '' then
    eid = redis.call('XADD', log, '*', 'type', etype, 'at', at)
  elseif data == '' then
    eid = redis.call('XADD', log, '*', 'type', etype, 'at', at, 'step', step)
  elseif step == '' then
    eid = redis.call('XADD', log, '*', 'type', etype, 'at', at, 'data', data)
  else
    eid = redis.call('XADD', log, '*', 'type', etype, 'at', at, 'step', step, 'data', data)
  end
  if not seq or tonumber(seq) % 100 == 0 then
    redis.call('XTRIM', log, 'MAXLEN', '~', EVENTS_MAX)
  end
  -- Live followers get it by Pub/Sub (nothing stored; nearly free with no
  -- subscriber): fields "<byte length>:<bytes>" in the order run, event id,
  -- type, at, step, data. They look trace and tenant ids up once per run.
  redis.call('PUBLISH', P .. K.feed, #id .. ':' .. id .. #eid .. ':' .. eid .. #etype .. ':'
             .. etype .. #at .. ':' .. at .. #step .. ':' .. step .. #data .. ':' .. data)
  return eid
end

-- Take a checkpoint: it covers the journal writes made so far (seq). Ids are
-- the run's counter cp_n, which is also its checkpoint head.
local function checkpoint(id, kind, step, status, at)
  local key = rk(id)
  local n = redis.call('HINCRBY', key, 'cp_n', 1)
  redis.call('XADD', P .. K.checkpoints .. id, '*', 'id', n, 'kind', kind, 'step', step or '',
             'status', status, 'at', at, 'seq', redis.call('HGET', key, 'jseq') or '0')
  return n
end

-- A journal write: the record, its write sequence (js: entry), the run's
-- progress. `run` is what fenced() returned; its counters are advanced here and
-- written back with the progress in one HSET, so take checkpoints (which count
-- on the hash) only after a script's journal writes. With `at`, the write is
-- also a step_completed checkpoint: a completed step's record is final, so that
-- checkpoint lives in its js: entry ("seq:id:at") instead of a stream entry
-- (see RedisStore.checkpoints).
local function journaled(id, run, jkey, step, record, at)
  run[3] = string.format('%.0f', (tonumber(run[3]) or 0) + 1)
  run[4] = run[4] or '0'
  local mark = run[3]
  if at then
    run[4] = string.format('%.0f', tonumber(run[4]) + 1)
    mark = mark .. ':' .. run[4] .. ':' .. at
  end
  redis.call('HSET', jkey, step, record)
  redis.call('HSET', P .. K.jseq .. id, step, mark)
  redis.call('HSET', rk(id), 'current_step', step, 'recoveries', '0',
             'jseq', run[3], 'cp_n', run[4])
end

-- A one-element list: waiters read it without taking it (BRPOPLPUSH onto
-- itself), so every waiter wakes; ~200 bytes where a one-entry stream took ~4.7 KB.
local function finished(id, status)
  redis.call('DEL', P .. K.done .. id)
  redis.call('RPUSH', P .. K.done .. id, status)
end

-- Outbox. An intent is a hash of its own (ik), listed in its run's set and,
-- while pending, in its channel's index (score: when it is due, or when the
-- lease of its delivery in progress ends). Its body is JSON made by the client;
-- `tail` is the end of its events' data (after the intent id).
local function ik(iid) return P .. K.intent .. iid end
local function intent_data(iid, tail) return '{"intent_id":"' .. iid .. '",' .. tail end

local function wake_outbox(channel)
  local w = P .. K.outbox_wake .. channel
  redis.call('LPUSH', w, '1')
  redis.call('LTRIM', w, 0, 1023)
end

local function add_intent(id, step, channel, body, tail, now)
  local iid = string.format('%.0f', redis.call('INCR', P .. K.intent_seq))
  redis.call('HSET', ik(iid), 'run', id, 'step', step, 'channel', channel, 'body', body,
             'tail', tail, 'status', 'pending', 'n', '0', 'f', '0', 'at', now, 'due', now)
  redis.call('SADD', P .. K.intents .. id, iid)
  redis.call('ZADD', P .. K.outbox .. channel, now, iid)
  wake_outbox(channel)
  emit(id, 'side_effect.recorded', now, step, intent_data(iid, tail))
end

-- The run's intent ids in the order they were recorded.
local function intents_of(id)
  local ids = redis.call('SMEMBERS', P .. K.intents .. id)
  table.sort(ids, function(a, b) return tonumber(a) < tonumber(b) end)
  return ids
end

-- Canceling a run cancels its pending intents (one in delivery may still land).
local function cancel_intents(id, now)
  for _, iid in ipairs(intents_of(id)) do
    local key = ik(iid)
    local st, ch, step, tail = unpack(redis.call('HMGET', key, 'status', 'channel', 'step', 'tail'))
    if st == 'pending' then
      redis.call('HSET', key, 'status', 'canceled', 'at', now)
      redis.call('HDEL', key, 'due')
      redis.call('ZREM', P .. K.outbox .. ch, iid)
      emit(id, 'outbox.canceled', now, step, intent_data(iid, tail))
    end
  end
end

-- Resuming a canceled run makes its canceled intents pending again: the steps
-- that recorded them are not run again, so nothing else would send them.
local function restore_intents(id, now)
  for _, iid in ipairs(intents_of(id)) do
    local key = ik(iid)
    local st, ch, step, tail = unpack(redis.call('HMGET', key, 'status', 'channel', 'step', 'tail'))
    if st == 'canceled' then
      redis.call('HSET', key, 'status', 'pending', 'at', now, 'due', now)
      redis.call('ZADD', P .. K.outbox .. ch, now, iid)
      wake_outbox(ch)
      emit(id, 'outbox.restored', now, step, intent_data(iid, tail))
    end
  end
end

-- Deleting a run drops its settled intents; pending ones are still delivered
-- and dropped when settled (their run's set no longer lists them).
local function purge_intents(id)
  for _, iid in ipairs(redis.call('SMEMBERS', P .. K.intents .. id)) do
    if redis.call('HGET', ik(iid), 'status') ~= 'pending' then redis.call('UNLINK', ik(iid)) end
  end
end

-- Retention. Delete every key of a run (RUN_KEYS and its mailboxes) and take
-- it off every index. UNLINK: a long journal or event log is freed lazily.
local function purge(id)
  local key = rk(id)
  local st, q = unpack(redis.call('HMGET', key, 'status', 'queue'))
  if st then redis.call('ZREM', P .. K.status .. st, id) end
  if q then redis.call('ZREM', P .. K.queue .. q, id) end
  for _, z in ipairs({K.runs, K.timers, K.leases, K.expiry}) do redis.call('ZREM', P .. z, id) end
  for _, name in ipairs(redis.call('SMEMBERS', P .. K.mailboxes .. id)) do
    redis.call('UNLINK', mbk(id, name))
  end
  purge_intents(id)
  local doomed = {}
  for _, s in ipairs(RUN_KEYS) do doomed[#doomed + 1] = P .. s .. id end
  redis.call('UNLINK', unpack(doomed))
end

-- Delete a finished run. Its own event log goes with it, so the deletion is
-- announced on the feed only (the event is written, then purged).
local function delete_run(id, now, data)
  emit(id, 'run.deleted', now, '', data)
  purge(id)
end

-- Schedule the deletion of a completed or canceled run `retention` seconds
-- after `now` (default: the retention recorded when it started, if any). A
-- failed run is never scheduled: it is kept until deleted explicitly.
local function expire(id, now, retention)
  local key = rk(id)
  local st = redis.call('HGET', key, 'status')
  if st ~= 'completed' and st ~= 'canceled' then return end
  if not retention or retention == '' then retention = redis.call('HGET', key, 'retention') end
  if not retention then return end
  local at = string.format('%.17g', tonumber(now) + tonumber(retention))
  redis.call('HSET', key, 'expires_at', at)
  redis.call('ZADD', P .. K.expiry, at, id)
end

-- delete_on_success: delete a completed run at once, but keep its record
-- (without its arguments) as a tombstone and its done notice until `grace`,
-- so that result() waiters still get the result.
local function entomb(id, now, grace)
  local h = redis.call('HGETALL', rk(id))
  local kept = {'args', ''}
  for i = 1, #h, 2 do
    if h[i] ~= 'args' then kept[#kept + 1] = h[i]; kept[#kept + 1] = h[i + 1] end
  end
  delete_run(id, now, '{"reason":"delete_on_success"}')
  redis.call('HSET', P .. K.gone .. id, unpack(kept))
  finished(id, 'completed')
  redis.call('ZADD', P .. K.expiry, grace, id)
end

local function wake_run(id)
  local e = move(id, 'running')
  if e then return e end
  redis.call('DEL', P .. K.waits .. id)
  redis.call('ZREM', P .. K.timers, id)
  enqueue(id)
  return nil
end

-- Fire due timers and recover runs whose lease expired. Returns
-- fired, recovered, next timer due ('' if none), next lease expiry ('' if none).
local function maintain(now, limit, max_recoveries, recovery_error)
  local fired, recovered = 0, 0
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. K.timers, '-inf', now, 'LIMIT', 0, limit)) do
    redis.call('ZREM', P .. K.timers, id)
    local st = redis.call('HGET', rk(id), 'status')
    if st == 'waiting_for_signal' or st == 'waiting_for_human' then
      wake_run(id)
      fired = fired + 1
    end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. K.leases, '-inf', now, 'LIMIT', 0, limit)) do
    local key = rk(id)
    redis.call('ZREM', P .. K.leases, id)
    if redis.call('HGET', key, 'status') == 'running' then
      redis.call('HINCRBY', key, 'fence', 1)
      redis.call('HDEL', key, 'lease_owner', 'lease_exp')
      if redis.call('HINCRBY', key, 'recoveries', 1) > tonumber(max_recoveries) then
        move(id, 'failed')
        redis.call('HSET', key, 'finished_at', now, 'error', recovery_error,
                   'reason', 'max_recoveries_exceeded')
        unqueue(id)
        emit(id, 'run.failed', now, '', recovery_error)
        checkpoint(id, 'run_finished', '', 'failed', now)
        finished(id, 'failed')
      else
        move(id, 'replaying')
        emit(id, 'run.lease_expired', now, '', '')
        enqueue(id)
      end
      recovered = recovered + 1
    end
  end
  -- Retention: delete runs whose time is up, and tombstones whose grace is.
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. K.expiry, '-inf', now, 'LIMIT', 0, limit)) do
    local key = rk(id)
    local st = redis.call('HGET', key, 'status')
    local at = redis.call('HGET', key, 'expires_at')
    if not st then
      redis.call('UNLINK', P .. K.gone .. id, P .. K.done .. id)
      redis.call('ZREM', P .. K.expiry, id)
    elseif (st == 'completed' or st == 'canceled') and at and tonumber(at) <= tonumber(now) then
      delete_run(id, now, '{"reason":"retention"}')
    else
      redis.call('ZREM', P .. K.expiry, id)  -- stale: the run was resumed
    end
  end
  local nt = redis.call('ZRANGE', P .. K.timers, 0, 0, 'WITHSCORES')
  local nl = redis.call('ZRANGE', P .. K.leases, 0, 0, 'WITHSCORES')
  return fired, recovered, nt[2] or '', nl[2] or ''
end

-- The first ready run of queue `q` this worker may take: of a flow in
-- `served` (nil: any flow), within the first 64; other flows' runs stay
-- queued for the workers that serve them. Returns id and score, or nil.
local function head(q, served)
  local r = redis.call('ZRANGE', P .. K.queue .. q, 0, served and 63 or 0, 'WITHSCORES')
  for i = 1, #r, 2 do
    local flow = served and redis.call('HGET', rk(r[i]), 'flow')
    -- a vanished run (no flow) is taken too, so that it is dropped below
    if not served or not flow or served[flow] then return r[i], tonumber(r[i + 1]) end
  end
  return nil
end

-- Take up to `limit` ready runs (lowest score first across `queues`; every
-- queue when `every`), lease them to `owner`, and return for each its run
-- hash, its whole journal, its non-empty mailboxes and its lineage records.
local function take(owner, now, expiry, limit, queues, every, served)
  if every then queues = redis.call('SMEMBERS', P .. K.queues) end
  local out = {}
  local n = 0
  while n < limit do
    local best, bestq, bests = nil, nil, nil
    for _, q in ipairs(queues) do
      local id, score = head(q, served)
      if id and (best == nil or score < bests) then
        best, bestq, bests = id, q, score
      end
    end
    if best == nil then break end
    redis.call('ZREM', P .. K.queue .. bestq, best)
    local key = rk(best)
    local st = redis.call('HGET', key, 'status')
    -- anything else is a stale entry (e.g. canceled meanwhile): drop it
    if st == 'pending' or st == 'running' or st == 'replaying' then
      if st ~= 'running' then move(best, 'running') end
      if st == 'pending' then
        redis.call('HSET', key, 'started_at', now)
        emit(best, 'run.started', now, '', '')
        checkpoint(best, 'run_started', '', 'running', now)
      end
      redis.call('HINCRBY', key, 'fence', 1)
      redis.call('HSET', key, 'lease_owner', owner, 'lease_exp', expiry)
      redis.call('ZADD', P .. K.leases, expiry, best)
      out[#out + 1] = redis.call('HGETALL', key)
      out[#out + 1] = redis.call('HGETALL', P .. K.journal .. best)
      -- mailboxes holding signals now: a wait on any other one can park
      -- without first trying to consume (the suspend script re-checks)
      local mail = {}
      for _, name in ipairs(redis.call('SMEMBERS', P .. K.mailboxes .. best)) do
        if redis.call('LLEN', mbk(best, name)) > 0 then mail[#mail + 1] = name end
      end
      out[#out + 1] = mail
      out[#out + 1] = redis.call('HGETALL', P .. K.lineage .. best)
      n = n + 1
    end
  end
  -- Tokens are hints: once their queues are empty they only cause empty claims.
  local empty = true
  for _, q in ipairs(queues) do
    if redis.call('ZCARD', P .. K.queue .. q) == 0 then redis.call('DEL', P .. K.wake .. q)
    else empty = false end
  end
  if every and empty then redis.call('DEL', P .. K.wake .. '*') end
  return out
end

-- ARGV from `from` on: n, n flow names (n = 0: any flow), then queue names
-- (none: every queue). Returns queues, every, served (a set, or nil).
local function scope_args(from)
  local n = tonumber(ARGV[from])
  local served = nil
  if n > 0 then
    served = {}
    for i = from + 1, from + n do served[ARGV[i]] = true end
  end
  local queues = {}
  for i = from + 1 + n, #ARGV do queues[#queues + 1] = ARGV[i] end
  return queues, #queues == 0, served
end

