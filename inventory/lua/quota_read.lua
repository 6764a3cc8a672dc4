
local v, err = int(redis.call('GET', KEYS[2]), KEYS[2])
if err then return err end
return v
