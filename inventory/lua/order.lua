
local key, op, token = KEYS[2], ARGV[4], ARGV[5]
if op == 'commit' then
  -- the staged path's commit, the common one, without a decode: it
  -- writes, and this answers, what the commit below does for the record
  local created, dlS, leaseS = order_commit_staged(key, token, order_pack(ARGV[6], token))
  if created then
    return {'reserved', token, created + tonumber(dlS), '', '', math.max(created + tonumber(leaseS) - now, 0), ''}
  end
end
local f = order_get(key) or {}
if f.moved then
  -- moved to another node by a topology change (migrate.go): dead here,
  -- so every op below reads no record, as where the key never was
  -- (epoch.go: a copy of an older epoch on the order's home)
  redis.call('DEL', key)
  f = {}
end
local status, cur, deadline, parts, reason = f.status, f.token or '', tonumber(f.deadline) or 0, f.parts or '', f.reason or ''
local lease = tonumber(f.lease) or 0
local settled = '' -- the inline parts a decision settled (inline_settle)
local function record(st, why)
  return {st, cur, deadline, parts, why or reason, math.max(lease - now, 0), settled}
end
-- order_set changes fields of the record read (f) and writes it whole (order_put)
local function order_set(ch, ttl)
  for k, v in pairs(ch) do f[k] = v end
  order_put(key, f, ttl)
end
-- relied_on: the caller relies on the record read from now (a refusal's
-- fence, a Cancel's or a Confirm's answer, the reconciler's read): a
-- stage of another attempt still on its way must meet it (a stage writes
-- only where there is no record), so it lives the retention from this
-- read at least, not from its own write (staged.go, "The one
-- assumption").
local function relied_on(retention)
  local ms = redis.call('PTTL', key)
  if ms >= 0 and ms < retention * 1000 then redis.call('PEXPIRE', key, retention * 1000) end
end
-- failed_here: where the order has no record, a failed one under the
-- caller's token (fence, release, expire), so that attempt's begin or
-- stage, if it lands later, meets it instead of starting the order
local function failed_here(why, retention)
  order_set({status = 'failed', token = token, reason = why, decided_at = now}, retention)
  cur, reason = token, why
  return record('failed')
end
local function final(st, why, retention)
  -- a reserved record's inline parts get their records first, settled
  -- as the order is (inline.go); the reconciler's expiry settles the due
  -- part it names (ARGV 7) alone, and writes the others pending
  if status == 'reserved' then settled = inline_settle(key, f, st, retention, op == 'expire' and (ARGV[7] or '')) end
  -- The retention counts from when its parts come due, not from a
  -- decision before it: a part whose settle did not land is settled by
  -- the reconciler after it came due, by this record, and with the record
  -- gone it would read "no record" and cancel a part of a confirmed
  -- order. A part comes due at the deadline + partGrace, or, for a
  -- one-round take that reached its node late (its node's clock when the
  -- take ran, plus a hold of ttl + grace), as much later; every take ran
  -- before the commit (reserved_at), so none comes due later than the
  -- deadline moved on by the commit's lag behind created.
  local due = deadline + PART_GRACE
  local ra, cr = tonumber(f.reserved_at), tonumber(f.created)
  if ra and cr and ra > cr then due = due + (ra - cr) end
  local ttl = retention + math.max(0, math.ceil((due - now) / 1000))
  order_set({status = st, reason = why, decided_at = now}, ttl)
  status, reason = st, why
end
-- outlived(): the reconciler's due part (expire: ARGV 8 its deadline ms,
-- the part's node's clock; ARGV 9 '1' when it was set aside before, so
-- an expire op read or wrote a record before) may have outlived its own
-- attempt's record: a decided record lives the retention (ARGV 6) from
-- its parts' due, and each expire op relies on it again (relied_on).
-- That due is read on the home's clock, the part's deadline on its own
-- node's (a one-round part's is its node's TIME plus the hold), which may
-- run ahead of the home's: the retention is counted SKEW earlier, so a
-- record that lived out its retention by the home's clock is never read
-- as one that never landed (found by a review: the part's node 0.9 s
-- ahead, the part of a confirmed order cancelled,
-- TestDuePartOnAFastNodeOutlivingItsRecordStaysPending). SKEW is two
-- partGraces: node clocks each kept within a second of true time
-- (SECURITY.md, "Clock skew"); a part first examined within it goes to
-- an operator instead of being cancelled.
local SKEW = 2 * PART_GRACE
local function outlived()
  local pdl = tonumber(ARGV[8] or '')
  return ARGV[9] == '1' or (pdl and pdl > 0 and now + SKEW >= pdl + tonumber(ARGV[6]) * 1000)
end
if op == 'expire' and status and cur ~= token and token ~= '' and outlived() then
  -- A record of another attempt than the due part's, begun at or after
  -- the part came due (its created; a tombstone's or a fence's decided_at;
  -- none read: after), may follow a confirmed record of the part's
  -- attempt that lived out its retention (the order id reserved again):
  -- it says nothing of that attempt, whose decision cannot be inferred.
  -- Nothing is written (not even a staging record decided), and the
  -- verdict 'gone' sets the part aside for an operator (stuck.go). One
  -- begun before the part came due was begun while a confirmed record of
  -- the part's attempt would still be here: it excludes that attempt.
  local since, pdl = tonumber(f.created or f.decided_at or ''), tonumber(ARGV[8] or '') or 0
  if not since or since >= pdl then return record('gone', 'another attempt') end
end
if status == 'staging' and op ~= 'commit' and op ~= 'fail' and op ~= 'release' and op ~= 'withdraw' then
  if op == 'begin' and f.digest ~= ARGV[7] then return record('mismatch') end
  return record('staging')
end
if op == 'begin' then
  if status == 'reserving' then
    if f.digest ~= ARGV[7] then return record('mismatch') end
    if lease > now then return record('reserving') end
    -- the attempt's lease ran out: take over under a new token
  elseif status and status ~= 'failed' then
    -- a Reserve answered by a decided record (ErrCancelled, or the
    -- receipts of a confirmed order) relies on it as a Cancel or a
    -- Confirm answered by it does: a late stage of another attempt must
    -- meet it (relied_on; ARGV 10 is the retention)
    relied_on(tonumber(ARGV[10]))
    if status ~= 'cancelled' and f.digest and f.digest ~= ARGV[7] then return record('mismatch') end
    return record(status)
  elseif status == 'failed' and cur == token then
    -- a stale copy of an attempt already decided failed (see expire)
    return record('failed')
  end
  -- The record is replaced. A failed one's parts (a one-round attempt's
  -- promised list; none for the general path's) go back in the reply:
  -- the record excludes their attempt, whose cancels may never have
  -- landed (its decider died, or its home answered too late), so the
  -- caller cancels them (order_ops.go, settleReplaced; staged.go,
  -- "Replacing a failed record"). The new record keeps that list until
  -- its commit writes its own: the reply may be lost (the caller's
  -- deadline, a timeout; the caller then releases the attempt, which
  -- leaves the list failed under the new token) or the caller may die
  -- before its cancels, and the record is then still the list a later
  -- reader (a begin taking it over, a Confirm, a Cancel) cancels by. A
  -- reserving record lists no part of its own attempt before its commit,
  -- so a begin taking over one whose lease ran out hands back its list
  -- the same way.
  local replaced = (status == 'failed' or status == 'reserving') and parts or ''
  deadline = now + tonumber(ARGV[9])
  lease = now + tonumber(ARGV[6])
  f = {}
  order_set({status = 'reserving', token = token, lease = lease, digest = ARGV[7], user = ARGV[8], deadline = deadline,
    created = now, parts = replaced ~= '' and replaced or nil}, tonumber(ARGV[10]))
  cur, parts, reason = token, replaced, ''
  return record('begin')
elseif op == 'commit' then
  if (status ~= 'reserving' and status ~= 'staging') or cur ~= token then
    -- the caller answers by the record (the general path's ErrCancelled
    -- for a Cancel's tombstone) and gives its parts back: it relies on
    -- the record from now, as a begin answered by it does (relied_on;
    -- ARGV 7 is the retention)
    if status and ARGV[7] then relied_on(tonumber(ARGV[7])) end
    return record('lost', tostring(status))
  end
  -- no TTL while reserved: a decision gives it the retention (orderrec.go)
  order_set({status = 'reserved', parts = ARGV[6], reserved_at = nowS}, false)
  parts = '' -- the caller has them: do not send them back
  return record('reserved')
elseif op == 'fail' or op == 'release' then
  if (status == 'reserving' or status == 'staging') and cur == token then
    order_set({status = 'failed', decided_at = now})
    -- the attempt's answer (a refusal for good behind this record, the
    -- general path's refusal) relies on it from now: a late stage of
    -- another attempt of the order, sent before this decision, must meet
    -- it, so it lives the retention (ARGV 6) from here at least, not
    -- from the stage or begin that wrote it (staged.go, "The one
    -- assumption")
    if ARGV[6] then relied_on(tonumber(ARGV[6])) end
    return record('failed')
  end
  if op == 'release' and not status then
    -- the attempt's begin or stage was not answered and is not here
    -- (yet): its failure is recorded under its token, so that begin or
    -- stage, if it lands later (a group sent it after this), meets it
    -- (begin: failed under its own token; a stage writes only where there
    -- is no record) instead of holding the order's lease; a retry's begin
    -- takes the failed record over. A copy marked moved (deleted above)
    -- is no record here either (epoch.go): the late begin or stage would
    -- land on the empty key (TestReleaseMeetingAMovedCopyFencesALateStage)
    return failed_here('no record', tonumber(ARGV[6]))
  end
  return record(status or 'missing')
elseif op == 'withdraw' then
  if status == 'staging' and cur == token then
    redis.call('DEL', key)
    return {'missing', '', 0, '', '', 0, ''}
  end
  return record(status or 'missing')
end
local retention = tonumber(ARGV[6])
if op == 'confirm' then
  if not status then return record('missing') end
  if status == 'reserving' and lease <= now then
    -- the attempt died without committing: it failed, and the answer
    -- relies on that (a late stage must meet the record)
    order_set({status = 'failed', decided_at = now})
    relied_on(retention)
    return record('failed')
  end
  if status == 'reserved' then
    if now >= deadline then final('cancelled', 'expired', retention) else final('confirmed', 'confirmed', retention) end
  elseif status == 'confirmed' or status == 'cancelled' or status == 'failed' then
    -- a Confirm answered by a decided record is as final as one that
    -- decided it: a late stage of another attempt must meet the record
    relied_on(retention)
  end
  return record(status)
elseif op == 'cancel' then
  if not status then
    order_set({status = 'cancelled', reason = 'tombstone', decided_at = now}, retention)
    return record('cancelled', 'tombstone')
  end
  if status == 'reserved' then
    final('cancelled', 'cancelled', retention)
  elseif status == 'reserving' or status == 'failed' then
    -- never reserved: the attempt it names failed, or will (its commit
    -- meets this record), and gave or gives its parts back. The reason
    -- says so, as a Cancel before any record does: a reader of the
    -- record (pgsync's refused attempts) must not take them for a
    -- reservation the user cancelled
    final('cancelled', 'tombstone', retention)
  elseif status == 'cancelled' or status == 'confirmed' then
    -- a Cancel answered by a record already cancelled (a tombstone
    -- included) is as final as one that wrote it, and one answered by a
    -- confirmed record (ErrConfirmed) relies on it as a Confirm answered
    -- by it does
    relied_on(retention)
  end
  return record(status)
elseif op == 'fence' then
  -- a refusal's fence (soldout.go): failed, only where there is no record
  if not status then
    return failed_here('refused', retention)
  end
  -- the refusal answers behind this failed record: the fence its
  -- holder's late stage must meet
  if status == 'failed' then relied_on(retention) end
  return record(status)
elseif op == 'expire' then
  if not status and token ~= '' then
    -- A part of attempt token is due and its order has no record. A
    -- decided record lives the retention from when its parts come due,
    -- and each expire op relies on it again (relied_on), so a part that
    -- came due within the retention (ARGV 8: its deadline, ms, the
    -- part's node's clock) and was never set aside (ARGV 9 '1': it was,
    -- so an expire op read or wrote a record before) meets none only when
    -- the attempt's stage or begin never landed: record its failure, so a
    -- stale copy arriving later cannot stage it (staged.go). Any other
    -- part may have outlived its record (a confirmed order's, set aside
    -- past the retention): its decision cannot be inferred, nothing is
    -- written, and the verdict 'gone' makes the caller set it aside for
    -- an operator (stuck.go). A caller that sends no ARGV 8 gets the
    -- failure, as before.
    --
    -- A copy marked moved (deleted above) is no record here either, both
    -- ways (epoch.go): such a copy on the part's order's home (an apply
    -- moved the home back onto a node whose copy outlived the order's
    -- live record, the copy given the retention late: a failed
    -- expireMoved, Retire's expireFrozen) read as missing cancelled a
    -- part of a confirmed order whose record had lived out its retention
    -- at the home it was moved to, its units sold again
    -- (TestExpireMeetingAMovedCopyAtItsHomeKeepsAConfirmedPart); and
    -- read within the retention, it is no record that excludes the
    -- part's attempt, whose stage may still be on its way (the order id
    -- reserved again after that life): without the failure recorded
    -- here, the part was cancelled, the late stage staged the record on
    -- the empty key and Reserve answered success for units given back
    -- (TestExpireMeetingAMovedCopyWithinTheRetentionFencesALateStage).
    if outlived() then return record('gone', 'no record') end
    return failed_here('no record', retention)
  end
  if status == 'reserved' and now >= deadline then
    final('cancelled', 'expired', retention)
  elseif status == 'reserving' and lease <= now then
    order_set({status = 'failed', decided_at = now})
    status = 'failed'
  end
  if status then relied_on(retention) end
  return record(status or 'missing')
end
return redis.error_reply('SHARDIS_BADOP ' .. tostring(op))
