-- part_due(v): a part deadline argument (partDue.arg, take.go) as ms by
-- this node's clock: '+' and a hold counted from now, or the time itself.
-- It keeps its last, as Idl does (the calls of one script call mostly
-- bring the same argument, and now does not move while a script runs): a
-- library definition, not one in the body, which would make a closure per
-- call.
local part_due = memo(function(v)
  if string.sub(v, 1, 1) == '+' then return now + tonumber(string.sub(v, 2)) end
  return tonumber(v)
end)
