
local key = KEYS[2]
if redis.call('EXISTS', key) == 1 and not redis.call('HGET', key, 'moved') then return 'exists' end
redis.call('DEL', key)
for i = 5, #ARGV - 1, 2 do
  if ARGV[i] ~= 'moved' then redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
end
local pttl = tonumber(ARGV[4])
if pttl and pttl > 0 then redis.call('PEXPIRE', key, I(pttl)) end
return 'installed'
