-- ARGV: P, now, limit, max recoveries, error JSON for a run that exceeds them.
local bad = badnum(ARGV[2], 'now') or badnum(ARGV[3], 'limit', true)
  or badnum(ARGV[4], 'max recoveries', true)
if bad then return err('invalid', bad) end
local f, r, nt, nl, fixed, damage, failed, rebuilt = maintain(ARGV[2], tonumber(ARGV[3]), ARGV[4],
                                                             ARGV[5])
-- (as poll's first part: no worker cap, no schedules)
return {f, r, nt, nl, fixed, damage, failed, 0, '', rebuilt}
