-- Copies marked moved get the records' retention (migrate.go,
-- expireMoved): KEYS[2..] the order keys, ARGV[4] the retention in ms,
-- ARGV[5..] each key's mark (the epoch token of its move or retirement),
-- in the order of the keys. Only a copy marked at its mark that has no
-- TTL (its order was reserved when it was marked) gets it; a copy with a
-- TTL keeps its own, and anything else is left as it is. Returns how
-- many got it.
local n = 0
for i = 2, #KEYS do
  local key = KEYS[i]
  if redis.call('PTTL', key) == -1 then
    local t = order_get(key)
    if t and t.moved == ARGV[i + 3] then
      redis.call('PEXPIRE', key, ARGV[4])
      n = n + 1
    end
  end
end
return n
