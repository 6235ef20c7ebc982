-- ARGV: P, now, limit, max recoveries, error JSON for a run that exceeds them.
local f, r, nt, nl = maintain(ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5])
return {f, r, nt, nl}
