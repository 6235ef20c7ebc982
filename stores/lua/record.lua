-- KEYS: run, journal. ARGV: P, id, fence, step key, record, now,
--       event type|'', event data|'', checkpoint kind|''
-- The journal write (HSET of KEYS[2]) is the first write: a journal that is
-- not a hash fails it, and nothing is written.
local id = ARGV[2]
local bad = badnum(ARGV[6], 'now')
if bad then return err('invalid', bad) end
local run, where
run, where, bad = fenced(id, ARGV[3])
if not run then return bad and err('corrupt', where, bad) or 0 end
-- A result's step_completed checkpoint lives in its js: entry (a result is
-- final); a failure's is a stream entry, kept when resume discards the failure.
local stepcp = ARGV[9] == 'step_completed' and ARGV[7] ~= 'step.failed'
local wants = {P .. K.jseq .. id, 'hash'}
if ARGV[7] ~= '' then wants[3], wants[4] = P .. K.events .. id, 'stream' end
if ARGV[9] ~= '' and not stepcp then
  wants[#wants + 1], wants[#wants + 2] = P .. K.checkpoints .. id, 'stream'
end
where, bad = mistyped_any(wants)
if bad then return err('corrupt', where, bad) end
journaled(id, run, KEYS[2], ARGV[4], ARGV[5], stepcp and ARGV[6] or nil)
if ARGV[7] ~= '' then emit(id, ARGV[7], ARGV[6], ARGV[4], ARGV[8], run[3]) end
-- a run that started a child flow: canceling it cancels its children (finished)
if ARGV[7] == 'child.started' then redis.call('HSET', KEYS[1], 'kids', '1') end
if ARGV[9] ~= '' and not stepcp then checkpoint(id, ARGV[9], ARGV[4], 'running', ARGV[6]) end
return 1
