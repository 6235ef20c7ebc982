-- KEYS and ARGV of `record`, then (channel, intent JSON, event data tail) * n, n.
-- `record` (the same body: journal entry, event, checkpoint) plus the step's
-- outbound intents, in one script: a step's intents are written exactly when
-- its result is. A call retried after a lost reply finds its record and adds
-- nothing (the intents are there already). The line `--@splice record` stands
-- for record.lua's code up to its final `return 1`.
if redis.call('HGET', KEYS[2], ARGV[4]) == ARGV[5] then return 1 end
local nbad = badnum(ARGV[#ARGV], 'intent count', true)
if nbad or #ARGV ~= 10 + 3 * tonumber(ARGV[#ARGV]) then
  return err('invalid', nbad or 'intents must come in channel, intent, event data triples')
end
local skey, sbad = mistyped_any({P .. K.intents .. ARGV[2], 'set', P .. K.events .. ARGV[2], 'stream'})
if sbad then return err('corrupt', skey, sbad) end
--@splice record
local n = tonumber(ARGV[#ARGV])
for i = #ARGV - 3 * n, #ARGV - 1, 3 do
  add_intent(ARGV[2], ARGV[4], ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[6])
end
return 1
