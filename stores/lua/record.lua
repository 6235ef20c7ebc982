-- KEYS: run, journal. ARGV: P, id, fence, step key, record, now,
--       event type|'', event data|'', checkpoint kind|''
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
