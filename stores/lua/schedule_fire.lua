-- KEYS: schedule. ARGV: P, id, version, now, next tick ('-': unchanged, '': none),
--       n, then n times: kind ('tick' | 'buffered' | 'trigger'), tick, run id,
--       args hash, run.created event data, field count, field, value, ...
-- Fire a schedule's due ticks (oldest first) and advance it to its next tick in
-- one step, so that a crash cannot lose or double a tick. Nothing happens unless
-- the schedule is still at `version` (another worker fired it first: 0). A tick's
-- run id is derived from the schedule and the tick: one that exists is not created
-- again. Overlap, while the schedule's last run has not ended: 'allow' starts the
-- tick anyway; 'buffer_one' keeps one tick (field buffered; started when that run
-- ends, see sched_wake); 'skip', or a second tick to buffer, skips it (counted).
-- Returns {1, run ids started...} or 0.
local key, id, now = KEYS[1], ARGV[2], ARGV[4]
local bad = badnum(now, 'now') or badnum(ARGV[6], 'tick count', true)
  or (ARGV[5] ~= '-' and badnum(ARGV[5], 'next tick', false, true))
if bad then return err('invalid', bad) end
local items, i = {}, 7
for _ = 1, tonumber(ARGV[6]) do
  local n = tonumber(ARGV[i + 5])
  if not n then return err('invalid', 'field count must be an integer') end
  local it = {kind = ARGV[i], tick = ARGV[i + 1], run = ARGV[i + 2], data = ARGV[i + 4],
              fields = {'args_hash', ARGV[i + 3]}}
  for j = i + 6, i + 5 + n do it.fields[#it.fields + 1] = ARGV[j] end
  bad = badnum(it.tick, 'tick') or bad_fields(it.fields)
  if bad then return err('invalid', bad) end
  local log = P .. K.events .. it.run
  bad = mistyped(log, 'stream') or mistyped(rk(it.run), 'hash')
  if bad then return err('corrupt', log, bad) end
  for j = 1, #it.fields, 2 do
    if it.fields[j] == 'queue' then
      local where
      where, bad = queue_damage(it.fields[j + 1])
      if bad then return err('index', where, bad) end
    end
  end
  items[#items + 1] = it
  i = i + 6 + n
end
bad = mistyped(key, 'hash')
if bad then return err('corrupt', key, bad) end
local f = redis.call('HMGET', key, 'ver', 'overlap', 'last_run', 'buffered', 'trigger')
if not f[1] or f[1] ~= ARGV[3] then return 0 end
local overlap, last, buffered = f[2], f[3] or '', f[4] or ''
local function active()
  if last == '' then return false end
  local st = redis.pcall('HGET', rk(last), 'status')
  return type(st) == 'string' and not TERMINAL[st]
end
local started, skipped, last_tick, last_skipped = {}, 0, nil, nil
for _, it in ipairs(items) do
  local go = false
  if it.kind == 'trigger' then
    go = true
    if f[5] == it.tick then redis.call('HSET', key, 'trigger', '') end
  elseif it.kind == 'buffered' then
    if buffered == it.tick and not active() then go, buffered = true, '' end
  elseif overlap == 'allow' or not active() then
    go = true
  elseif overlap == 'buffer_one' and buffered == '' then
    buffered = it.tick
  else
    skipped, last_skipped = skipped + 1, it.tick
  end
  if go then
    local rkey = rk(it.run)
    if redis.call('EXISTS', rkey) == 0 then
      redis.call('HSET', rkey, unpack(it.fields))
      redis.call('HSET', rkey, 'schedule', id)
      move(it.run, 'pending')
      local created = redis.call('HGET', rkey, 'created_at')
      redis.call('ZADD', P .. K.runs, created, it.run)
      emit(it.run, 'run.created', created, '', it.data)
      enqueue(it.run)
    end
    last, last_tick = it.run, it.tick
    started[#started + 1] = it.run
  end
end
redis.call('HSET', key, 'last_run', last, 'buffered', buffered)
if last_tick then redis.call('HSET', key, 'last_tick', last_tick) end
if last_skipped then redis.call('HSET', key, 'last_skipped', last_skipped) end
if ARGV[5] ~= '-' then redis.call('HSET', key, 'next', ARGV[5]) end
redis.call('HINCRBY', key, 'fired', #started)
redis.call('HINCRBY', key, 'skipped', skipped)
redis.call('HINCRBY', key, 'ver', 1)
sched_arm(id, now)
return {1, unpack(started)}
