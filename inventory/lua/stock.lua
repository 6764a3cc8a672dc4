
v[6] = redis.call('EXISTS', KEYS[2])
return v
