if wrote + committed > 0 then seq = redis.call('HINCRBY', KEYS[1], 'seq', '1') end
return {seq, out, carried}
