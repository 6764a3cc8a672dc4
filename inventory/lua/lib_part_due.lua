
local function part_due(v)
  if string.sub(v, 1, 1) == '+' then return now + tonumber(string.sub(v, 2)) end
  return tonumber(v)
end
