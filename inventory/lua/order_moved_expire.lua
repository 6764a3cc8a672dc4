
-- A copy marked moved gets the records' retention (migrate.go,
-- expireMoved): KEYS[2] the order key, ARGV[4] its mark (the epoch token
-- of the move or retirement), ARGV[5] the retention in ms. Only a copy
-- marked at ARGV[4] that has no TTL (its order was reserved when it was
-- marked) gets it; a copy with a TTL keeps its own, and anything else is
-- left as it is. Returns 1 when it gave the TTL, else 0.
local key = KEYS[2]
if redis.call('PTTL', key) ~= -1 then return 0 end
local t = order_get(key)
if not t or t.moved ~= ARGV[4] then return 0 end
redis.call('PEXPIRE', key, ARGV[5])
return 1
