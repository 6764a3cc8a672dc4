
return {redis.call('HGET', KEYS[1], 'epoch') or '', redis.call('HGETALL', KEYS[2]),
  redis.call('HGET', KEYS[1], 'incarnation') or ''}
