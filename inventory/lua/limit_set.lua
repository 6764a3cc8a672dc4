
redis.call('HSET', KEYS[2], 'limit', ARGV[2])
return 'ok'
