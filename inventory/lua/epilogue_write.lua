
end
local r = body(KEYS, ARGV)
flush()
if type(r) == 'table' and r.err then return r end
return {redis.call('HINCRBY', KEYS[1], 'seq', '1'), r}
