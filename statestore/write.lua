-- Stores one (run, stream) step idempotently; see writeScript in store.go for the contract.
-- Argument positions are the arg* constants of store.go (Lua counts from 1).
local KEY_STATE, KEY_HEAD, KEY_STEPS, KEY_LOWS, KEY_CHUNKS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local value, keep, state_prefix, chunk_prefix = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local force, full, low = ARGV[5] == '1', ARGV[6] == '1', ARGV[7]
-- ARGV[HEAD..HEAD_END]: the head hash's field, value pairs, the sealed step first.
local HEAD, HEAD_END = 9, 8 + tonumber(ARGV[8])
local SEALED_STEP, v = ARGV[HEAD], tonumber(ARGV[HEAD + 1])
local cur = redis.call('GET', KEY_STATE)
local status = 0
if cur and cur == value then
  return {1}
elseif cur and not force then
  return {2, cur}
end
if cur then status = 3 end
local head = redis.call('HGET', KEY_HEAD, SEALED_STEP)
if not force then
  if head and tonumber(head) >= v then return {1} end
  if not full and ((not head) or tonumber(head) ~= v - 1) then return {4} end
end
for i = HEAD_END + 1, #ARGV, 2 do
  redis.call('SET', chunk_prefix .. ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEY_CHUNKS, ARGV[i], ARGV[i])
end
redis.call('SET', KEY_STATE, value)
redis.call('ZADD', KEY_STEPS, v, v)
redis.call('ZADD', KEY_LOWS, low, v)
if (not head) or tonumber(head) <= v or force then
  redis.call('HSET', KEY_HEAD, unpack(ARGV, HEAD, HEAD_END))
end
local n = redis.call('ZCARD', KEY_STEPS)
if n > keep then
  local old = redis.call('ZRANGE', KEY_STEPS, 0, n - keep - 1)
  for _, s in ipairs(old) do
    redis.call('DEL', state_prefix .. s)
    redis.call('ZREM', KEY_LOWS, s)
  end
  redis.call('ZREMRANGEBYRANK', KEY_STEPS, 0, n - keep - 1)
end
local lowest = redis.call('ZRANGE', KEY_LOWS, 0, 0, 'WITHSCORES')
if lowest[2] then
  local dead = redis.call('ZRANGEBYSCORE', KEY_CHUNKS, '-inf', '(' .. lowest[2])
  for _, c in ipairs(dead) do redis.call('DEL', chunk_prefix .. c) end
  redis.call('ZREMRANGEBYSCORE', KEY_CHUNKS, '-inf', '(' .. lowest[2])
end
return {status}
