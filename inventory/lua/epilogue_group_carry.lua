-- Carried commits (carry.go holds their rule), in a write script's
-- group only: the last ARGV is their count c; their order keys are the
-- last c KEYS, and the 2c ARGV before the count are their tokens and
-- parts lists in their stored form (packOrderParts: the node does not
-- pack them), commit after commit. Each is the order script's commit of
-- a staged order by its fast path (order_commit_staged): it changes only
-- a staging record of its token, in the packed layout, into the reserved
-- record the commit op would write, and leaves anything else as it is.
-- They run before the group's calls, as if each had come by itself just
-- before the group; carried is one byte per commit, '1' when commit j
-- changed its record, '0' when it left it as it was (the caller then
-- sends that one by itself): a string, '' for none, which costs the node
-- no table and no nested reply (most groups carry none), and no tonumber
-- of a count of 0.
local carried, committed = '', 0
if ARGV[#ARGV] ~= '0' then
  local c = tonumber(ARGV[#ARGV])
  local k0, a0, flags = #KEYS - c, #ARGV - 1 - 2 * c, {}
  for j = 1, c do
    if order_commit_staged(KEYS[k0 + j], ARGV[a0 + 2 * j - 1], ARGV[a0 + 2 * j]) then
      flags[j], committed = '1', committed + 1
    else
      flags[j] = '0'
    end
  end
  carried = table.concat(flags)
end
