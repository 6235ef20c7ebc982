-- KEYS: run. ARGV: P, id, fence, step key, now. The optional step_started boundary.
local id = ARGV[2]
local bad = badnum(ARGV[5], 'now')
if bad then return err('invalid', bad) end
local run, where
run, where, bad = fenced(id, ARGV[3])
if not run then return bad and err('corrupt', where, bad) or 0 end
where, bad = mistyped_any({P .. K.checkpoints .. id, 'stream', P .. K.events .. id, 'stream'})
if bad then return err('corrupt', where, bad) end
local n = checkpoint(id, 'step_started', ARGV[4], 'running', ARGV[5])
emit(id, 'step.started', ARGV[5], ARGV[4], '', n)  -- trims at every 100th checkpoint
return 1
