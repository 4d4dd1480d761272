-- apply.lua: guarded steps, each all or nothing (Redis >= 6.2, plain EVAL/EVALSHA).
--
-- One call of the script applies one or more independent steps in order: group commit, the
-- steps a worker's event loop issues together go as one script call (shared/ledger/group.py).
-- ARGV[1] is the group's header, six bytes a step: its number of keys (two bytes) and of
-- arguments (four bytes, its shape included).  KEYS holds each step's keys, step after step,
-- and ARGV[2 ..] each step's arguments; the last ARGV names the steps (for MONITOR and
-- SLOWLOG), unused here.  A step is applied whole or not at all, whatever its neighbours do:
-- one whose guard fails, whose op check refuses it or which meets an error stops there, and
-- the next step runs as if each had been its own script call.
--
-- A step (built by shared/ledger/tx.py): its first argument is its shape, five bytes an entry
-- after a four-byte header (the number of reads R and of guards G, two bytes each): the
-- entry's code (an index into CODES), its key's index among the step's keys and its number of
-- arguments, the last two in two bytes each.  An op's code has 128 added when the ledger
-- vouches for its key's type (tx.py: Tx.vouch): its TYPE is not asked.  The entries'
-- arguments follow, one after another.  R reads (`rd`: the fields of one key to HMGET) come
-- first, then G guards (a field's guard, `in` or `fnx`, names its slot among the fields read
-- where other entries name a key; its arguments are the values it allows), then the ops.  No
-- JSON to decode and no number to parse: Redis hands the script the arguments as they came.
--
-- Phase 1 reads only: every guard is checked, then every op is checked against the type of
-- its key (as the earlier ops of this step will have left it, as a guard's read proved it:
-- HMGET, EXISTS and LLEN each tell what the key may be, or as the ledger vouches for it: a
-- key only the workers write, with ops of its one type) and its arguments, so that no write
-- of phase 2 can fail.  Redis never rolls a script back, so this is what makes a step atomic:
-- the only errors left in phase 2 are impossible ones (an XADD '*' on a stream whose last id
-- is the maximum id) and OOM, which Redis checks before a script's *first* write only.
--
-- Reply: one entry a step, in order: {1, {stream ids of the XADDs, in order}}
--   | {0, guard_index, actual or nil} | {2, "CGTX op <i> <code>: <why>" or Redis's error}.

if redis.replicate_commands then redis.replicate_commands() end

local CODES = {'rd', 'in', 'nx', 'ex', 'fnx', 'len', 'hset', 'hdel', 'rpush', 'xadd',
               'xaddcap', 'xack', 'expire', 'persist', 'zadd', 'zaddnx', 'zrem'}
local NEEDS = {hset = 'hash', hdel = 'hash', rpush = 'list', xadd = 'stream',
               xaddcap = 'stream', xack = 'stream', persist = false,
               zadd = 'zset', zaddnx = 'zset', zrem = 'zset', expire = false}
-- Globals as locals: a global is a table lookup each time, a local a register.
local argv, keys, call, pcall_redis = ARGV, KEYS, redis.call, redis.pcall
local unpack, type, byte = unpack, type, string.byte

-- The step being applied: entry i's code, key, first argument's position and number of
-- arguments, in arrays rather than a table per entry; the type each key has (as read, or once
-- earlier ops ran).  Made once per script call, not per step: building and growing tables was
-- a seventh of a step's instructions.  A step reads entries 1..its count only, and its keys
-- are numbered after the earlier steps' (keys[kb + i]), so no step sees another's.
local CODE, KEY, AT, N, VOUCHED, planned = {}, {}, {}, {}, {}, {}

local function is_int(v)
  return v == '0' or (string.match(v, '^-?[1-9]%d*$') ~= nil and #v <= 20)
end

-- Decode the shape at argv[ab]; returns the number of reads, of guards and of entries.
local function decode(kb, ab)
  local shape = argv[ab]
  local count = 0
  local pos = ab + 1
  for at = 5, #shape, 5 do
    local code, k1, k2, n1, n2 = byte(shape, at, at + 4)
    local n = n1 * 256 + n2
    count = count + 1
    local vouched = code > 127
    if vouched then code = code - 128 end
    VOUCHED[count] = vouched
    local name, ref = CODES[code], k1 * 256 + k2
    if name ~= 'in' and name ~= 'fnx' then ref = kb + ref end  -- else a slot, not a key
    CODE[count], KEY[count], AT[count], N[count] = name, ref, pos, n
    pos = pos + n
  end
  local r1, r2, g1, g2 = byte(shape, 1, 4)
  return r1 * 256 + r2, g1 * 256 + g2, count
end

-- Phase 1a: reads.  Each key's guarded fields come in one HMGET (grouped by tx.py), into
-- `got` by slot; a key that is not a hash makes its fields read 'WRONGTYPE'.
local function read(nreads)
  local got, slot = {}, 0
  for i = 1, nreads do
    local ki, s, n = KEY[i], AT[i], N[i]
    local reply = pcall_redis('HMGET', keys[ki], unpack(argv, s, s + n - 1))
    if type(reply) == 'table' and reply.err then
      for j = 1, n do got[slot + j] = 'WRONGTYPE' end
    else
      for j = 1, n do got[slot + j] = reply[j] end
      planned[ki] = 'hash'  -- or absent: either takes a hash's ops
    end
    slot = slot + n
  end
  return got
end

-- Phase 1b: guards, judged on what was read.  Returns the failure reply, or nil.
local function guard(i, g, got)
  local code, ki, s, n = CODE[i], KEY[i], AT[i], N[i]
  local key = keys[ki]  -- for `in` and `fnx`, ki is a slot of `got` and key is unused
  if code == 'in' then
    local v = got[ki]
    if v then
      for j = s, s + n - 1 do
        if argv[j] == v then return nil end
      end
    end
    return {0, g, v}
  elseif code == 'nx' then
    if call('EXISTS', key) == 1 then return {0, g, call('TYPE', key)['ok']} end
    planned[ki] = 'none'
  elseif code == 'ex' then
    if call('EXISTS', key) == 0 then return {0, g, false} end
  elseif code == 'fnx' then
    local v = got[ki]
    if v then return {0, g, v} end
  elseif code == 'len' then
    local len = pcall_redis('LLEN', key)
    if type(len) == 'table' and len.err then return {0, g, call('TYPE', key)['ok']} end
    if tostring(len) ~= argv[s] then return {0, g, tostring(len)} end
    if len > 0 then planned[ki] = 'list' else planned[ki] = 'none' end
  else
    return {2, 'CGTX guard ' .. g .. ' ' .. tostring(code) .. ': unknown guard'}
  end
  return nil
end

-- Phase 1c: an op's target and arguments.  Returns why the op cannot be applied, or nil.
local function check_op(ki, code, s, n, vouched)
  local need = NEEDS[code]
  if need == nil then return 'unknown op' end
  if need == false then return nil end
  local have = planned[ki]
  if have == nil then
    if vouched then have = need else have = call('TYPE', keys[ki])['ok'] end
  end
  if have ~= 'none' and have ~= need then return 'key holds a ' .. have end
  planned[ki] = need
  if code == 'zadd' or code == 'zaddnx' then
    for j = s, s + n - 1, 2 do
      if tonumber(argv[j]) == nil then return 'score is not a number' end
    end
  elseif code == 'xaddcap' then
    if not is_int(argv[s]) or n < 3 then return 'cap is not an integer' end
  end
  return nil
end

-- A group's acks, by stream and consumer group: {key, group, ids...}, in first-use order.
local acks, ack_of = {}, {}

-- Phase 2: writes; nothing here can fail after the checks above.  Acks wait for the end of
-- the group: the steps' acks of one stream go as one XACK.
local function write(first_op, count, held)
  local ids = {}
  for i = first_op, count do
    local code, key, s, n = CODE[i], keys[KEY[i]], AT[i], N[i]
    if code == 'xack' then
      held[#held + 1] = i
    elseif code == 'xadd' then
      ids[#ids + 1] = call('XADD', key, '*', unpack(argv, s, s + n - 1))
    elseif code == 'xaddcap' then
      ids[#ids + 1] = call('XADD', key, 'MAXLEN', '~', argv[s], '*',
                                 unpack(argv, s + 1, s + n - 1))
    elseif code == 'zaddnx' then
      call('ZADD', key, 'NX', unpack(argv, s, s + n - 1))
    else
      call(code, key, unpack(argv, s, s + n - 1))
    end
  end
  return {1, ids}
end

-- One step: its keys follow keys[kb], its arguments start at argv[ab] (its shape); the
-- entries of its acks go into ``held``, to be sent once the step has applied.
local function apply_step(kb, ab, held)
  local nreads, nguards, count = decode(kb, ab)
  local got = read(nreads)
  for i = nreads + 1, nreads + nguards do
    local failed = guard(i, i - nreads, got)
    if failed then return failed end
  end
  local first_op = nreads + nguards + 1
  for i = first_op, count do
    local why = check_op(KEY[i], CODE[i], AT[i], N[i], VOUCHED[i])
    if why then
      return {2, 'CGTX op ' .. (i - first_op + 1) .. ' ' .. tostring(CODE[i]) .. ': ' .. why}
    end
  end
  return write(first_op, count, held)
end

-- Hold a step's acks (entries of the step just decoded) for the group's XACKs.
local function hold_acks(held)
  for _, i in ipairs(held) do
    local key, s, n = keys[KEY[i]], AT[i], N[i]
    local id = key .. '\0' .. argv[s]
    local ack = ack_of[id]
    if not ack then
      ack = {key, argv[s]}
      ack_of[id], acks[#acks + 1] = ack, ack
    end
    for j = s + 1, s + n - 1 do ack[#ack + 1] = argv[j] end
  end
end

-- The group: each step in a protected call, so an error in one (an impossible one, see
-- above) ends that step alone, as it would have ended its own script call.
-- The steps' acks of one stream and group go as one XACK at the end, only those of steps that
-- applied: a message is settled in the script call that wrote what it caused, as a step's own
-- XACK would have.  Phase 1 checked each ack's key is a stream; were an XACK still to fail,
-- its messages would stay pending and come again, which every step's guards refuse, so its
-- error must not turn the replies of steps that applied into an error.
local header, replies = argv[1], {}
local kb, ab = 0, 2
for s = 1, #header, 6 do
  local k1, k2, a1, a2, a3, a4 = byte(header, s, s + 5)
  local held = {}
  local ok, reply = pcall(apply_step, kb, ab, held)
  if not ok then
    if type(reply) == 'table' then reply = reply.err end
    reply = {2, tostring(reply)}
  elseif reply[1] == 1 then
    hold_acks(held)
  end
  replies[#replies + 1] = reply
  kb = kb + k1 * 256 + k2
  ab = ab + ((a1 * 256 + a2) * 256 + a3) * 256 + a4
end
for _, ack in ipairs(acks) do pcall_redis('XACK', unpack(ack)) end
return replies
