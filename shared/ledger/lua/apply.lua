-- apply.lua: one guarded batch, all or nothing (Redis >= 6.2, plain EVAL/EVALSHA).
--
-- Encoding (built by shared/ledger/tx.py): KEYS holds every key once.  ARGV[1] is the batch's
-- shape, five bytes an entry after a four-byte header (the number of reads R and of guards G,
-- two bytes each): the entry's code (an index into CODES), its key's index into KEYS and its
-- number of arguments, the last two in two bytes each.  An op's code has 128 added when the
-- ledger vouches for its key's type (tx.py: Tx.vouch): its TYPE is not asked.  ARGV[2 ..] are
-- the entries' arguments, one after another; the last ARGV names the step (for MONITOR and
-- SLOWLOG), unused here.  R reads (`rd`: the fields of one key to HMGET) come first, then G
-- guards (a field's guard's first argument is its slot among the fields read), then the ops.
-- No JSON to decode and no number to parse but the guards' slots: Redis hands the script the
-- arguments as they came.
--
-- Phase 1 reads only: every guard is checked, then every op is checked against the type of
-- its key (as the earlier ops of this batch will have left it, as a guard's read proved it:
-- HMGET, EXISTS and LLEN each tell what the key may be, or as the ledger vouches for it: a
-- key only the workers write, with ops of its one type) and its arguments, so that no
-- write of phase 2 can fail.  Redis never rolls a script back, so this is what makes the batch
-- atomic: the only errors left in phase 2 are impossible ones (an XADD '*' on a stream whose
-- last id is the maximum id) and OOM, which Redis checks before a script's *first* write only.
--
-- Replies: {1, {stream ids of the XADDs, in order}} | {0, guard_index, actual or nil}
--          | error "CGTX op <i> <code>: <why>" when an op could not be applied.

if redis.replicate_commands then redis.replicate_commands() end

local CODES = {'rd', 'in', 'nx', 'ex', 'fnx', 'len', 'hset', 'hdel', 'hincrby', 'rpush', 'xadd',
               'xaddcap', 'xack', 'expire', 'persist', 'zadd', 'zaddnx', 'zrem'}
local argv, shape = ARGV, ARGV[1]
-- Entry i: its code, key index, first argument's position and number of arguments, in four
-- arrays rather than a table per entry (fewer allocations for Lua's collector to sweep).
local CODE, KI, AT, N, VOUCHED = {}, {}, {}, {}, {}
local count = 0
local nreads = string.byte(shape, 1) * 256 + string.byte(shape, 2)
local nguards = string.byte(shape, 3) * 256 + string.byte(shape, 4)
local pos, at, size = 2, 5, #shape
while at <= size do
  local last = math.min(size, at + 4999)   -- string.byte returns each byte on Lua's stack
  local b = {string.byte(shape, at, last)}
  for j = 1, #b, 5 do
    local ki, n = b[j + 1] * 256 + b[j + 2], b[j + 3] * 256 + b[j + 4]
    local code = b[j]
    count = count + 1
    if code > 127 then code, VOUCHED[count] = code - 128, true end
    CODE[count], KI[count], AT[count], N[count] = CODES[code], ki, pos, n
    pos = pos + n
  end
  at = last + 1
end
local first_op = nreads + nguards + 1

-- Phase 1a: reads.  Each key's guarded fields come in one HMGET (grouped by tx.py), into
-- `got` by slot; a key that is not a hash makes its fields read 'WRONGTYPE'.
local got = {}
local planned = {}   -- key index -> the type the key has (as read, or once earlier ops ran)
for i = 1, nreads do
  local ki, s, n = KI[i], AT[i], N[i]
  local reply = redis.pcall('HMGET', KEYS[ki], unpack(argv, s, s + n - 1))
  if type(reply) == 'table' and reply.err then
    for _ = 1, n do got[#got + 1] = 'WRONGTYPE' end
  else
    for j = 1, n do got[#got + 1] = reply[j] end
    planned[ki] = 'hash'  -- or absent: either takes a hash's ops
  end
end

-- Phase 1b: guards, judged on what was read.
for i = nreads + 1, nreads + nguards do
  local code, ki, s, n = CODE[i], KI[i], AT[i], N[i]
  local key = KEYS[ki]
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
for i = first_op, count do
  if CODE[i] == 'hincrby' then counted[KI[i]] = true end
end

local function check_op(ki, key, code, s, n, vouched)
  local need = NEEDS[code]
  if need == nil then return 'unknown op' end
  if need == false then return nil end
  local have = planned[ki]
  if have == nil then
    if vouched then have = need else have = redis.call('TYPE', key)['ok'] end
  end
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

for i = first_op, count do
  local why = check_op(KI[i], KEYS[KI[i]], CODE[i], AT[i], N[i], VOUCHED[i])
  if why then
    local at = i - first_op + 1
    return redis.error_reply('CGTX op ' .. at .. ' ' .. tostring(CODE[i]) .. ': ' .. why)
  end
end

-- Phase 2: writes; nothing below can fail after the checks above.
local ids = {}
for i = first_op, count do
  local code, key, s, n = CODE[i], KEYS[KI[i]], AT[i], N[i]
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
