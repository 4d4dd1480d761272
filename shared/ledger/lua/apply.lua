-- apply.lua: one guarded batch, all or nothing (Redis >= 6.2, plain EVAL/EVALSHA).
--
-- Encoding (built by shared/tx.py): KEYS holds every key once; ARGV[1] is one JSON array of
-- strings: the number of reads R and of guards G, then entries `code, key_index, arg_1 .. arg_n,
-- null`: R reads (`rd`: the fields to HMGET), G guards (a field's guard names its read slot),
-- then the ops.  No number but those is parsed: a null ends an entry, and a key index is
-- looked up as the string it is (tonumber costs more than the rest of reading an entry).
-- ARGV[2] names the step (for MONITOR and SLOWLOG); unused here.
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
local nreads, nguards = tonumber(argv[1]), tonumber(argv[2])
local KEY = {}       -- key index as written in ARGV[1] -> the key
for i = 1, #KEYS do KEY[tostring(i)] = KEYS[i] end
local entries = {}   -- {code, key index, first arg's position, number of args}
local null, pos, size = cjson.null, 3, #argv
while pos <= size do
  local s = pos + 2
  local e = s
  while argv[e] ~= null do e = e + 1 end
  entries[#entries + 1] = {argv[pos], argv[pos + 1], s, e - s}
  pos = e + 1
end
local first_op = nreads + nguards + 1

-- Phase 1a: reads.  Each key's guarded fields come in one HMGET (grouped by tx.py), into
-- `got` by slot; a key that is not a hash makes its fields read 'WRONGTYPE'.
local got = {}
local planned = {}   -- key index -> the type the key has (as read, or once earlier ops ran)
for i = 1, nreads do
  local ki, s, n = entries[i][2], entries[i][3], entries[i][4]
  local reply = redis.pcall('HMGET', KEY[ki], unpack(argv, s, s + n - 1))
  if type(reply) == 'table' and reply.err then
    for _ = 1, n do got[#got + 1] = 'WRONGTYPE' end
  else
    for j = 1, n do got[#got + 1] = reply[j] end
    planned[ki] = 'hash'  -- or absent: either takes a hash's ops
  end
end

-- Phase 1b: guards, judged on what was read.
for i = nreads + 1, nreads + nguards do
  local code, ki, s, n = entries[i][1], entries[i][2], entries[i][3], entries[i][4]
  local key = KEY[ki]
  if code == 'in' then
    local v = got[tonumber(argv[s])]
    local hit = false
    if v then
      for j = s + 1, s + n - 1 do
        if argv[j] == v then hit = true break end
      end
    end
    if not hit then return {0, i - nreads, v} end
  elseif code == 'nx' then
    if redis.call('EXISTS', key) == 1 then
      return {0, i - nreads, redis.call('TYPE', key)['ok']}
    end
    planned[ki] = 'none'
  elseif code == 'ex' then
    if redis.call('EXISTS', key) == 0 then return {0, i - nreads, false} end
  elseif code == 'fnx' then
    local v = got[tonumber(argv[s])]
    if v then return {0, i - nreads, v} end
  elseif code == 'len' then
    local len = redis.pcall('LLEN', key)
    if type(len) == 'table' and len.err then
      return {0, i - nreads, redis.call('TYPE', key)['ok']}
    end
    if tostring(len) ~= argv[s] then return {0, i - nreads, tostring(len)} end
    if len > 0 then planned[ki] = 'list' else planned[ki] = 'none' end
  else
    return redis.error_reply('CGTX guard ' .. (i - nreads) .. ' ' .. tostring(code)
                             .. ': unknown guard')
  end
end

-- Phase 1c: op targets and arguments.
local NEEDS = {hset = 'hash', hdel = 'hash', hincrby = 'hash', rpush = 'list', xadd = 'stream',
               xaddcap = 'stream', xack = 'stream', persist = false,
               zadd = 'zset', zaddnx = 'zset', zrem = 'zset', expire = false}
local fields = {}    -- key index -> {field -> value after the earlier ops (false = deleted)},
                     -- for the keys an HINCRBY checks
local MAX_INT = 9.2e18

local function is_int(v)
  return v == '0' or (string.match(v, '^-?[1-9]%d*$') ~= nil and #v <= 20)
end

local function field_value(ki, key, field)
  local overlay = fields[ki]
  if overlay and overlay[field] ~= nil then return overlay[field] end
  return redis.call('HGET', key, field)
end

-- Only a key that an HINCRBY of this batch adds to needs its earlier writes followed.
local counted = {}
for i = first_op, #entries do
  if entries[i][1] == 'hincrby' then counted[entries[i][2]] = true end
end

local function check_op(ki, key, code, s, n)
  local need = NEEDS[code]
  if need == nil then return 'unknown op' end
  if need == false then return nil end
  local have = planned[ki]
  if have == nil then have = redis.call('TYPE', key)['ok'] end
  if have ~= 'none' and have ~= need then return 'key holds a ' .. have end
  planned[ki] = need
  if code == 'hset' and counted[ki] then
    fields[ki] = fields[ki] or {}
    for j = s, s + n - 1, 2 do fields[ki][argv[j]] = argv[j + 1] end
  elseif code == 'hdel' and counted[ki] then
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
  elseif code == 'zadd' or code == 'zaddnx' then
    for j = s, s + n - 1, 2 do
      if tonumber(argv[j]) == nil then return 'score is not a number' end
    end
  elseif code == 'xaddcap' then
    if not is_int(argv[s]) or n < 3 then return 'cap is not an integer' end
  end
  return nil
end

for i = first_op, #entries do
  local e = entries[i]
  local why = check_op(e[2], KEY[e[2]], e[1], e[3], e[4])
  if why then
    local at = i - first_op + 1
    return redis.error_reply('CGTX op ' .. at .. ' ' .. tostring(e[1]) .. ': ' .. why)
  end
end

-- Phase 2: writes; nothing below can fail after the checks above.
local ids = {}
for i = first_op, #entries do
  local code, key, s, n = entries[i][1], KEY[entries[i][2]], entries[i][3], entries[i][4]
  if code == 'xadd' then
    ids[#ids + 1] = redis.call('XADD', key, '*', unpack(argv, s, s + n - 1))
  elseif code == 'xaddcap' then
    ids[#ids + 1] = redis.call('XADD', key, 'MAXLEN', '~', argv[s], '*', unpack(argv, s + 1, s + n - 1))
  elseif code == 'zaddnx' then
    redis.call('ZADD', key, 'NX', unpack(argv, s, s + n - 1))
  else
    redis.call(code, key, unpack(argv, s, s + n - 1))
  end
end
return {1, ids}
