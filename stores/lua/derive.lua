-- KEYS: the new run, its journal. ARGV: P, id, args_hash, event type, event data,
--       n fields, (field, value) * n, n records, (key, record) * n,
--       (key, lineage record) ...
-- Creates a replayed or forked run: its journal holds the source's records up
-- to the checkpoint; the source's later results wait in its lineage hash.
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
