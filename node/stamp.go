package node

import (
	"github.com/redis/go-redis/v9"
)

// StampKey is the hash on every node that records which node it is:
// fields name (configured node name), incarnation (random id, new each time
// the node is stamped or accepted), stamped_at (unix ms), seq (the write
// sequence every inventory write script advances), gen (the acceptance
// generation, raised by `shardis node accept`; missing = 0) and data_of
// (the incarnation the node's data was stamped with before its last stamp
// or accept, [NoEarlierData] when it had none; missing on a stamp written
// before shardis recorded it: unknown), run and run_at (the server
// process's run_id the stamp was last read on, and when, by the node's
// clock in ms, it was first read there: "A new server process") and
// replid (the server's master_replid the stamp was last read with: "A
// dataset replaced in the same server process", wentback.go).
const StampKey = "shardis:node"

// stampScript reads the stamp, writing a fresh one when it is missing and
// ARGV[4] is "1" (nobody witnessed the node before). Returns {name,
// incarnation, created(0|1), seq, gen, settle, run}; name "" when the stamp is
// missing and was not written. settle is how many ms the node's data is
// still held back (ARGV[6]: the hold in ms) since the stamp was first
// read on this server process with this replication id (fields run,
// run_at and replid: "A new server process", identity.go, and "A dataset
// replaced in the same server process", wentback.go), run the server process's run_id. With ARGV[5] "1" (a Sentinel node) it first
// refuses, with SHARDIS_REPLICA, a server that is not a master. A stamp
// that records a loss (field went_back, wentback.go) is refused with
// SHARDIS_WENT_BACK and the field's value, stamped or not.
var stampScript = redis.NewScript(stampSrc)

const stampSrc = `
local repl = redis.call('INFO', 'replication')
if ARGV[5] == '1' then
  local role = string.match(repl, 'role:(%a+)')
  if role ~= 'master' then return redis.error_reply('SHARDIS_REPLICA role:' .. tostring(role)) end
end
repl = string.match(repl, 'master_replid:(%w+)') or ''
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%w+)') or ''
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', KEYS[1], 'name', 'incarnation', 'seq', 'gen', 'run', 'run_at', '` + wentBackField + `', 'replid')
if f[7] then return redis.error_reply('` + wentBackReply + `' .. f[7]) end
if not f[1] then
  if ARGV[4] ~= '1' then return {'', '', 0, 0, 0, 0, run} end
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'incarnation', ARGV[2], 'stamped_at', ARGV[3], 'data_of', '` + NoEarlierData + `',
    'run', run, 'run_at', '0', 'replid', repl)
  return {ARGV[1], ARGV[2], 1, 0, 0, 0, run}
end
local at = tonumber(f[6]) or 0
if f[1] == ARGV[1] and (f[5] ~= run or f[8] ~= repl) then
  -- first contact with this server process: a stamp recorded by an
  -- earlier one (restart, promotion) holds the data back; a stamp without
  -- one (written before runs were recorded) does not. The same process
  -- with another replication id ("A dataset replaced in the same server
  -- process", wentback.go: a full resync, then a promotion) holds it back too; a
  -- stamp without one (written before replids were recorded) only
  -- records it
  if f[5] ~= run then
    if f[5] then at = now else at = 0 end
  elseif f[8] then
    at = now
  end
  -- a write that takes no memory first (HDEL is not denyoom): Redis then
  -- lets the script's later writes through on a node over its maxmemory
  -- (it refuses only a script's first write), as it must, or a full node
  -- that restarted would fail every probe and dial check for ever
  -- (SECURITY.md, out of memory: probes work on a full node)
  redis.call('HDEL', KEYS[1], 'run')
  redis.call('HSET', KEYS[1], 'run', run, 'run_at', tostring(at), 'replid', repl)
elseif f[1] == ARGV[1] and at > now then
  -- the node's clock went back since the hold began (run_at is ahead of
  -- it): the hold counts from now, or it would last until the clock
  -- caught up with run_at (the whole step: every process refuses a node
  -- that lost nothing); a later start, never an earlier one. HDEL first,
  -- as above.
  at = now
  redis.call('HDEL', KEYS[1], 'run_at')
  redis.call('HSET', KEYS[1], 'run_at', tostring(at))
end
local left = 0
if at > 0 then left = math.max(0, at + (tonumber(ARGV[6]) or 0) - now) end
return {f[1], f[2] or '', 0, tonumber(f[3]) or 0, tonumber(f[4]) or 0, left, run}
`
