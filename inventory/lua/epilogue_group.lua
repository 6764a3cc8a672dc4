local n = tonumber(ARGV[4])
local kp, ap, out, wrote = 2, 5 + 2 * n, {}, 0
for i = 1, n do
  local nk, na = tonumber(ARGV[3 + 2 * i]), tonumber(ARGV[4 + 2 * i])
  local K, A
  if nk <= 4000 and na <= 4000 then
    -- one copy in C; unpack's results go on Lua's stack (at most 8000)
    K = {KEYS[1], unpack(KEYS, kp, kp + nk - 1)}
    A = {ARGV[1], ARGV[2], ARGV[3], unpack(ARGV, ap, ap + na - 1)}
  else
    K, A = {KEYS[1]}, {ARGV[1], ARGV[2], ARGV[3]}
    for j = 0, nk - 1 do K[2 + j] = KEYS[kp + j] end
    for j = 0, na - 1 do A[4 + j] = ARGV[ap + j] end
  end
  kp, ap = kp + nk, ap + na
  local ok, r = pcall(body, K, A)
  if not ok then
    if type(r) == 'table' and r.err then r = r.err end
    r = tostring(r)
    if not string.match(r, '^%u[%u_]+ ') then r = 'ERR ' .. r end -- a Lua error, not a command's error reply
    r = redis.error_reply(r)
  elseif type(r) == 'table' and r.err then
    r = redis.error_reply(r.err)
  else
    wrote = wrote + 1
  end
  if r == nil then r = false end
  out[i] = r
end
flush()
local seq = tonumber(meta[3]) or 0
