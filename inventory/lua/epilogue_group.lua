-- ARGV[4] holds the calls' key and argument counts in runs (group.go):
-- per run the calls' own key count, their own argument count and how
-- many calls in a row have them, three bytes each, high byte first, then
-- the key count and the argument count of the context the run's calls
-- share, a byte each. A run's context comes after its last call's own
-- keys (and arguments). It is read with string.byte, which
-- parses no number (a tonumber of an argument is a strtod), once per
-- run: a group's calls mostly have one shape, and reading each call's
-- counts cost the node about 1,800 instructions per call (callgrind).
local counts, byte = ARGV[4], string.byte
local kp, ap, out, m, wrote = 2, 5, {}, 0, 0
for i = 11, #counts, 11 do
  local k1, k2, k3, a1, a2, a3, c1, c2, c3, cnk, cna = byte(counts, i - 10, i)
  local nk, na, nc = (k1 * 256 + k2) * 256 + k3, (a1 * 256 + a2) * 256 + a3, (c1 * 256 + c2) * 256 + c3
  -- the run's context, after its calls' own: KEYS[cb + 1 ..], ARGV[ca + 1 ..]
  local cb, ca = kp + nc * nk - 1, ap + nc * na - 1
  for _ = 1, nc do
    -- the call's keys are KEYS[kp ..], its arguments ARGV[ap ..]: its body
    -- reads them in place (luaflat.go), its KEYS[2] being KEYS[kp]
    local ok, r = pcall(body, kp - 2, ap - 4, nk, na, cb, ca, cnk, cna)
    kp, ap = kp + nk, ap + na
    local t = type(r)
    if not ok then
      if t == 'table' and r.err then r = r.err end
      r = tostring(r)
      if not string.match(r, '^%u[%u_]+ ') then r = 'ERR ' .. r end -- a Lua error, not a command's error reply
      r, t = redis.error_reply(r), 'error'
    elseif t == 'table' and r.err then
      r, t = redis.error_reply(r.err), 'error'
    else
      wrote = wrote + 1
    end
    -- out holds the replies flat (group.go, runScript reads them): a
    -- table reply (not an error or a status) as its element count, then its
    -- elements; a string, false or an error as itself; any other value (a
    -- number, true) as a table of that one value. Redis turns a table into
    -- a reply by looking up its special fields and deferring its length,
    -- which costs more per call than these few Lua steps. The type is read
    -- once (t; 'error' for an error reply made here), the usual reply, a
    -- string, tested first.
    if t == 'string' then
      m = m + 1
      out[m] = r
    elseif t == 'table' and not r.err and not r.ok then
      local c, j, x = m + 1, 1, r[1]
      out[c] = 0
      while x ~= nil do
        out[c + j] = x
        j = j + 1
        x = r[j]
      end
      out[c] = j - 1
      m = c + j - 1
    elseif t == 'number' or r == true then
      m = m + 1
      out[m] = {r}
    else
      m = m + 1
      out[m] = r or false
    end
  end
  kp, ap = kp + cnk, ap + cna -- past the run's context
end
flush()
