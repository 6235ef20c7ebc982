-- KEYS: the new run, its journal. ARGV: P, id, args_hash, event type, event data,
--       n fields, (field, value) * n, n records, (key, record) * n,
--       n mail, (mailbox, payload, dedup id) * n, (key, lineage record) ...
-- Creates a replayed or forked run: its journal holds the source's records up
-- to the checkpoint; the source's later results wait in its lineage hash; its
-- mailboxes start with the mail given (the recorded outcomes of child runs it
-- reuses), each dedup id kept. A run with a parent is listed as its child.
local key, id = KEYS[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then return err('exists') end
local bad = badnum(ARGV[6], 'field count', true)
if bad then return err('invalid', bad) end
local nf = tonumber(ARGV[6])
local fields = {'args_hash', ARGV[3]}
for j = 7, 6 + 2 * nf do fields[#fields + 1] = ARGV[j] end
bad = bad_fields(fields) or badnum(ARGV[7 + 2 * nf], 'record count', true)
if bad then return err('invalid', bad) end
local nj = tonumber(ARGV[7 + 2 * nf])
local at = 8 + 2 * nf + 2 * nj  -- the mail count
bad = badnum(ARGV[at], 'mail count', true)
if bad then return err('invalid', bad) end
local nm = tonumber(ARGV[at])
if (#ARGV - at - 3 * nm) % 2 ~= 0 or #ARGV < at + 3 * nm then
  return err('invalid', 'records and lineage records must come in key, record pairs')
end
local where
local wants = {KEYS[2], 'hash', P .. K.jseq .. id, 'hash', P .. K.lineage .. id, 'hash',
               P .. K.events .. id, 'stream', P .. K.mailboxes .. id, 'set',
               P .. K.dedup .. id, 'set'}
for j = at + 1, at + 3 * nm, 3 do
  wants[#wants + 1], wants[#wants + 2] = mbk(id, ARGV[j]), 'list'
end
where, bad = mistyped_any(wants)
if bad then return err('corrupt', where, bad) end
local q, parent = nil, nil
for j = 1, #fields, 2 do
  if fields[j] == 'queue' then q = fields[j + 1] elseif fields[j] == 'parent' then parent = fields[j + 1] end
end
where, bad = queue_damage(q)
if not bad then
  local shared = {P .. K.status .. 'pending', 'zset', P .. K.runs, 'zset', P .. K.expiry, 'zset'}
  if parent then shared[7], shared[8] = P .. K.children .. parent, 'zset' end
  where, bad = mistyped_any(shared)
end
if bad then return err('index', where, bad) end
redis.call('HSET', key, unpack(fields))
local i = 8 + 2 * nf
local run = {false, false, false, false}  -- a new run: no counters yet
for _ = 1, nj do
  journaled(id, run, KEYS[2], ARGV[i], ARGV[i + 1])
  i = i + 2
end
for j = at + 1, at + 3 * nm, 3 do
  redis.call('RPUSH', mbk(id, ARGV[j]), ARGV[j + 1])
  redis.call('SADD', P .. K.mailboxes .. id, ARGV[j])
  redis.call('SADD', P .. K.dedup .. id, ARGV[j + 2])
  tally(id, ARGV[j], 1, #ARGV[j + 1])
end
for j = at + 1 + 3 * nm, #ARGV, 2 do redis.call('HSET', P .. K.lineage .. id, ARGV[j], ARGV[j + 1]) end
move(id, 'pending')
local created = redis.call('HGET', key, 'created_at')
redis.call('ZADD', P .. K.runs, created, id)
if parent then redis.call('ZADD', P .. K.children .. parent, created, id) end
emit(id, ARGV[4], created, '', ARGV[5])
enqueue(id)
return {1}
