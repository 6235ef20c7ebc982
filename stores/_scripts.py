"""Every Lua script the Redis store runs, by name, with one shared prelude.

Rules that keep real Redis and fakeredis in agreement (see DESIGN.md):
- JSON stays opaque: records and payloads are stored as strings, and a
  payload is spliced into a record by concatenation, never decoded;
- numbers arrive as strings and are compared with ``tonumber``; a number that
  goes back into Redis is either an ARGV string or formatted with ``%.0f``;
- no deadline comes from ``TIME`` or a key TTL: ``now`` is always an argument;
- ``ARGV[1]`` is the partition base (``<prefix>:{p<N>}:``); every key a
  script touches shares its hash tag.

Error replies are tables ``{'err', code, a, b}``; the store maps the codes to
`sdk.errors` exceptions.
"""

from __future__ import annotations

import re

from sdk._lifecycle import TRANSITIONS
from sdk._types import RunStatus
from stores._keys import RUN_SUFFIXES, SUFFIX

__all__ = ["build_scripts"]


def _lua_table() -> str:
    allowed = ", ".join(
        f"{src.value}={{{', '.join(f'{dst.value}=true' for dst in sorted(dsts))}}}"
        for src, dsts in TRANSITIONS.items()
    )
    terminal = ", ".join(f"{s.value}=true" for s in RunStatus if s.is_terminal)
    run_keys = ", ".join(repr(SUFFIX[name]) for name in RUN_SUFFIXES)
    return (
        f"local ALLOWED = {{{allowed}}}\n"
        f"local TERMINAL = {{{terminal}}}\n"
        f"local RUN_KEYS = {{{run_keys}}}\n"
    )


_PRELUDE = (
    "local P = ARGV[1]\n"
    "local unpack = unpack or table.unpack\n"
    "local EVENTS_MAX = @EVENTS_MAX@\n"
    + _lua_table()
    + r"""
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

"""
)

# KEYS: run. ARGV: P, id, args_hash, event data, field, value, ...
_START = r"""
local key, id = KEYS[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then
  local same = redis.call('HGET', key, 'args_hash') == ARGV[3]
  return {same and 0 or -1, redis.call('HGET', key, 'status')}
end
local fields = {'args_hash', ARGV[3]}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', key, unpack(fields))
move(id, 'pending')
local created = redis.call('HGET', key, 'created_at')
redis.call('ZADD', P .. K.runs, created, id)
emit(id, 'run.created', created, '', ARGV[4])
enqueue(id)
return {1, 'pending'}
"""


# KEYS: the new run, its journal. ARGV: P, id, args_hash, event type, event data,
#       n fields, (field, value) * n, n records, (key, record) * n,
#       (key, lineage record) ...
# Creates a replayed or forked run: its journal holds the source's records up
# to the checkpoint; the source's later results wait in its lineage hash.
_DERIVE = r"""
local key, id = KEYS[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then return err('exists') end
local nf = tonumber(ARGV[6])
local i = 7
for _ = 1, nf do
  redis.call('HSET', key, ARGV[i], ARGV[i + 1])
  i = i + 2
end
redis.call('HSET', key, 'args_hash', ARGV[3])
local nj = tonumber(ARGV[i])
i = i + 1
local run = {false, false, false, false}  -- a new run: no counters yet
for _ = 1, nj do
  journaled(id, run, KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for j = i, #ARGV, 2 do redis.call('HSET', P .. K.lineage .. id, ARGV[j], ARGV[j + 1]) end
move(id, 'pending')
local created = redis.call('HGET', key, 'created_at')
redis.call('ZADD', P .. K.runs, created, id)
emit(id, ARGV[4], created, '', ARGV[5])
enqueue(id)
return {1}
"""

# ARGV: P, owner, now, expiry, limit, n, flow * n, [queue ...] (see scope_args)
_CLAIM = r"""
local queues, every, served = scope_args(6)
return take(ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), queues, every, served)
"""

# ARGV: P, now, limit, max recoveries, error JSON for a run that exceeds them.
_TICK = r"""
local f, r, nt, nl = maintain(ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5])
return {f, r, nt, nl}
"""

# ARGV: P, owner, now, expiry, limit, max recoveries, error JSON,
#       n, flow * n, [queue ...] (see scope_args)
# A worker's whole loop in one round trip: maintain, then take.
_POLL = r"""
local f, r, nt, nl = maintain(ARGV[3], 100, ARGV[6], ARGV[7])
local queues, every, served = scope_args(8)
return {{f, r, nt, nl},
        take(ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), queues, every, served)}
"""

# KEYS: run, journal. ARGV: P, id, fence, step key, record, now,
#       event type|'', event data|'', checkpoint kind|''
_RECORD = r"""
local id = ARGV[2]
local run = fenced(id, ARGV[3])
if not run then return 0 end
-- A result's step_completed checkpoint lives in its js: entry (a result is
-- final); a failure's is a stream entry, kept when resume discards the failure.
local stepcp = ARGV[9] == 'step_completed' and ARGV[7] ~= 'step.failed'
journaled(id, run, KEYS[2], ARGV[4], ARGV[5], stepcp and ARGV[6] or nil)
if ARGV[7] ~= '' then emit(id, ARGV[7], ARGV[6], ARGV[4], ARGV[8], run[3]) end
if ARGV[9] ~= '' and not stepcp then checkpoint(id, ARGV[9], ARGV[4], 'running', ARGV[6]) end
return 1
"""

# KEYS: run, journal. ARGV: P, id, fence, step key, mailbox, now, deadline|'',
#       record prefix (ends in "value":), timeout record
_CONSUME = r"""
local id = ARGV[2]
local run = fenced(id, ARGV[3])
if not run then return {-1} end
-- The client retries a call whose reply was lost: if the first run already
-- consumed (or timed out), answer the same instead of popping another signal.
local prev = redis.call('HGET', KEYS[2], ARGV[4])
if prev then
  if string.sub(prev, 1, #ARGV[8]) == ARGV[8] then
    return {1, string.sub(prev, #ARGV[8] + 1, -2)}
  end
  if prev == ARGV[9] then return {2} end
end
local v = redis.call('LPOP', mbk(id, ARGV[5]))
if v then
  journaled(id, run, KEYS[2], ARGV[4], ARGV[8] .. v .. '}')
  emit(id, 'wait.completed', ARGV[6], ARGV[4], '', run[3])
  return {1, v}
end
if ARGV[7] ~= '' and tonumber(ARGV[6]) >= tonumber(ARGV[7]) then
  journaled(id, run, KEYS[2], ARGV[4], ARGV[9])
  emit(id, 'wait.timed_out', ARGV[6], ARGV[4], '', run[3])
  return {2}
end
return {0}
"""

# KEYS: run, journal. ARGV: P, id, fence, now, deadline|'', waiting status,
#       n records, (key, record) * n, n mailboxes, mailbox * n,
#       (human mailbox, its approvers one per line) ...
# Re-checks the mailboxes (and the deadline) in the same script that parks the
# run, so a signal that landed after the activation looked is not lost.
_SUSPEND = r"""
local id = ARGV[2]
local run = fenced(id, ARGV[3])
if not run then return -1 end
local i = 8
for _ = 1, tonumber(ARGV[7]) do
  journaled(id, run, KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
local ready = ARGV[5] ~= '' and tonumber(ARGV[4]) >= tonumber(ARGV[5])
local boxes = {}
local nbox = tonumber(ARGV[i])
for j = i + 1, i + nbox do
  boxes[#boxes + 1] = ARGV[j]
  if redis.call('LLEN', mbk(id, ARGV[j])) > 0 then ready = true end
end
i = i + 1 + nbox
redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_exp')
redis.call('ZREM', P .. K.leases, id)
if ready then
  enqueue(id)
  return 0
end
move(id, ARGV[6])
emit(id, 'run.' .. ARGV[6], ARGV[4], '', '')
checkpoint(id, ARGV[6], '', ARGV[6], ARGV[4])
redis.call('DEL', P .. K.waits .. id)
if #boxes > 0 then redis.call('SADD', P .. K.waits .. id, unpack(boxes)) end
-- who may approve each human wait (mailbox -> actors, one per line)
redis.call('DEL', P .. K.approvers .. id)
for j = i, #ARGV, 2 do redis.call('HSET', P .. K.approvers .. id, ARGV[j], ARGV[j + 1]) end
if ARGV[5] ~= '' then
  redis.call('ZADD', P .. K.timers, ARGV[5], id)
  -- idle workers block until the deadline they knew of: let one look again
  nudge(redis.call('HGET', KEYS[1], 'queue'))
end
return 1
"""

# KEYS: run. ARGV: P, id, fence, status, now, event data,
#       delete on success: the tombstone's deadline|'', retention seconds|'',
#       field, value, ...
_FINISH = r"""
local id = ARGV[2]
if not fenced(id, ARGV[3]) then return -1 end
local e = move(id, ARGV[4])
if e then return e end
local fields = {'finished_at', ARGV[5]}
for i = 9, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('HINCRBY', KEYS[1], 'fence', 1)
unqueue(id)
emit(id, 'run.' .. ARGV[4], ARGV[5], '', ARGV[6])
checkpoint(id, 'run_finished', '', ARGV[4], ARGV[5])
if ARGV[4] == 'completed' and ARGV[7] ~= '' then
  entomb(id, ARGV[5], ARGV[7])
  return 1
end
finished(id, ARGV[4])
expire(id, ARGV[5], ARGV[8])
return 1
"""

# KEYS: run. ARGV: P, id, fence, step key, now. The optional step_started boundary.
_MARK = r"""
local id = ARGV[2]
if not fenced(id, ARGV[3]) then return 0 end
local n = checkpoint(id, 'step_started', ARGV[4], 'running', ARGV[5])
emit(id, 'step.started', ARGV[5], ARGV[4], '', n)  -- trims at every 100th checkpoint
return 1
"""

# KEYS: run. ARGV: P, id, event type, now, event data. An audit-only event
# (e.g. auth.denied): it changes nothing else.
_AUDIT = r"""
if redis.call('EXISTS', KEYS[1]) == 0 then return err('not_found') end
emit(ARGV[2], ARGV[3], ARGV[4], '', ARGV[5])
return {1}
"""

# KEYS: run. ARGV: P, id, fence. Gives a claimed run back (worker shutdown).
_RELEASE = r"""
local id = ARGV[2]
if not fenced(id, ARGV[3]) then return -1 end
redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HDEL', KEYS[1], 'lease_owner', 'lease_exp')
redis.call('ZREM', P .. K.leases, id)
enqueue(id)
return 1
"""

# ARGV: P, expiry, (id, fence) ... Returns the ids whose lease is lost.
_RENEW = r"""
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
"""


# KEYS: run. ARGV: P, id, mailbox, payload JSON, dedup id|'', now, event data,
#       '1' for a decision (the run must be waiting on that mailbox)|'', actor
_SIGNAL = r"""
local id = ARGV[2]
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return err('not_found') end
if TERMINAL[st] then return err('transition', st, 'running') end
if ARGV[8] == '1' then
  if not (st == 'waiting_for_human'
          and redis.call('SISMEMBER', P .. K.waits .. id, ARGV[3]) == 1) then
    return err('not_waiting', st)
  end
  local allowed = redis.call('HGET', P .. K.approvers .. id, ARGV[3])
  if allowed and not string.find('\n' .. allowed .. '\n', '\n' .. ARGV[9] .. '\n', 1, true) then
    emit(id, 'auth.denied', ARGV[6], '', ARGV[7])
    return err('forbidden', ARGV[9])
  end
end
if ARGV[5] ~= '' and redis.call('SADD', P .. K.dedup .. id, ARGV[5]) == 0 then return {0} end
redis.call('RPUSH', mbk(id, ARGV[3]), ARGV[4])
redis.call('SADD', P .. K.mailboxes .. id, ARGV[3])
emit(id, 'signal.received', ARGV[6], '', ARGV[7])
if (st == 'waiting_for_signal' or st == 'waiting_for_human')
    and redis.call('SISMEMBER', P .. K.waits .. id, ARGV[3]) == 1 then
  wake_run(id)
end
return {1}
"""

# KEYS: run. ARGV: P, id, reason, now, event data
_CANCEL = r"""
local id = ARGV[2]
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return err('not_found') end
local e = move(id, 'canceled')
if e then return e end
redis.call('HSET', KEYS[1], 'reason', ARGV[3], 'finished_at', ARGV[4])
redis.call('HINCRBY', KEYS[1], 'fence', 1)
unqueue(id)
emit(id, 'run.canceled', ARGV[4], '', ARGV[5])
cancel_intents(id, ARGV[4])
checkpoint(id, 'run_finished', '', 'canceled', ARGV[4])
finished(id, 'canceled')
expire(id, ARGV[4])
return {1}
"""

# KEYS: run. ARGV: P, id, now, event data. Deletes a finished run and every
# key of it; a run that has not finished is refused (nothing is deleted).
_DELETE = r"""
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return err('not_found') end
if not TERMINAL[st] then return err('not_terminal', st) end
delete_run(ARGV[2], ARGV[3], ARGV[4])
return {1}
"""

# KEYS: run, journal. ARGV: P, id, step key whose failure record to discard|'',
#       now, event data
# The explicit way out of failed/canceled (and a nudge for a waiting run). It
# continues from the checkpoint head (waiting) or the newest checkpoint before
# the run finished (failed, canceled): resume_from_checkpoint_id.
_RESUME = r"""
local id = ARGV[2]
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return err('not_found') end
if not (st == 'failed' or st == 'canceled' or st == 'waiting_for_signal'
        or st == 'waiting_for_human') then
  return err('transition', st, 'running')
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
redis.call('HDEL', KEYS[1], 'result', 'result_type', 'error', 'reason', 'finished_at',
           'expires_at')
redis.call('ZREM', P .. K.expiry, id)
redis.call('HSET', KEYS[1], 'recoveries', '0', 'resume_from_checkpoint_id', head)
redis.call('DEL', P .. K.done .. id)
move(id, 'running', true)
emit(id, 'run.resumed', ARGV[4], '', ARGV[5])
if st == 'canceled' then restore_intents(id, ARGV[4]) end
redis.call('DEL', P .. K.waits .. id)
redis.call('ZREM', P .. K.timers, id)
enqueue(id)
return {1}
"""

# -- outbox -------------------------------------------------------------------

# KEYS and ARGV of `record`, then (channel, intent JSON, event data tail) * n, n.
# `record` (the same body: journal entry, event, checkpoint) plus the step's
# outbound intents, in one script: a step's intents are written exactly when
# its result is. A call retried after a lost reply finds its record and adds
# nothing (the intents are there already).
assert _RECORD.rstrip().endswith("return 1")
_RECORD_OUT = (
    r"""
if redis.call('HGET', KEYS[2], ARGV[4]) == ARGV[5] then return 1 end
"""
    + _RECORD.rstrip()[: -len("return 1")]
    + r"""
local n = tonumber(ARGV[#ARGV])
for i = #ARGV - 3 * n, #ARGV - 1, 3 do
  add_intent(ARGV[2], ARGV[4], ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[6])
end
return 1
"""
)

# ARGV: P, now, lease expiry, limit, channel ...
# Leases up to `limit` due intents of the channels: their index score becomes
# the lease expiry, so an unsettled delivery (a dead worker) is due again then.
# Returns the claims (id, run, body, delivery number, failures) and the
# earliest score left in those channels ('' if none).
_CLAIM_INTENTS = r"""
local now, exp, limit = ARGV[2], ARGV[3], tonumber(ARGV[4])
local out, soonest = {}, nil
for c = 5, #ARGV do
  local ch = ARGV[c]
  local q = P .. K.outbox .. ch
  if #out < limit then
    for _, iid in ipairs(redis.call('ZRANGEBYSCORE', q, '-inf', now, 'LIMIT', 0, limit - #out)) do
      local key = ik(iid)
      local st, id, body, f = unpack(redis.call('HMGET', key, 'status', 'run', 'body', 'f'))
      if st == 'pending' then
        local d = redis.call('HINCRBY', key, 'n', 1)
        redis.call('ZADD', q, exp, iid)
        out[#out + 1] = {iid, id, body, d, f}
      else
        redis.call('ZREM', q, iid)  -- settled or gone meanwhile: a stale entry
      end
    end
  end
  -- tokens are hints: with nothing due they would only cause empty claims
  if #redis.call('ZRANGEBYSCORE', q, '-inf', now, 'LIMIT', 0, 1) == 0 then
    redis.call('DEL', P .. K.outbox_wake .. ch)
  end
  local first = redis.call('ZRANGE', q, 0, 0, 'WITHSCORES')
  if first[2] and (soonest == nil or tonumber(first[2]) < tonumber(soonest)) then
    soonest = first[2]
  end
end
return {out, soonest or ''}
"""

# KEYS: the intent. ARGV: P, intent id, delivery number, now, outcome, due|'',
#       error JSON|'', event data.
# Outcomes: sent; retry (at `due`); dead; release (due now, e.g. worker shutdown).
# Only the newest delivery may report a failure or a release; a success is
# taken from any delivery while the intent is pending (it was delivered). The
# event goes to the run's log while the run lists the intent; an intent whose
# run was deleted is dropped once settled.
_SETTLE_INTENT = r"""
local iid, now, outcome = ARGV[2], ARGV[4], ARGV[5]
local key = KEYS[1]
local st, d, id, ch, step =
  unpack(redis.call('HMGET', key, 'status', 'n', 'run', 'channel', 'step'))
if st ~= 'pending' then return 0 end
if outcome ~= 'sent' and d ~= ARGV[3] then return 0 end
local q = P .. K.outbox .. ch
if outcome == 'release' then
  redis.call('ZADD', q, now, iid)
  redis.call('HSET', key, 'due', now)
  wake_outbox(ch)
  return 1
end
local alive = redis.call('SISMEMBER', P .. K.intents .. id, iid) == 1
if outcome == 'retry' then
  redis.call('HINCRBY', key, 'f', 1)
  redis.call('HSET', key, 'error', ARGV[7], 'at', now, 'due', ARGV[6])
  redis.call('ZADD', q, ARGV[6], iid)
  if alive then emit(id, 'outbox.failed', now, step, ARGV[8]) end
  return 1
end
redis.call('ZREM', q, iid)
if not alive then
  redis.call('UNLINK', key)
  return 1
end
if outcome == 'dead' then
  redis.call('HINCRBY', key, 'f', 1)
  redis.call('HSET', key, 'error', ARGV[7])
end
redis.call('HSET', key, 'status', outcome, 'at', now)
redis.call('HDEL', key, 'due')
emit(id, 'outbox.' .. outcome, now, step, ARGV[8])
return 1
"""

# ARGV: P, lease expiry, (intent id, delivery number) ... Extends the leases of
# deliveries in progress; returns the ids no longer held (settled, canceled,
# or delivered again by another worker after the lease ran out).
_RENEW_INTENTS = r"""
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
"""

_BODIES: dict[str, str] = {
    "start": _START,
    "derive": _DERIVE,
    "claim": _CLAIM,
    "tick": _TICK,
    "poll": _POLL,
    "record": _RECORD,
    "mark": _MARK,
    "audit": _AUDIT,
    "consume": _CONSUME,
    "suspend": _SUSPEND,
    "finish": _FINISH,
    "release": _RELEASE,
    "renew": _RENEW,
    "signal": _SIGNAL,
    "cancel": _CANCEL,
    "resume": _RESUME,
    "delete": _DELETE,
    "record_out": _RECORD_OUT,
    "claim_intents": _CLAIM_INTENTS,
    "settle_intent": _SETTLE_INTENT,
    "renew_intents": _RENEW_INTENTS,
}


def _prelude_blocks(prelude: str) -> list[tuple[str, str]]:
    """The prelude's top-level definitions, in order: (name, text with its comments)."""
    blocks: list[tuple[str, str]] = []
    name: str | None = None
    lines: list[str] = []
    comments: list[str] = []
    for line in prelude.split("\n"):
        match = re.match(r"local function (\w+)|local (\w+) =", line)
        if match:
            if name is not None:
                blocks.append((name, "\n".join(lines)))
            name = match.group(1) or match.group(2)
            lines, comments = [*comments, line], []
        elif line.startswith("--"):
            comments.append(line)  # a top-level comment introduces the next definition
        else:
            lines.append(line)
    if name is not None:
        blocks.append((name, "\n".join(lines)))
    return blocks


def _minimal_prelude(blocks: list[tuple[str, str]], body: str) -> str:
    """Only the definitions `body` needs, transitively: Redis runs a script's
    whole prelude on every call (~1 µs a helper), so unused ones cost time."""
    names = [n for n, _ in blocks]
    text = dict(blocks)

    def used(src: str) -> set[str]:
        code = re.sub(r"--[^\n]*", "", src)  # a word in a comment is no dependency
        return {n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", code)}

    keep = {"P", "unpack"} | used(body)
    todo = list(keep)
    while todo:
        for dep in used(text[todo.pop()]) - keep:
            keep.add(dep)
            todo.append(dep)
    return "\n".join(text[n] for n in names if n in keep) + "\n"


def build_scripts(*, events_max: int) -> dict[str, str]:
    """name -> Lua source (the prelude definitions it uses + body), with the
    store's event log cap."""
    blocks = _prelude_blocks(_PRELUDE.replace("@EVENTS_MAX@", str(int(events_max))))
    return {
        name: _key_suffixes(_minimal_prelude(blocks, body) + body) for name, body in _BODIES.items()
    }


def _key_suffixes(src: str) -> str:
    """``K.name`` -> the key suffix itself (a table of them would be built per call)."""
    return re.sub(r"(?<![\w.])K\.(\w+)", lambda m: repr(SUFFIX[m.group(1)]), src)
