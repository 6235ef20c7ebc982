-- KEYS: run. ARGV: P, id, fence, step key, now. The optional step_started boundary.
local id = ARGV[2]
if not fenced(id, ARGV[3]) then return 0 end
local n = checkpoint(id, 'step_started', ARGV[4], 'running', ARGV[5])
emit(id, 'step.started', ARGV[5], ARGV[4], '', n)  -- trims at every 100th checkpoint
return 1
