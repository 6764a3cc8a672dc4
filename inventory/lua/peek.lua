
local status = ''
if ARGV[4] == 'order' then
  local f = redis.call('HMGET', KEYS[2], 'status', 'moved')
  if f[1] and not f[2] then status = f[1] end
end
local out = {status}
for i = 3, #KEYS do
  local s = stock_get(KEYS[i])
  local avail, err = int(s[1], KEYS[i] .. ' available')
  if err then return err end
  local resv, limit
  resv, err = int(s[3], KEYS[i] .. ' reserved')
  if err then return err end
  limit, err = int(s[2], KEYS[i] .. ' limit')
  if err then return err end
  out[#out + 1] = avail
  out[#out + 1] = resv
  out[#out + 1] = limit
  out[#out + 1] = redis.call('HEXISTS', KEYS[i], 'loaded')
end
return out
