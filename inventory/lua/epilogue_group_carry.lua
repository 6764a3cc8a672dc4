-- Carried commits (carry.go holds their rule), in a write script's
-- group only: the last ARGV is their count c; their order keys are the
-- last c KEYS, and the 3c ARGV before the count are, commit after commit,
-- the staging record's value its stage wrote, the reserved record's value
-- up to its reserved_at, and the record's created (stagedCommitValues).
-- Each is the order script's commit of a staged order by its fast path
-- (order_commit_exact): it changes only that exact staging record into
-- the reserved record the commit op would write, and leaves anything else
-- as it is. They run before the group's calls, as if each had come by
-- itself just before the group; carried is one byte per commit, '1' when
-- commit j changed its record, '0' when it left it as it was (the caller
-- then sends that one by itself): a string, '' for none, which costs the
-- node no table and no nested reply (most groups carry none), and no
-- tonumber of a count of 0.
local carried, committed = '', 0
if ARGV[#ARGV] ~= '0' then
  local c = tonumber(ARGV[#ARGV])
  local k0, a0, flags = #KEYS - c, #ARGV - 1 - 3 * c, {}
  for j = 1, c do
    local a = a0 + 3 * j
    if order_commit_exact(KEYS[k0 + j], ARGV[a - 2], ARGV[a - 1], ARGV[a]) then
      flags[j], committed = '1', committed + 1
    else
      flags[j] = '0'
    end
  end
  carried = table.concat(flags)
end
