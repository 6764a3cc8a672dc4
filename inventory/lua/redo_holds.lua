-- A consumer's position (redo_position.go holds the rule and why it
-- is safe): redo_holds(xk, off, pid, acked) reports
-- whether queue xk still holds, at offset off, the part pid a consumer
-- landed there, acked being the queue's acknowledged offset at the
-- node's incarnation (0 when the acknowledgements are another
-- incarnation's: redo_acks_current); false and the part there now (nil
-- when its entry is gone) when it does not: the node went back under the
-- position. Every read and acknowledgement that names a position decides
-- it here (the head check, off past the head, is the caller's).
local function redo_holds(xk, off, pid, acked)
  if off <= 0 or pid == '' then return true end
  local at = redo_at(xk, off)
  if at then return at == pid, at end
  -- the entry is gone: trimmed. After an acknowledgement at or past off
  -- it was the landed one; a position whose entry was trimmed unread
  -- ('trimmed', RedoPartTrimmed) never named one.
  if pid == 'trimmed' or acked >= off then return true end
  -- trimmed unacknowledged (the max age): the landed part's, only when
  -- its record is on the node at that place (a record there that cannot
  -- be read: the part's key is there, so the node holds it), or is one
  -- SettleStuckLost wrote (stuck_since, no place; a tombstone has no
  -- stuck_since): the node listed the part set aside, so it took it
  local f, why = part_try(partPrefix .. pid)
  if why then return true end
  if not f then return false, nil end
  if f.redo == nil then return f.stuck_since ~= nil and f.tombstone ~= '1', nil end
  return f.redo == xk and tonumber(f.offset) == off, nil
end
-- redo_rewound_reply(xk, off, at, pid): the SHARDIS_REWOUND error of an
-- acknowledgement at offset off (as the caller got it) of queue xk, where
-- redo_holds found part at (nil: the entry gone, trimmed without an
-- acknowledgement, and the landed part's record not there) instead of
-- the consumer's pid.
local function redo_rewound_reply(xk, off, at, pid)
  local now_at = 'no entry (trimmed unacknowledged, and the part it landed is not recorded there)'
  if at then now_at = string.format('part %q', at) end
  return redis.error_reply('SHARDIS_REWOUND ' .. xk .. ' offset ' .. off .. ' holds ' .. now_at .. string.format(', the consumer landed %q', pid))
end
