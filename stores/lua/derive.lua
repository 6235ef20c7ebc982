-- KEYS: the new run, its journal. ARGV: P, id, args_hash, event type, event data,
--       n fields, (field, value) * n, n records, (key, record) * n,
--       (key, lineage record) ...
-- Creates a replayed or forked run: its journal holds the source's records up
-- to the checkpoint; the source's later results wait in its lineage hash.
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
if (#ARGV - 7 - 2 * nf - 2 * nj) % 2 ~= 0 or #ARGV < 7 + 2 * nf + 2 * nj then
  return err('invalid', 'records and lineage records must come in key, record pairs')
end
local where
where, bad = mistyped_any({KEYS[2], 'hash', P .. K.jseq .. id, 'hash', P .. K.lineage .. id, 'hash',
                           P .. K.events .. id, 'stream'})
if bad then return err('corrupt', where, bad) end
redis.call('HSET', key, unpack(fields))
local i = 8 + 2 * nf
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
