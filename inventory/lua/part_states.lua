
local out = {}
for i = 2, #KEYS do
  -- a record that cannot be read is reported with why (its state
  -- unknown), never as no record: the other parts are read as usual
  local f, why = part_try(KEYS[i])
  if (not f or f.tombstone == '1') and not why then
    -- no record: a part settled long ago (it outlived its retention),
    -- unless it is listed undecided (pend_listed), its record lost while
    -- it was pending: reported as one that cannot be read, its state
    -- unknown. So is a tombstone of a listed part (pend_lost); one of a
    -- part not listed reads as it is. ARGV[2 + i], when "queue:offset",
    -- is the place of its redo-log entry as the caller knows it, used
    -- only when the entry there names the part (redolog.go, "What a trim
    -- removes")
    local id = string.sub(KEYS[i], #partPrefix + 1)
    local q, off = string.match(ARGV[2 + i] or '', '^(%d+):(%d+)$')
    local xk, offS = PFX_REDO .. (q or ''), nil
    if q and redo_at(xk, tonumber(off)) == id then offS = I(tonumber(off)) end
    if pend_listed(xk, offS, id) then
      f = nil
      why = KEYS[i] .. ' is gone (or a tombstone) while the part is listed pending or set aside (a pending part whose record was lost: ' ..
        'deleted, evicted, or lost with the node\'s writes; its units are reserved still): its state is unknown until ' ..
        'the record is repaired'
    end
  end
  f = f or {}
  out[#out + 1] = {f.state or '', tonumber(f.settled_at) or 0, why or ''}
end
return {redis.call('HGET', KEYS[1], 'incarnation') or '', out}
