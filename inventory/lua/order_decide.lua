
if ARGV[4] == 'begin' or ARGV[4] == 'fence' then
  return redis.error_reply('SHARDIS_BADOP ' .. ARGV[4] .. ' takes memory: not an op of the order-decide script')
end
