
end
local r = body(KEYS, ARGV)
if type(r) == 'table' and r.err then return r end
return {tonumber(meta[3]) or 0, r}
