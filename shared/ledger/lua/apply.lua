-- apply.lua: one guarded batch, all or nothing (Redis >= 6.2, plain EVAL/EVALSHA).
--
-- Encoding (built by shared/tx.py): KEYS holds every key once; ARGV[1] is one JSON array of
-- strings: the number of guards G, then entries `code, key_index, n, arg_1 .. arg_n`; the
-- first G entries are guards.  ARGV[2] names the step (for MONITOR and SLOWLOG); unused here.
--
-- Phase 1 reads only: every guard is checked, then every op is checked against the type of
-- its key (as the earlier ops of this batch will have left it, or as a guard's read proved
-- it: HMGET, EXISTS and LLEN each tell what the key may be) and its arguments, so that no
-- write of phase 2 can fail.  Redis never rolls a script back, so this is what makes the batch
-- atomic: the only errors left in phase 2 are impossible ones (an XADD '*' on a stream whose
-- last id is the maximum id) and OOM, which Redis checks before a script's *first* write only.
--
-- Replies: {1, {stream ids of the XADDs, in order}} | {0, guard_index, actual or nil}
--          | error "CGTX op <i> <code>: <why>" when an op could not be applied.

if redis.replicate_commands then redis.replicate_commands() end

local argv = cjson.decode(ARGV[1])
local nguards = tonumber(argv[1])
local entries = {}
local pos = 2
while pos <= #argv do
  local n = tonumber(argv[pos + 2])
  entries[#entries + 1] = {argv[pos], tonumber(argv[pos + 1]), pos + 3, n}
  pos = pos + 3 + n
end

-- Phase 1a: guards.  The fields guarded on one key are read with one HMGET, before any
-- guard is judged (nothing is written in this phase, so reading early changes nothing).
local wanted = {}    -- key index -> {fields = {...}, at = {field -> position}}
for i = 1, nguards do
  local code, ki, s = entries[i][1], entries[i][2], entries[i][3]
  if code == 'in' or code == 'fnx' then
    local w = wanted[ki]
    if not w then w = {fields = {}, at = {}} wanted[ki] = w end
    if not w.at[argv[s]] then
      w.fields[#w.fields + 1] = argv[s]
      w.at[argv[s]] = #w.fields
    end
  end
end
local seen = {}      -- key index -> {field -> value or false}, or 'WRONGTYPE'
local proved = {}    -- key index -> the type a guard's read proved the key to have
for ki, w in pairs(wanted) do
  local reply = redis.pcall('HMGET', KEYS[ki], unpack(w.fields))
  if type(reply) == 'table' and reply.err then
    seen[ki] = 'WRONGTYPE'
  else
    local values = {}
    for f, at in pairs(w.at) do values[f] = reply[at] end
    seen[ki] = values
    proved[ki] = 'hash'  -- or absent: either takes a hash's ops
  end
end

local function guarded(ki, field)
  local values = seen[ki]
  if values == 'WRONGTYPE' then return 'WRONGTYPE' end
  return values[field]
end

for i = 1, nguards do
  local code, ki, s, n = entries[i][1], entries[i][2], entries[i][3], entries[i][4]
  local key = KEYS[ki]
  if code == 'in' then
    local v = guarded(ki, argv[s])
    local hit = false
    if v then
      for j = s + 1, s + n - 1 do
        if argv[j] == v then hit = true break end
      end
    end
    if not hit then return {0, i, v} end
  elseif code == 'nx' then
    if redis.call('EXISTS', key) == 1 then
      return {0, i, redis.call('TYPE', key)['ok']}
    end
    proved[ki] = 'none'
  elseif code == 'fnx' then
    local v = guarded(ki, argv[s])
    if v then return {0, i, v} end
  elseif code == 'len' then
    local n = redis.pcall('LLEN', key)
    if type(n) == 'table' and n.err then return {0, i, redis.call('TYPE', key)['ok']} end
    if tostring(n) ~= argv[s] then return {0, i, tostring(n)} end
    if n > 0 then proved[ki] = 'list' else proved[ki] = 'none' end
  else
    return redis.error_reply('CGTX guard ' .. i .. ' ' .. tostring(code) .. ': unknown guard')
  end
end

-- Phase 1b: op targets and arguments.
local NEEDS = {hset = 'hash', hdel = 'hash', hincrby = 'hash', rpush = 'list', xadd = 'stream',
               xaddcap = 'stream', xack = 'stream', persist = false,
               zadd = 'zset', zrem = 'zset', expire = false}
local planned = {}   -- key index -> type the key has once the earlier ops ran
for ki, t in pairs(proved) do planned[ki] = t end
local fields = {}    -- key index -> {field -> value after the earlier ops (false = deleted)}
local MAX_INT = 9.2e18

local function is_int(v)
  return v == '0' or (string.match(v, '^-?[1-9]%d*$') ~= nil and #v <= 20)
end

local function field_value(ki, key, field)
  local overlay = fields[ki]
  if overlay and overlay[field] ~= nil then return overlay[field] end
  local w = wanted[ki]
  if w and w.at[field] and seen[ki] ~= 'WRONGTYPE' then return seen[ki][field] end
  return redis.call('HGET', key, field)
end

local function check_op(ki, key, code, s, n)
  local need = NEEDS[code]
  if need == nil then return 'unknown op' end
  if need == false then return nil end
  local have = planned[ki]
  if have == nil then have = redis.call('TYPE', key)['ok'] end
  if have ~= 'none' and have ~= need then return 'key holds a ' .. have end
  planned[ki] = need
  if code == 'hset' then
    fields[ki] = fields[ki] or {}
    for j = s, s + n - 1, 2 do fields[ki][argv[j]] = argv[j + 1] end
  elseif code == 'hdel' then
    fields[ki] = fields[ki] or {}
    for j = s, s + n - 1 do fields[ki][argv[j]] = false end
  elseif code == 'hincrby' then
    local cur = field_value(ki, key, argv[s]) or '0'
    if type(cur) == 'number' then cur = string.format('%.0f', cur) end
    if not is_int(cur) then return 'field ' .. argv[s] .. ' is not an integer' end
    local sum = tonumber(cur) + tonumber(argv[s + 1])
    if sum > MAX_INT or sum < -MAX_INT then return 'increment would overflow' end
    fields[ki] = fields[ki] or {}
    fields[ki][argv[s]] = sum
  elseif code == 'zadd' then
    for j = s, s + n - 1, 2 do
      if tonumber(argv[j]) == nil then return 'score is not a number' end
    end
  elseif code == 'xaddcap' then
    if not is_int(argv[s]) or n < 3 then return 'cap is not an integer' end
  end
  return nil
end

for i = nguards + 1, #entries do
  local e = entries[i]
  local why = check_op(e[2], KEYS[e[2]], e[1], e[3], e[4])
  if why then
    return redis.error_reply('CGTX op ' .. (i - nguards) .. ' ' .. tostring(e[1]) .. ': ' .. why)
  end
end

-- Phase 2: writes; nothing below can fail after the checks above.
local ids = {}
for i = nguards + 1, #entries do
  local code, key, s, n = entries[i][1], KEYS[entries[i][2]], entries[i][3], entries[i][4]
  if code == 'xadd' then
    ids[#ids + 1] = redis.call('XADD', key, '*', unpack(argv, s, s + n - 1))
  elseif code == 'xaddcap' then
    ids[#ids + 1] = redis.call('XADD', key, 'MAXLEN', '~', argv[s], '*', unpack(argv, s + 1, s + n - 1))
  else
    redis.call(code, key, unpack(argv, s, s + n - 1))
  end
end
return {1, ids}
