-- A durability fence (durability.go, "Reads a consumer lands"): no body;
-- the write epilogue advances the stamp's seq, a write the WAIT after it
-- covers, and with it every write before it.
return 'ok'
