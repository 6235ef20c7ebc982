-- The helpers every script may use. A script gets only the definitions it
-- uses, transitively (Redis runs a script's whole prelude on every call), each
-- with the comment lines right above it; stores._scripts assembles them once.
--
-- Filled in when the scripts are built:
-- - @EVENTS_MAX@, @TRAIL_MAX@, @MESSAGE_MAX@, @PENDING_MAX@, @PENDING_BYTES_MAX@:
--   the store's bounds (sdk.store.StoreLimits);
-- - @CLUSTER@: true when the store runs on Redis Cluster, else false;
-- - the `@generated` line: ALLOWED (the transition table), TERMINAL,
--   RUN_KEYS, MAX_PRIORITY, AUDIT_MAX and is_audit, generated from their one
--   Python source;
-- - K.name: the key suffix itself (a table of them would be built per call).
--
-- Rules that keep real Redis and fakeredis in agreement: see stores._scripts.
-- These header lines (up to the first line that is not a comment) are not sent.

local P = ARGV[1]
local unpack = unpack or table.unpack
local EVENTS_MAX = @EVENTS_MAX@
-- The store's max_refusals_per_run: refusals go to a run's audit trail while it holds fewer.
local TRAIL_MAX = @TRAIL_MAX@
-- The store's bounds on the messages callers leave in a run's mailboxes:
-- max_message_bytes, max_pending_messages, max_pending_bytes (see admit).
local MESSAGE_MAX = @MESSAGE_MAX@
local PENDING_MAX = @PENDING_MAX@
local PENDING_BYTES_MAX = @PENDING_BYTES_MAX@
-- Whether the store runs on Redis Cluster (scripts then guard against slot migration).
local CLUSTER = @CLUSTER@
-- @generated: ALLOWED, TERMINAL, RUN_KEYS, MAX_PRIORITY, AUDIT_MAX, is_audit (stores._scripts._lua_table)

local function rk(id) return P .. K.run .. id end
-- run ids may contain ':', so the mailbox key length-prefixes the id
local function mbk(id, name) return P .. K.mailbox .. #id .. ':' .. id .. ':' .. name end
local function err(code, a, b) return {'err', code, a or '', b or ''} end

-- Validation. Redis does not roll a failing script back, so every script checks
-- its arguments and the keys it will write before its first write. A bad
-- argument (the caller's bug) answers err('invalid', what); stored data no
-- script can work with answers err('corrupt', key, what), or is reported by
-- claims and ticks for the worker to fail that one run (quarantine.lua). A
-- script whose first write is also its first use of a key may let that write
-- be the check: a command that fails writes nothing.

-- A finite number as Steadyflow writes them (no spaces, hex, inf or nan).
local function isnum(s)
  if type(s) ~= 'string' or s == '' or string.find(s, '[^%d%.eE+-]') then return false end
  local n = tonumber(s)
  return n ~= nil and n == n and n > -math.huge and n < math.huge
end

-- An integer as Redis keeps counters (what HINCRBY accepts).
local function isint(s)
  return type(s) == 'string' and #s < 19 and (s == '0' or string.match(s, '^-?[1-9]%d*$') ~= nil)
end

-- An argument check: `what` when `value` is not a finite number (an integer
-- with `int`; '' passes with `opt`), else nil. Chain them with `or`.
local function badnum(value, what, int, opt)
  if (opt and value == '') or (int and isint(value)) or (not int and isnum(value)) then
    return nil
  end
  return what .. ' must be ' .. (int and 'an integer' or 'a finite number')
end

-- What is wrong with `key` used as a `want` (nil: nothing; a missing key is fine).
local function mistyped(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t == want or t == 'none' then return nil end
  return 'holds a ' .. t .. ', not a ' .. want
end

-- The first mistyped key of a list {key, type, key, type, ...}: it and what is wrong.
local function mistyped_any(wants)
  for i = 1, #wants, 2 do
    local bad = mistyped(wants[i], wants[i + 1])
    if bad then return wants[i], bad end
  end
  return nil
end

-- Why the scripts cannot work with run `id`'s record: its key's type, or a field
-- they compute with that is missing or unusable. Returns nil, nil, status when
-- they can (status nil: no such run; then also the fields read: status,
-- created_at, priority, queue, retention, fence, recoveries, cp_n, jseq), else
-- the key and what is wrong.
local function damaged(id)
  local key = rk(id)
  local bad = mistyped(key, 'hash')
  if bad then return key, bad end
  local f = redis.call('HMGET', key, 'status', 'created_at', 'priority', 'queue', 'retention',
                       'fence', 'recoveries', 'cp_n', 'jseq')
  local st = f[1]
  if not st then
    if redis.call('EXISTS', key) == 0 then return nil end
    return key, "field 'status' is missing"
  end
  if not ALLOWED[st] then return key, "field 'status' is not a run status" end
  if not isnum(f[2]) then return key, "field 'created_at' is not a number" end
  if not isint(f[3]) or math.abs(tonumber(f[3])) > MAX_PRIORITY then
    return key, "field 'priority' is not an integer in -" .. MAX_PRIORITY .. '..' .. MAX_PRIORITY
  end
  if not f[4] or f[4] == '' then return key, "field 'queue' is missing" end
  if f[5] and not isnum(f[5]) then return key, "field 'retention' is not a number" end
  local counters = {'fence', 'recoveries', 'cp_n', 'jseq'}
  for i = 1, 4 do
    if f[5 + i] and not isint(f[5 + i]) then
      return key, "field '" .. counters[i] .. "' is not an integer"
    end
  end
  return nil, nil, st, f
end

-- What is wrong with a new run's fields (a flat name, value list), or nil.
local function bad_fields(fields)
  if #fields % 2 == 1 then return 'run fields must come in name, value pairs' end
  local v = {}
  for i = 1, #fields, 2 do v[fields[i]] = fields[i + 1] end
  local bad = badnum(v.created_at, 'created_at')
    or badnum(v.priority, 'priority', true)
    or (v.retention and badnum(v.retention, 'retention'))
    or (v.timeout and badnum(v.timeout, 'timeout'))
    or (v.fence and badnum(v.fence, 'fence', true))
    or (v.recoveries and badnum(v.recoveries, 'recoveries', true))
  if bad then return bad end
  if math.abs(tonumber(v.priority)) > MAX_PRIORITY then
    return 'priority must be in -' .. MAX_PRIORITY .. '..' .. MAX_PRIORITY
  end
  if v.retention and tonumber(v.retention) < 0 then return 'retention must be >= 0' end
  if v.timeout and tonumber(v.timeout) <= 0 then return 'timeout must be > 0' end
  if not v.queue or v.queue == '' then return 'queue must not be empty' end
  if not v.flow or v.flow == '' then return 'flow must not be empty' end
  return nil
end

-- Move a run to `to`, keeping the per-status index right. Returns an error
-- table when the transition table forbids it (unless `explicit`), else nil.
-- `known` (optional): the run's status and created_at as the caller just read
-- them (damaged's fields), so they are not read again.
local function move(id, to, explicit, known)
  local key = rk(id)
  local from = known and known[1] or redis.call('HGET', key, 'status')
  if from then
    if not explicit and not (ALLOWED[from] and ALLOWED[from][to]) then
      return err('transition', from, to)
    end
    redis.call('ZREM', P .. K.status .. from, id)
    -- what a parked run waited for (suspend.lua) ends with its waiting status
    if string.sub(from, 1, 8) == 'waiting_' and string.sub(to, 1, 8) ~= 'waiting_' then
      redis.call('HDEL', key, 'waiting_on')
    end
  else
    -- a new run: drop what a deleted run of the same id left for its
    -- result() waiters (tombstone, done notice), or it would look finished
    redis.call('UNLINK', P .. K.gone .. id, P .. K.done .. id)
    redis.call('ZREM', P .. K.expiry, id)
  end
  redis.call('HSET', key, 'status', to)
  redis.call('ZADD', P .. K.status .. to, from and known and known[2]
             or redis.call('HGET', key, 'created_at'), id)
  return nil
end

-- What is wrong with the status indexes that moving a run from status `from`
-- (nil: a new run) to `to` writes, and `more` ({key, type, ...}: other shared
-- keys the script writes), or nil (see queue_damage: scripts check them first).
local function move_damage(from, to, more)
  local wants = more or {}
  wants[#wants + 1], wants[#wants + 2] = P .. K.status .. to, 'zset'
  if from then wants[#wants + 1], wants[#wants + 2] = P .. K.status .. from, 'zset' end
  return mistyped_any(wants)
end

-- Leave a wake-up token on list `w` (at most 1024 kept). On Redis Cluster the
-- waiters sleep on a sharded channel named like the list (same slot), and take
-- the token when it rings (stores._wakeups); on one node they BLPOP the list.
-- A list of another type (a hand edit) starts over: a token is only a hint.
local function token(w)
  if type(redis.pcall('LPUSH', w, '1')) ~= 'number' then
    redis.call('DEL', w)
    redis.call('LPUSH', w, '1')
  end
  redis.call('LTRIM', w, 0, 1023)
  if CLUSTER then redis.call('SPUBLISH', w, '1') end
end

-- Put a run on its ready queue (lower priority first, FIFO within one) and
-- leave a wake-up token for the workers of that queue and of every queue.
local function nudge(q)
  token(P .. K.wake .. q)
  token(P .. K.wake .. '*')
end

-- Keys that runs share (a queue, the list of queues, the indexes). One a script
-- cannot work with is no run's damage: the script answers err('index', key,
-- what) before its first write (the store raises CorruptIndex), and no run is
-- failed for it; maintain() rebuilds a queue and the list of queues.
-- What is wrong with the keys enqueue(id) writes for a run of queue `q` (the
-- FIFO counter and the wake-up lists aside: enqueue() and token() replace one
-- that cannot count or hold tokens), or nil.
local function queue_damage(q)
  return mistyped_any({P .. K.queue .. q, 'zset', P .. K.queues, 'set'})
end

-- A run parked by a worker that keeps it in memory (field sticky, see
-- suspend.lua: "fence:jseq:delay:owner", valid while the fence is unchanged)
-- also wakes that worker on its own list (K.swake .. owner).
local function enqueue(id)
  local key = rk(id)
  local q, prio, tok, fence = unpack(redis.call('HMGET', key, 'queue', 'priority', 'sticky', 'fence'))
  prio = tonumber(prio)
  -- a counter that cannot count (a hand edit) starts over: runs queued before it
  -- may then run after runs of their priority queued since, nothing worse
  local seq = redis.pcall('INCR', P .. K.seq)
  if type(seq) ~= 'number' then
    redis.call('DEL', P .. K.seq)
    seq = redis.call('INCR', P .. K.seq)
  end
  redis.call('ZADD', P .. K.queue .. q, string.format('%.0f', prio * 1099511627776 + seq), id)
  redis.call('SADD', P .. K.queues, q)
  nudge(q)
  if tok then
    local f, o = string.match(tok, '^(%d+):%d+:[^:]*:(.+)$')
    if f and f == fence then
      token(P .. K.swake .. o)
    end
  end
end

-- The set of runs of queue `q` executing under concurrency key `ck` (the names
-- may contain ':', so the queue is length-prefixed).
local function qkk(q, ck) return P .. K.qkeyed .. #q .. ':' .. q .. ':' .. ck end

-- A run stops executing (it parks, ends, is handed back or loses its lease): it
-- gives back the slot its claim took (field 'slot': '1' or '0', whether the
-- claim counted it against a limit, then the queue). A slot of a limited queue
-- with runs waiting wakes a worker: what a limit held back may start now.
local function vacate(id)
  local key = rk(id)
  local slot, ck = unpack(redis.call('HMGET', key, 'slot', 'ckey'))
  if not slot then return end
  local q = string.sub(slot, 2)
  -- pcall: a damaged slot set (our own bookkeeping) is replaced at the next claim
  redis.pcall('ZREM', P .. K.qslots .. q, id)
  if ck then redis.pcall('ZREM', qkk(q, ck), id) end
  redis.call('HDEL', key, 'slot')
  -- (a queue of another type counts as empty: maintain() rebuilds it)
  local n = redis.pcall('ZCARD', P .. K.queue .. q)
  if string.sub(slot, 1, 1) == '1' and type(n) == 'number' and n > 0 then nudge(q) end
end

-- Take a run off every index that would make it run or wake. (pcall: an index of
-- another type holds no entry to take off; maintain() rebuilds a queue.)
local function unqueue(id)
  local key = rk(id)
  vacate(id)
  redis.pcall('ZREM', P .. K.queue .. redis.call('HGET', key, 'queue'), id)
  redis.pcall('ZREM', P .. K.timers, id)
  redis.pcall('ZREM', P .. K.leases, id)
  redis.pcall('ZREM', P .. K.deadlines, id)
  redis.pcall('ZREM', P .. K.cancels, id)
  redis.call('DEL', P .. K.waits .. id)
  redis.call('HDEL', key, 'lease_owner', 'lease_exp')
end

-- A run with a timeout (@flow(timeout=...), field 'timeout': seconds) times out
-- that long after `now` (its start, or a resume): field 'deadline' and the
-- partition's deadline index, which maintain() fires.
local function arm(id, now)
  local key = rk(id)
  local t = redis.call('HGET', key, 'timeout')
  if not isnum(t) then return end
  local at = string.format('%.17g', tonumber(now) + tonumber(t))
  redis.call('HSET', key, 'deadline', at)
  redis.call('ZADD', P .. K.deadlines, at, id)
end

-- A write of an activation is allowed only with the current fencing token
-- while the run is running: a lost lease, a takeover or a cancel all bump it.
-- Returns the run's write counters {fence, status, jseq, cp_n} (for
-- journaled) when the write may go ahead, else nil.
-- A record whose counters cannot be computed with returns nil, key, what is wrong
-- (the write must not go ahead: the script answers err('corrupt', ...)).
local function fenced(id, fence)
  local key = rk(id)
  local run = redis.pcall('HMGET', key, 'fence', 'status', 'jseq', 'cp_n')
  if run.err then return nil, key, mistyped(key, 'hash') or run.err end
  if run[1] ~= fence or run[2] ~= 'running' then return nil end
  if run[3] and not isint(run[3]) then return nil, key, "field 'jseq' is not an integer" end
  if run[4] and not isint(run[4]) then return nil, key, "field 'cp_n' is not an integer" end
  return run
end

-- Trim run `id`'s log `log` to its EVENTS_MAX newest events once it holds 100
-- more (one XRANGE and one XTRIM per 100 events). The audit events about to go
-- (is_audit: who changed the run, and refusals) are first kept in the run's
-- audit trail (K.trail), with their ids, which no trim touches: reads merge it
-- back (RunReads.events). Flooding a run with signals cannot erase them.
-- Refusals, which any caller can provoke, are kept only while the trail holds
-- fewer than TRAIL_MAX entries (the first ones stay); changes always are. A
-- trail that is not a stream leaves the log untrimmed: no audit event is
-- dropped unkept (reads report the damage).
local function trim(id, log)
  local n = redis.call('XLEN', log)
  if n < EVENTS_MAX + 100 then return end
  local trail = P .. K.trail .. id
  if mistyped(trail, 'stream') then return end
  -- the oldest n - EVENTS_MAX go; the entry after them is the first one kept
  local old = redis.call('XRANGE', log, '-', '+', 'COUNT', n - EVENTS_MAX + 1)
  local kept = nil  -- the trail's length, once a refusal asks
  for i = 1, #old - 1 do
    local f = old[i][2]  -- type, at, then step and data if any
    local data = f[#f - 1] == 'data' and f[#f] or ''
    if is_audit(f[2], data) then
      local keep = true
      if f[2] == 'auth.denied' then
        kept = kept or redis.call('XLEN', trail)
        keep = kept < TRAIL_MAX
      end
      -- the log's ids only grow, so each fits; an id the trail is already past
      -- (written there by hand) fails alone, not the script after its writes
      if keep and type(redis.pcall('XADD', trail, old[i][1], unpack(f))) == 'string' then
        kept = kept and kept + 1
      end
    end
  end
  redis.call('XTRIM', log, 'MINID', old[#old][1])
end

-- Append an event to the run's log and publish it on the partition's feed.
-- Fields, not JSON: `data` is JSON made by the client and passed through.
-- The log is capped by trim(): checking its length costs a command, so an
-- event that comes with a numbered write (`seq`: a journal write's number, or
-- an optional step_started checkpoint's id) checks only at every 100th; every
-- other event at once.
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
  if not seq or tonumber(seq) % 100 == 0 then trim(id, log) end
  -- Live followers get it by Pub/Sub (nothing stored; nearly free with no
  -- subscriber): fields "<byte length>:<bytes>" in the order run, event id,
  -- type, at, step, data. They look trace and tenant ids up once per run.
  -- On Redis Cluster a sharded channel: its node alone carries it (PUBLISH goes
  -- to every node), and followers subscribe per master (stores._wakeups).
  redis.call(CLUSTER and 'SPUBLISH' or 'PUBLISH', P .. K.feed,
             #id .. ':' .. id .. #eid .. ':' .. eid .. #etype .. ':'
             .. etype .. #at .. ':' .. at .. #step .. ':' .. step .. #data .. ':' .. data)
  return eid
end

-- Append an entry to the partition's audit log `log` (K.audit: changes, such as
-- deletions and schedule operations; K.denied: refusals of calls that have no
-- run log), which outlives runs: type, at, run and schedule ids ('' for none),
-- data (JSON, passed through). Capped at about AUDIT_MAX entries (trimmed with
-- the XADD: audit entries are rare, so the trim costs nothing worth batching).
local function audit_entry(log, etype, at, run, sched, data)
  local args = {P .. log, 'MAXLEN', '~', AUDIT_MAX, '*', 'type', etype, 'at', at}
  if run ~= '' then args[#args + 1] = 'run'; args[#args + 1] = run end
  if sched ~= '' then args[#args + 1] = 'schedule'; args[#args + 1] = sched end
  if data ~= '' then args[#args + 1] = 'data'; args[#args + 1] = data end
  return redis.call('XADD', unpack(args))
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
-- A JSON string of an id or a name (check_id: they hold no control character).
local function jstr(s) return '"' .. string.gsub(s, '[\\"]', '\\%0') .. '"' end

-- An engine-internal outbox intent (channel '~child' or '~cascade', served by
-- every worker): not listed in the run's intent set, so it is in no event log,
-- not canceled with the run, and dropped once delivered.
local function internal_intent(id, channel, payload, now)
  local iid = string.format('%.0f', redis.call('INCR', P .. K.intent_seq))
  local body = '{"channel":"' .. channel .. '","payload":' .. payload .. ',"idempotency_key":'
    .. jstr(channel .. ':' .. id) .. ',"created_at":' .. now .. ',"step_key":""}'
  redis.call('HSET', P .. K.intent .. iid, 'run', id, 'step', '', 'channel', channel, 'body', body,
             'tail', '"channel":"' .. channel .. '"}', 'status', 'pending', 'n', '0', 'f', '0',
             'at', now, 'due', now)
  redis.call('ZADD', P .. K.outbox .. channel, now, iid)
  token(P .. K.outbox_wake .. channel)
end

-- A scheduled run ended (field schedule; schedules live in this partition, see
-- stores._schedules): a tick its schedule buffered behind it (overlap
-- 'buffer_one') is due now, and the workers of the flow's queue are woken.
local function sched_wake(id, now)
  local s = redis.call('HGET', rk(id), 'schedule') or redis.call('HGET', P .. K.gone .. id, 'schedule')
  if not s then return end
  local f = redis.pcall('HMGET', P .. K.schedule .. s, 'buffered', 'last_run', 'flow', 'queue')
  if f.err or not f[1] or f[1] == '' or f[2] ~= id then return end
  redis.call('ZADD', P .. K.sched_due .. f[3], now, s)
  nudge(f[4])
end

-- Put schedule `id` on its flow's due index at the earliest of: a trigger asked
-- for, its next tick (unless paused), now when a buffered tick's previous run has
-- ended; or take it off when none applies. Workers fire what is due there.
local function sched_arm(id, now)
  local f = redis.call('HMGET', P .. K.schedule .. id, 'flow', 'paused', 'next', 'trigger',
                       'buffered', 'last_run')
  local at = nil
  local function earlier(t)
    if t and t ~= '' and (not at or tonumber(t) < tonumber(at)) then at = t end
  end
  earlier(f[4])
  if f[2] ~= '1' then earlier(f[3]) end
  if f[5] and f[5] ~= '' then
    local st = f[6] and f[6] ~= '' and redis.pcall('HGET', rk(f[6]), 'status')
    if not st or (type(st) == 'string' and TERMINAL[st]) then earlier(now) end
  end
  if at then
    redis.call('ZADD', P .. K.sched_due .. f[1], at, id)
  else
    redis.call('ZREM', P .. K.sched_due .. f[1], id)
  end
end

-- A run ended: the notice its waiters read. With `now` (every end but the
-- archiving of a generation): a child flow's parent is told (its ~child intent),
-- and a canceled run that started children (field kids) cancels them (its
-- ~cascade intent).
local function finished(id, status, now)
  redis.call('DEL', P .. K.done .. id)
  redis.call('RPUSH', P .. K.done .. id, status)
  if not now then return end
  sched_wake(id, now)
  local parent = redis.call('HGET', rk(id), 'parent') or redis.call('HGET', P .. K.gone .. id, 'parent')
  if parent then
    internal_intent(id, '~child', '{"parent":' .. jstr(parent) .. ',"child":' .. jstr(id)
      .. ',"mailbox":' .. jstr('~child:' .. id) .. '}', now)
  end
  if status == 'canceled' and redis.call('HGET', rk(id), 'kids') then
    internal_intent(id, '~cascade', '{"run_id":' .. jstr(id) .. '}', now)
  end
end

-- Outbox. An intent is a hash of its own (ik), listed in its run's set and,
-- while pending, in its channel's index (score: when it is due, or when the
-- lease of its delivery in progress ends). Its body is JSON made by the client;
-- `tail` is the end of its events' data (after the intent id).
local function ik(iid) return P .. K.intent .. iid end
local function intent_data(iid, tail) return '{"intent_id":"' .. iid .. '",' .. tail end

local function wake_outbox(channel) token(P .. K.outbox_wake .. channel) end

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

-- Canceling and resuming write the run's intents: the first that cannot be
-- worked with (key and what is wrong), or nil.
local function intents_mistyped(id)
  local set = P .. K.intents .. id
  local bad = mistyped(set, 'set')
  if bad then return set, bad end
  for _, iid in ipairs(redis.call('SMEMBERS', set)) do
    if not isint(iid) then return set, 'holds an intent id that is not a number' end
    bad = mistyped(ik(iid), 'hash')
    if bad then return ik(iid), bad end
    if not redis.call('HGET', ik(iid), 'channel') then return ik(iid), "field 'channel' is missing" end
  end
  return nil
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
-- that recorded them are not run again, so nothing else would send them. Those
-- of records the resume discards (`dropped`: step key -> true; their steps run
-- again if the flow calls them) stay canceled for good (field dropped).
local function restore_intents(id, now, dropped)
  for _, iid in ipairs(intents_of(id)) do
    local key = ik(iid)
    local st, ch, step, tail, gone = unpack(redis.call('HMGET', key, 'status', 'channel', 'step',
                                                       'tail', 'dropped'))
    if st == 'canceled' and not gone and dropped[step] then
      redis.call('HSET', key, 'dropped', now)
    elseif st == 'canceled' and not gone then
      redis.call('HSET', key, 'status', 'pending', 'at', now, 'due', now)
      redis.call('ZADD', P .. K.outbox .. ch, now, iid)
      wake_outbox(ch)
      emit(id, 'outbox.restored', now, step, intent_data(iid, tail))
    end
  end
end

-- Deleting a run drops its settled intents; pending ones are still delivered
-- and dropped when settled (their run's set no longer lists them).
-- Deleting works on damaged runs too: what cannot be read is deleted unread.
local function purge_intents(id)
  local set = P .. K.intents .. id
  if mistyped(set, 'set') then return end
  for _, iid in ipairs(redis.call('SMEMBERS', set)) do
    local st = redis.pcall('HGET', ik(iid), 'status')
    if st ~= 'pending' then redis.call('UNLINK', ik(iid)) end
  end
end

-- Retention. Delete every key of a run (RUN_KEYS and its mailboxes) and take
-- it off every index. UNLINK: a long journal or event log is freed lazily.
local function purge(id)
  local key = rk(id)
  local st, q = nil, nil
  if not mistyped(key, 'hash') then st, q = unpack(redis.call('HMGET', key, 'status', 'queue')) end
  if st and ALLOWED[st] then
    redis.call('ZREM', P .. K.status .. st, id)
  else  -- a status that cannot be read: any index may hold it
    for s in pairs(ALLOWED) do redis.call('ZREM', P .. K.status .. s, id) end
  end
  if q then redis.call('ZREM', P .. K.queue .. q, id) end
  local parent = not mistyped(key, 'hash') and redis.call('HGET', key, 'parent')
  if parent then redis.call('ZREM', P .. K.children .. parent, id) end
  for _, z in ipairs({K.runs, K.timers, K.leases, K.expiry, K.deadlines, K.cancels}) do
    redis.call('ZREM', P .. z, id)
  end
  local names = P .. K.mailboxes .. id
  if not mistyped(names, 'set') then
    for _, name in ipairs(redis.call('SMEMBERS', names)) do redis.call('UNLINK', mbk(id, name)) end
  end
  purge_intents(id)
  local doomed = {}
  for _, s in ipairs(RUN_KEYS) do doomed[#doomed + 1] = P .. s .. id end
  redis.call('UNLINK', unpack(doomed))
end

-- Delete a finished run. Its own event log goes with it, so the deletion is
-- announced on the feed only (the event is written, then purged).
local function delete_run(id, now, data)
  local log = P .. K.events .. id
  if mistyped(log, 'stream') then redis.call('UNLINK', log) end  -- deleted below anyway
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
  finished(id, 'completed', now)
  redis.call('ZADD', P .. K.expiry, grace, id)
end

-- Whether mailbox `box` ("s:<name>" or "h:<name>") counts against a run's
-- bounds on messages: a child's outcome (s:~child:<id>) does not, so that it
-- always reaches its parent; one per child, of a size its result was held to.
local function bounded(box) return string.sub(box, 1, 9) ~= 's:~child:' end

-- Whether run `id` may take `payload` into mailbox `box`: nil, else the refusal
-- (the script returns it before its first write). A decision (approve/deny)
-- needs the run to wait for it, so it never piles up: only its size counts.
-- The run keeps the count and bytes of the messages it holds on its record
-- (mail_n, mail_b: tally), so the check is O(1), in the script that writes:
-- concurrent callers cannot slip past it.
local function admit(id, box, payload, decision)
  if not bounded(box) then return nil end
  local size = #payload
  if size > MESSAGE_MAX then
    return {'err', 'too_large', tostring(size), tostring(MESSAGE_MAX)}
  end
  if decision then return nil end
  local c = redis.call('HMGET', rk(id), 'mail_n', 'mail_b')
  local n, b = tonumber(c[1]) or 0, tonumber(c[2]) or 0
  if n >= PENDING_MAX then
    return {'err', 'full', 'messages', string.format('%.0f', n + 1), tostring(PENDING_MAX)}
  end
  if b + size > PENDING_BYTES_MAX then
    return {'err', 'full', 'bytes', string.format('%.0f', b + size), tostring(PENDING_BYTES_MAX)}
  end
  return nil
end

-- Count `dn` messages of `db` bytes into (negative: out of) run `id`'s mail
-- (mail_n, mail_b on its record), for a bounded mailbox `box`. Never below 0; a
-- field that is not a number counts as 0 (this write repairs it).
local function tally(id, box, dn, db)
  if not bounded(box) then return end
  local key = rk(id)
  local c = redis.call('HMGET', key, 'mail_n', 'mail_b')
  redis.call('HSET', key,
             'mail_n', string.format('%.0f', math.max(0, (tonumber(c[1]) or 0) + dn)),
             'mail_b', string.format('%.0f', math.max(0, (tonumber(c[2]) or 0) + db)))
end

-- Delete mailbox `box` of run `id`, tallying out what it still holds.
local function drop_box(id, box)
  local mb = mbk(id, box)
  local n = redis.pcall('LLEN', mb)
  if bounded(box) and type(n) == 'number' and n > 0 then
    local b = 0
    for _, v in ipairs(redis.call('LPOP', mb, n)) do b = b + #v end
    tally(id, box, -n, -b)
  end
  redis.call('DEL', mb)
end

-- What is wrong with the shared keys that waking waiting run `id` (of status
-- `st`) writes: its queue's (queue_damage), and the status indexes; or nil.
local function wake_damage(id, st)
  local where, bad = queue_damage(redis.call('HGET', rk(id), 'queue'))
  if bad then return where, bad end
  return move_damage(st, 'running')
end

local function wake_run(id)
  local e = move(id, 'running')
  if e then return e end
  redis.call('DEL', P .. K.waits .. id)
  redis.pcall('ZREM', P .. K.timers, id)  -- (a damaged timer index holds no entry)
  enqueue(id)
  return nil
end

-- The repair pass (in maintain): it walks the runs that have not ended, status
-- index by status index, `limit` runs at most once per REPAIR_EVERY seconds of
-- `now`, and puts back on an index a run that no index reaches (a half-done
-- write by an older version, a lost key, a hand edit). Its cursor (K.repair:
-- status, run id and score last seen, when the next pass is due) survives
-- runs coming and going: a pass goes on after the run it saw last, or, when
-- that run left the index, after the last score seen.
local REPAIRED = {'pending', 'running', 'replaying', 'waiting_for_signal', 'waiting_for_human'}
local REPAIR_EVERY = 1

-- Why run `id` (of `st`, read and found usable) is on no index that runs or wakes
-- it, or nil: pending off its queue; running or replaying with neither a lease
-- nor a queue entry; waiting with neither a timer nor a mailbox it waits on.
-- (Its queue is sound: maintain's sound() saw to it.) A queued run's queue is
-- listed again, in case the list of queues was rebuilt.
local function unreached(id, st)
  local q = redis.call('HGET', rk(id), 'queue')
  local queued = redis.call('ZSCORE', P .. K.queue .. q, id)
  if queued then redis.call('SADD', P .. K.queues, q) end
  if st == 'pending' then  -- queued, or on a timer until its delayed start
    if queued or redis.call('ZSCORE', P .. K.timers, id) then return nil end
    return 'pending without a queue entry'
  end
  if st == 'running' or st == 'replaying' then
    if queued or redis.call('ZSCORE', P .. K.leases, id) then return nil end
    return st .. ' without a lease or a queue entry'
  end
  if redis.call('ZSCORE', P .. K.timers, id) then return nil end
  local waits = P .. K.waits .. id
  if mistyped(waits, 'set') or redis.call('SCARD', waits) > 0 then return nil end
  return st .. ' without a timer or a wait'
end

-- What of waiting run `id` that its wake-up needs cannot be worked with: a
-- signal, an event or a decision for it is refused while its log, mailboxes,
-- dedup ids or waits are damaged, so nothing else would ever end it. Returns
-- the key and what is wrong, or nil.
local function wait_damage(id)
  local waits = P .. K.waits .. id
  local key, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream',
                                 P .. K.dedup .. id, 'set', P .. K.mailboxes .. id, 'set',
                                 waits, 'set', P .. K.approvers .. id, 'hash',
                                 P .. K.evwatch .. id, 'hash', P .. K.journal .. id, 'hash',
                                 P .. K.jseq .. id, 'hash', P .. K.lineage .. id, 'hash'})
  if bad then return key, bad end
  for _, box in ipairs(redis.call('SMEMBERS', waits)) do
    key = mbk(id, box)
    bad = mistyped(key, 'list')
    if bad then return key, bad end
  end
  return nil
end

-- The repair pass's cursor when a pass is due at `now`, else nil.
local function repair_due(now)
  local c = redis.pcall('HMGET', P .. K.repair, 'due', 'status', 'id', 'score')
  local broken = c.err ~= nil
  if broken then c = {} end  -- our own bookkeeping, damaged: start over
  if isnum(c[1]) and tonumber(c[1]) > tonumber(now) then return nil end
  return {broken = broken, st = c[2], last = c[3], score = c[4]}
end

-- Delete shared key `key` (of the wrong type: `what`, noted in `rebuilt`) so
-- that it starts over. Only derived data goes this way (what it held was none
-- of ours: no entry of it could be read), and the worker logs what it was.
local function start_over(key, what, rebuilt)
  redis.call('DEL', key)
  rebuilt[#rebuilt + 1] = key
  rebuilt[#rebuilt + 1] = what
end

-- Rebuild what enqueue() and the workers' wake-up waits need of queue `q` ('':
-- the wake-up list of every queue) that cannot be worked with. Each is derived
-- data: a queue started over is empty, and the repair pass queues its runs
-- again as it reaches them (pending, or running or replaying, without a queue
-- entry); the list of queues is refilled as runs are queued or reached.
local function rebuild_queue(q, rebuilt)
  local wake = P .. K.wake .. (q == '' and '*' or q)
  local bad = mistyped(wake, 'list')
  if bad then start_over(wake, bad, rebuilt) end
  if q == '' then return end
  for _ = 1, 2 do  -- the queue, the list of queues: each once at most
    local key
    key, bad = queue_damage(q)
    if not bad then return end
    start_over(key, bad, rebuilt)
  end
end

local function repair(now, limit, note, sound, c)
  local cur = P .. K.repair
  local st, last, score = c.st, c.last, c.score
  if last == '' then last, score = nil, nil end  -- (a pass that ended a round writes '')
  local at = 1
  for i, name in ipairs(REPAIRED) do if name == st then at = i end end
  local repaired, left = 0, limit
  for _ = 1, #REPAIRED do
    st = REPAIRED[at]
    local index = P .. K.status .. st
    local from = last and redis.call('ZRANK', index, last)
    if from then from = from + 1
    elseif isnum(score) then from = redis.call('ZCOUNT', index, '-inf', '(' .. score)
    else from = 0 end
    local ids = redis.call('ZRANGE', index, from, from + left - 1, 'WITHSCORES')
    for i = 1, #ids, 2 do
      local id = ids[i]
      last, score = id, ids[i + 1]
      local key, bad, now_st = damaged(id)
      local waiting = st == 'waiting_for_signal' or st == 'waiting_for_human'
      if not bad and now_st == st and waiting then key, bad = wait_damage(id) end
      if bad then
        -- a leased run is left to its holder's next write, or its lease's expiry
        if not redis.call('ZSCORE', P .. K.leases, id) then note(id, key, bad) end
        -- a record that is not a hash can never be failed in place: note it once
        if key == rk(id) and string.sub(bad, 1, 5) == 'holds' then redis.call('ZREM', index, id) end
      elseif now_st ~= st then
        redis.call('ZREM', index, id)  -- a stale entry (the run is gone, or indexed elsewhere)
        if now_st then
          redis.call('ZADD', P .. K.status .. now_st, redis.call('HGET', rk(id), 'created_at'), id)
        end
      else
        sound(id)
        local found = unreached(id, st)
        local log = P .. K.events .. id
        if found and mistyped(log, 'stream') then
          note(id, log, mistyped(log, 'stream'))
        elseif found then
          if waiting then wake_run(id) else enqueue(id) end
          emit(id, 'run.repaired', now, '', '{"found":"' .. found .. '"}')
          repaired = repaired + 1
        end
      end
    end
    left = left - #ids / 2
    if left <= 0 then break end
    at, last, score = at % #REPAIRED + 1, nil, nil  -- this index is done: the next one
    if at == 1 then break end  -- a whole round: rest until the next pass
  end
  if c.broken then redis.call('DEL', cur) end
  -- one write: a round's end leaves '' for the run and score last seen
  redis.call('HSET', cur, 'due', string.format('%.17g', tonumber(now) + REPAIR_EVERY),
             'status', REPAIRED[at], 'id', last or '', 'score', score or '')
  return repaired
end

-- Fire due timers, recover runs whose lease expired, fail runs whose timeout
-- passed, force cancels whose grace ran out, delete runs whose retention
-- ended, and run the repair pass. Returns fired (timers, timeouts and forced
-- cancels), recovered, next timer, run deadline or grace deadline due ('' if
-- none), next lease expiry ('' if none), repaired, the runs found damaged
-- (id, key, what is wrong, ...): they are taken off the index that found them
-- and left for the worker to fail (quarantine.lua), the runs it failed, and
-- the shared keys it rebuilt (key, what was wrong, ...).
-- End run `id` as `failed` now with the error `why` (JSON) and `reason`, its
-- lease and queue entries dropped (the caller fences its activation out): a run
-- timeout, too many recoveries.
local function fail_now(id, now, why, reason)
  move(id, 'failed')
  redis.call('HSET', rk(id), 'finished_at', now, 'error', why, 'reason', reason)
  unqueue(id)
  emit(id, 'run.failed', now, '', why)
  checkpoint(id, 'run_finished', '', 'failed', now)
  finished(id, 'failed', now)
end

-- End run `id` as `canceled` now (its activation fenced out, its pending intents
-- canceled): a cancel at once (cancel.lua), a grace period that ran out (maintain).
-- Returns move()'s error, if any.
local function cancel_now(id, reason, now, data)
  local e = move(id, 'canceled')
  if e then return e end
  local key = rk(id)
  redis.call('HSET', key, 'reason', reason, 'finished_at', now)
  redis.call('HINCRBY', key, 'fence', 1)
  unqueue(id)
  emit(id, 'run.canceled', now, '', data)
  cancel_intents(id, now)
  checkpoint(id, 'run_finished', '', 'canceled', now)
  finished(id, 'canceled', now)
  expire(id, now)
  return nil
end

local function maintain(now, limit, max_recoveries, recovery_error)
  local fired, recovered, timed_out, forced = 0, 0, 0, 0
  local damage = {}
  -- runs this pass failed (id, flow, reason, ...): the worker logs each one
  local failed = {}
  local function failing(id, reason)
    failed[#failed + 1] = id
    failed[#failed + 1] = redis.call('HGET', rk(id), 'flow') or ''
    failed[#failed + 1] = reason
  end
  local function note(id, key, what)
    damage[#damage + 1] = id
    damage[#damage + 1] = key
    damage[#damage + 1] = what
  end
  -- Shared keys started over (key, what was wrong, ...). A run's
  -- queue is made sound before the run is queued (once a call per queue); every
  -- queue of the partition, once a pass of the repair pass: a damaged one would
  -- make every start of its runs, and every claim, fail.
  local rebuilt, sound_q = {}, {}
  local function sound_queue(q)
    if sound_q[q] then return end
    sound_q[q] = true
    rebuild_queue(q, rebuilt)
  end
  local function sound(id) sound_queue(redis.call('HGET', rk(id), 'queue')) end
  local cursor = repair_due(now)
  if cursor then
    -- (the workers' registry, in partition 0: live workers register again at
    -- their next heartbeat)
    local names = P .. K.queues
    for _, kt in ipairs({{names, 'set'}, {P .. K.workers, 'zset'}, {P .. K.worker, 'hash'}}) do
      local bad = mistyped(kt[1], kt[2])
      if bad then start_over(kt[1], bad, rebuilt) end
    end
    sound_queue('')
    for _, q in ipairs(redis.call('SMEMBERS', names)) do sound_queue(q) end
  end
  -- Each index's first entry is read once, and its due entries only when it is
  -- due: an idle pass reads five entries, not five ranges and then four entries.
  -- Due timers alone write to no other index maintain reports (wake_run and
  -- enqueue write the run, its queue and wake-ups): then only the timers' first
  -- entry is read again.
  local first, moved = {}, nil
  local function due(index)
    first[index] = redis.call('ZRANGE', P .. index, 0, 0, 'WITHSCORES')
    local at = first[index][2]
    if not at or tonumber(at) > tonumber(now) then return {} end
    moved = (moved == nil and index == K.timers) and 'timers' or 'all'
    return redis.call('ZRANGEBYSCORE', P .. index, '-inf', now, 'LIMIT', 0, limit)
  end
  for _, id in ipairs(due(K.timers)) do
    redis.call('ZREM', P .. K.timers, id)
    local key, bad, st = damaged(id)
    if bad then
      note(id, key, bad)
    elseif st == 'waiting_for_signal' or st == 'waiting_for_human' then
      sound(id)
      wake_run(id)
      fired = fired + 1
    elseif st == 'pending' then  -- a delayed start (start_at) is due
      sound(id)
      enqueue(id)
      fired = fired + 1
    end
  end
  for _, id in ipairs(due(K.leases)) do
    local key = rk(id)
    redis.call('ZREM', P .. K.leases, id)
    local dkey, bad, st = damaged(id)
    if not bad then vacate(id) end  -- a dead worker's slots come back with its leases
    if not bad and st == 'running' then
      dkey, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
    end
    if bad then
      note(id, dkey, bad)
    elseif st == 'running' then
      sound(id)
      redis.call('HINCRBY', key, 'fence', 1)
      redis.call('HDEL', key, 'lease_owner', 'lease_exp')
      if redis.call('HINCRBY', key, 'recoveries', 1) > tonumber(max_recoveries) then
        failing(id, 'max_recoveries_exceeded')
        fail_now(id, now, recovery_error, 'max_recoveries_exceeded')
      else
        move(id, 'replaying')
        emit(id, 'run.lease_expired', now, '', '')
        enqueue(id)
      end
      recovered = recovered + 1
    end
  end
  -- Run timeouts: a run still going at its deadline fails with reason timed_out,
  -- wherever it is (queued, leased: its activation is fenced out, parked).
  for _, id in ipairs(due(K.deadlines)) do
    redis.call('ZREM', P .. K.deadlines, id)
    local key, bad, st = damaged(id)
    if not bad and st and not TERMINAL[st] then
      key, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
    end
    if bad then
      note(id, key, bad)
    elseif st and not TERMINAL[st] and st ~= 'pending' then
      -- running, replaying and both waiting statuses may all move to failed
      key = rk(id)
      local t = (string.gsub(redis.call('HGET', key, 'timeout') or '?', '%.0$', ''))
      local why = '{"type":"builtins:TimeoutError","message":"the run did not finish within '
        .. 'its timeout of ' .. t .. ' seconds (counted from its start)","reason":"timed_out"}'
      redis.call('HINCRBY', key, 'fence', 1)
      failing(id, 'timed_out')
      fail_now(id, now, why, 'timed_out')
      timed_out = timed_out + 1
    end
  end
  -- Cancel requests whose grace ran out (Client.cancel(grace=)): the cancel is
  -- forced, as cancel.lua does at once (a hung cleanup cannot keep the run alive;
  -- its activation is fenced out). The event data was made with the request.
  for _, id in ipairs(due(K.cancels)) do
    redis.call('ZREM', P .. K.cancels, id)
    local key, bad, st = damaged(id)
    if not bad and st and not TERMINAL[st] then
      key, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
      if not bad then key, bad = intents_mistyped(id) end
    end
    if bad then
      note(id, key, bad)
    elseif st and not TERMINAL[st] and st ~= 'pending' then
      key = rk(id)
      local reason, data = unpack(redis.call('HMGET', key, 'cancel_reason', 'cancel_ev'))
      cancel_now(id, reason or 'canceled', now, data or '')
      forced = forced + 1
    end
  end
  -- Retention: delete runs whose time is up, and tombstones whose grace is.
  for _, id in ipairs(due(K.expiry)) do
    local key = rk(id)
    local bad = mistyped(key, 'hash')
    local st, at = nil, nil
    if not bad then st, at = unpack(redis.call('HMGET', key, 'status', 'expires_at')) end
    if bad then
      redis.call('ZREM', P .. K.expiry, id)
      note(id, key, bad)
    elseif not st then
      redis.call('UNLINK', P .. K.gone .. id, P .. K.done .. id)
      redis.call('ZREM', P .. K.expiry, id)
    elseif (st == 'completed' or st == 'canceled') and isnum(at) and tonumber(at) <= tonumber(now) then
      delete_run(id, now, '{"reason":"retention"}')
    else
      redis.call('ZREM', P .. K.expiry, id)  -- stale: the run was resumed
    end
  end
  local repaired = cursor and repair(now, limit, note, sound, cursor) or 0
  -- the first entries read above still hold unless a due loop or a repair wrote
  if moved == 'all' or repaired > 0 then first = {} elseif moved then first[K.timers] = nil end
  local function next_of(index)
    return first[index] or redis.call('ZRANGE', P .. index, 0, 0, 'WITHSCORES')
  end
  local nt = next_of(K.timers)
  local nl = next_of(K.leases)
  -- a run's deadline is a timer too: the worker wakes for the earliest of them
  local nd = next_of(K.deadlines)
  if nd[2] and (not nt[2] or tonumber(nd[2]) < tonumber(nt[2])) then nt = nd end
  nd = next_of(K.cancels)
  if nd[2] and (not nt[2] or tonumber(nd[2]) < tonumber(nt[2])) then nt = nd end
  return fired + timed_out + forced, recovered, nt[2] or '', nl[2] or '', repaired, damage, failed,
    rebuilt
end

-- The first ready run of queue `q` this worker may take: of a flow (version)
-- in `served` (nil: any flow), within the first 64; other flows' runs stay
-- queued for the workers that serve them. `lim` (nil: no limit) is the queue's
-- limits as the caller declares them (see scope_args): a run starts only with
-- a free slot of the queue (c), of this worker (w), of its concurrency key (k;
-- a run whose key is full is passed over for the next), and, for a first
-- activation, when the rate limit's theoretical arrival time (GCRA, interval t)
-- has come. Returns id and score, or nil and which limit holds the queue back
-- ('worker', 'concurrency', 'key', 'rate' and when it has room), if one does.
-- How many runs a queue's (or a key's) slot set holds. It is our own
-- bookkeeping: one that is damaged (another type) starts over, empty.
local function slots(key)
  local n = redis.pcall('ZCARD', key)
  if type(n) == 'number' then return n end
  redis.call('DEL', key)
  return 0
end

-- The rate limit's theoretical arrival time of queue `q` (0: none; a damaged
-- state starts over).
local function arrival(q)
  local t = redis.pcall('HGET', P .. K.qrate .. q, 'tat')
  if type(t) == 'table' then redis.call('DEL', P .. K.qrate .. q) end
  return tonumber(type(t) == 'string' and t or nil) or 0
end

-- Sticky routing: a run another worker parked and keeps in memory (field
-- sticky, see enqueue) is left to it for its delay, counted from when a worker
-- other than `owner` first saw it ready (field sticky_seen). Returns when it
-- falls to any worker, or nil if `owner` may take it now. `s` (optional): those
-- three fields as the caller just read them.
local function sticky_until(id, owner, now, s)
  s = s or redis.pcall('HMGET', rk(id), 'sticky', 'fence', 'sticky_seen')
  if s.err or not s[1] then return nil end
  local f, d, o = string.match(s[1], '^(%d+):%d+:([^:]*):(.+)$')
  if not f or o == owner or f ~= s[2] or not isnum(d) then return nil end
  local seen = s[3]
  if not isnum(seen) then
    seen = now
    redis.call('HSET', rk(id), 'sticky_seen', now)
  end
  local at = tonumber(seen) + tonumber(d)
  if at <= tonumber(now) then return nil end
  return at
end

local function head(q, served, lim, now, owner)
  local keyed = lim and lim.k
  local wide = served or keyed
  local r = redis.pcall('ZRANGE', P .. K.queue .. q, 0, wide and 63 or 0, 'WITHSCORES')
  -- (4th: the queue is empty; one of another type counts as empty: maintain() rebuilds it)
  if r.err or #r == 0 then return nil, nil, nil, true end
  if lim then
    if lim.w and lim.w <= 0 then return nil, 'worker' end
    if lim.c and slots(P .. K.qslots .. q) >= lim.c then return nil, 'concurrency' end
  end
  local held, later = nil, nil
  local i = 1
  while i <= #r do
    local ok, s = true, nil
    if served then
      -- with the sticky fields sticky_until reads: one read of the record
      local fv = redis.pcall('HMGET', rk(r[i]), 'flow', 'flow_version', 'sticky', 'fence',
                             'sticky_seen')
      -- a vanished run (no flow) or a record that is not a hash (an error) is
      -- taken too, so that it is dropped or reported below; else its flow at
      -- any version, or at the version it started on (see scope_args)
      local flow = fv[1]
      ok = fv.err ~= nil or type(flow) ~= 'string' or served[flow]
        or served[flow .. '\n' .. (fv[2] or '')]
      if not fv.err then s = {fv[3], fv[4], fv[5]} end
    end
    if ok and keyed then
      local ck = redis.pcall('HGET', rk(r[i]), 'ckey')
      if type(ck) == 'string' and slots(qkk(q, ck)) >= lim.k then
        ok, held = false, 'key'
      end
    end
    if ok and owner then
      local at = sticky_until(r[i], owner, now, s)
      if at then ok, later = false, math.min(at, later or at) end
    end
    if ok then
      if lim and lim.t and redis.pcall('HGET', rk(r[i]), 'status') == 'pending' then
        local tat = arrival(q)
        if tat > tonumber(now) then return nil, 'rate', tat end
      end
      return r[i], tonumber(r[i + 1])
    end
    if i + 2 > #r and not wide and later then  -- the head waits for its worker: look further
      wide = true
      r = redis.call('ZRANGE', P .. K.queue .. q, 0, 63, 'WITHSCORES')
    end
    i = i + 2
  end
  if later then return nil, held or 'sticky', later end
  return nil, held
end

-- What stops run `id` (usable, of status `st`) from being claimed, read first
-- (take writes nothing for it then): returns nil, key, what is wrong; else its
-- journal, its non-empty mailboxes and its lineage. With `cached` (the claimer
-- parked it last and holds it: see sticky_hit), journal and lineage are left out.
local function claimable(id, st, cached)
  local jkey, lkey, names = P .. K.journal .. id, P .. K.lineage .. id, P .. K.mailboxes .. id
  local journal, lineage = {}, {}
  if cached then
    local where, bad = mistyped_any({jkey, 'hash', lkey, 'hash'})
    if bad then return nil, where, bad end
  else
    journal = redis.pcall('HGETALL', jkey)
    if journal.err then return nil, jkey, mistyped(jkey, 'hash') end
    lineage = redis.pcall('HGETALL', lkey)
    if lineage.err then return nil, lkey, mistyped(lkey, 'hash') end
  end
  local boxes = redis.pcall('SMEMBERS', names)
  if boxes.err then return nil, names, mistyped(names, 'set') end
  -- mailboxes holding signals now: a wait on any other one can park
  -- without first trying to consume (the suspend script re-checks)
  local mail = {}
  for _, name in ipairs(boxes) do
    local n = redis.pcall('LLEN', mbk(id, name))
    if type(n) ~= 'number' then return nil, mbk(id, name), mistyped(mbk(id, name), 'list') end
    if n > 0 then mail[#mail + 1] = name end
  end
  if st == 'pending' then  -- run.started and its checkpoint are written below
    local key, bad = mistyped_any({P .. K.events .. id, 'stream', P .. K.checkpoints .. id, 'stream'})
    if bad then return nil, key, bad end
  end
  return journal, mail, lineage
end

-- Whether `owner` parked run `id` last and its journal is as it left it: its
-- sticky token (suspend.lua) names `owner`, the fence and the journal write
-- sequence of now. The claim then leaves the journal out (the worker has it).
local function sticky_hit(id, owner)
  local s = redis.call('HMGET', rk(id), 'sticky', 'fence', 'jseq')
  if not s[1] then return false end
  local f, j, o = string.match(s[1], '^(%d+):(%d+):[^:]*:(.+)$')
  return o == owner and f == (s[2] or '0') and j == (s[3] or '0')
end

-- The partition's queues (a list of another type: none, until maintain() rebuilds it).
local function all_queues()
  local names = redis.pcall('SMEMBERS', P .. K.queues)
  return names.err and {} or names
end

-- Take up to `limit` ready runs (lowest score first across `queues`; every
-- queue when `every`), lease them to `owner`, and return for each {id, its run
-- hash, its whole journal, its non-empty mailboxes, its lineage records, 1 when
-- journal and lineage were left out (sticky_hit), else 0}. A run
-- whose data cannot be worked with is taken off its queue and not leased: it
-- comes back as {id, key, what is wrong}, for the worker to fail it alone.
-- `lims`: queue -> its limits (see head). Also returns when a rate-limited
-- queue next has room ('' if none waits for it), and whether a ready run waits
-- for this caller's own worker cap.
local function take(owner, now, expiry, limit, queues, every, served, lims)
  if every then queues = all_queues() end
  local out = {}
  local n = 0
  local held = {}  -- queue -> the limit holding it back (counts only grow during a take)
  local gone = {}  -- queues found empty (a take only takes from queues: they stay so)
  local room, capped = nil, false
  while n < limit do
    local best, bestq, bests = nil, nil, nil
    for _, q in ipairs(queues) do
      if not held[q] then
        local id, got, at, none = head(q, served, lims[q], now, owner)  -- got: a score, or a limit
        if none then gone[q] = true end
        if id then
          if best == nil or got < bests then best, bestq, bests = id, q, got end
        elseif got then
          held[q] = got
          if at and (room == nil or at < room) then room = at end
          if got == 'worker' then capped = true end
        end
      end
    end
    if best == nil then break end
    redis.call('ZREM', P .. K.queue .. bestq, best)
    local key = rk(best)
    local where, bad, st, fields = damaged(best)
    local journal, mail, lineage, hit = nil, nil, nil, false
    -- anything else is a stale entry (e.g. canceled meanwhile): drop it
    if not bad and (st == 'pending' or st == 'running' or st == 'replaying') then
      hit = sticky_hit(best, owner)
      journal, mail, lineage = claimable(best, st, hit)
      if not journal then where, bad = mail, lineage end
    end
    if bad then
      out[#out + 1] = {best, where, bad}
      n = n + 1
    elseif journal then
      local lim = lims[bestq]
      if st ~= 'running' then move(best, 'running', false, fields) end
      if st == 'pending' then
        redis.call('HSET', key, 'started_at', now)
        arm(best, now)
        emit(best, 'run.started', now, '', '')
        checkpoint(best, 'run_started', '', 'running', now)
        if lim and lim.t then  -- GCRA without burst: one start per interval
          local tat = math.max(arrival(bestq), tonumber(now))
          redis.call('HSET', P .. K.qrate .. bestq, 'tat', string.format('%.17g', tat + lim.t))
        end
      end
      -- the slot it executes in, until vacate() gives it back
      slots(P .. K.qslots .. bestq)  -- (a damaged set is replaced before the write)
      redis.call('ZADD', P .. K.qslots .. bestq, now, best)
      local ck = redis.call('HGET', key, 'ckey')
      if ck then
        slots(qkk(bestq, ck))
        redis.call('ZADD', qkk(bestq, ck), now, best)
      end
      if lim and lim.w then lim.w = lim.w - 1 end
      redis.call('HINCRBY', key, 'fence', 1)
      redis.call('HSET', key, 'lease_owner', owner, 'lease_exp', expiry,
                 'slot', ((lim and (lim.c or lim.k)) and '1' or '0') .. bestq)
      redis.call('ZADD', P .. K.leases, expiry, best)
      redis.call('HDEL', key, 'sticky', 'sticky_seen')  -- claimed: no longer parked anywhere
      out[#out + 1] = {best, redis.call('HGETALL', key), journal, mail, lineage, hit and 1 or 0}
      n = n + 1
    end
  end
  -- A rate-limited queue this take did not reach (its caller had no slot left)
  -- reports its next room too: every poller knows when to look again.
  for _, q in ipairs(queues) do
    if lims[q] and lims[q].t and not held[q] then
      local tat = arrival(q)
      if tat > tonumber(now) and (room == nil or tat < room) and not gone[q]
          and redis.call('ZCARD', P .. K.queue .. q) > 0 then
        room = tat
      end
    end
  end
  -- Tokens are hints: once their queues are empty they only cause empty claims.
  -- A queue that a shared limit holds back counts as empty: the slot freed
  -- (vacate) wakes a worker, and the rate limit's next room is a due time.
  -- Another worker may have room where this one is at its own cap: kept.
  local empty = true
  for _, q in ipairs(queues) do
    if gone[q] or redis.call('ZCARD', P .. K.queue .. q) == 0
        or (held[q] and held[q] ~= 'worker') then
      redis.call('DEL', P .. K.wake .. q)
    else empty = false end
  end
  if every and empty then redis.call('DEL', P .. K.wake .. '*') end
  return out, room and string.format('%.17g', room) or '', capped
end

-- A claim across partitions (stores/_claiming.py) first asks every partition,
-- in one concurrent round, for its best ready runs without taking them: up to
-- `k` of them, lowest score first, as {score, created_at, queue}. A queue's
-- first run is its first this caller may take (head: flows served, limits,
-- sticky runs); the runs behind it are not checked. Also whether a ready run
-- waits for this caller's own worker cap, and when a held queue has room.
local function peek(k, owner, queues, every, served, lims, now)
  if every then queues = all_queues() end
  local found, capped, room = {}, false, nil
  for _, q in ipairs(queues) do
    local id, got, at = head(q, served, lims[q], now, owner)
    if id then
      local r = redis.call('ZRANGEBYSCORE', P .. K.queue .. q, string.format('%.17g', got), '+inf',
                           'WITHSCORES', 'LIMIT', 0, k)
      for i = 1, #r, 2 do found[#found + 1] = {r[i + 1], r[i], q} end
    else
      if got == 'worker' then capped = true end
      if at and (room == nil or at < room) then room = at end
    end
  end
  table.sort(found, function(a, b) return tonumber(a[1]) < tonumber(b[1]) end)
  local out = {}
  for i = 1, math.min(k, #found) do
    local at = redis.pcall('HGET', rk(found[i][2]), 'created_at')
    out[i] = {found[i][1], type(at) == 'string' and at or '', found[i][3]}
  end
  return out, capped, room
end

-- ARGV from `from` on: m, m queue limits (name, concurrency, this worker's
-- room, key concurrency, rate interval in seconds; '' for none), n, n flow
-- scopes (n = 0: any flow; a scope is a flow name, any version, or a name, a
-- newline and a version: '' for runs started unversioned), then queue names
-- (none: every queue). Returns
-- queues, every, served (a set, or nil), limits (queue -> {c, w, k, t}); nil
-- and what is wrong for an argument that is not a number.
local function scope_args(from)
  local lims = {}
  local m = tonumber(ARGV[from])
  for i = from + 1, from + 5 * m, 5 do
    local bad = badnum(ARGV[i + 1], 'concurrency', true, true)
      or badnum(ARGV[i + 2], 'worker room', true, true)
      or badnum(ARGV[i + 3], 'key concurrency', true, true)
      or badnum(ARGV[i + 4], 'rate interval', false, true)
    if bad then return nil, bad end
    lims[ARGV[i]] = {c = tonumber(ARGV[i + 1]), w = tonumber(ARGV[i + 2]),
                     k = tonumber(ARGV[i + 3]), t = tonumber(ARGV[i + 4])}
  end
  from = from + 1 + 5 * m
  local bad = badnum(ARGV[from], 'flow count', true)
  if bad then return nil, bad end
  local n = tonumber(ARGV[from])
  local served = nil
  if n > 0 then
    served = {}
    for i = from + 1, from + n do served[ARGV[i]] = true end
  end
  local queues = {}
  for i = from + 1 + n, #ARGV do queues[#queues + 1] = ARGV[i] end
  return queues, #queues == 0, served, lims
end
