
if ARGV[4] == 'begin' then
  return redis.error_reply('SHARDIS_BADOP begin takes memory: not an op of the order-decide script')
end
