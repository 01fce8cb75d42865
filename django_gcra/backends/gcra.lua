-- django_gcra: one atomic decision over 1..N limits (a composite policy), of any algorithm.
-- KEYS[i]: the limit keys, all in one cluster slot (shared hash tag).
-- ARGV[1]: cost (0 peeks); then per limit i: a, b, flag. flag = 2 * algorithm + enforce,
--   enforce 1 | shadow 0: '1'/'0' GCRA (a = interval_us, b = burst); '3'/'2' the sliding
--   log, '5'/'4' the weighted window (a = period_us, b = N, the units in any period).
-- Calendar quotas (flag '9' enforce / '8' shadow): a = four period starts "b0:b1:b2:b3" (us),
--   b = the units per period; the key holds "start:used" of the period that holds now. When
--   now is outside [b0, b3) the script writes nothing and returns {-9, 0, 0, 0, now}: the
--   caller sends the call again with boundaries around that now (django_gcra/periods.py).
-- Concurrency limits (flag '7' enforce / '6' shadow; a = ttl_us, b = max): KEYS[i] is a ZSET
--   of holder tokens scored by when each slot expires; ARGV[3n+4] is this decision's token.
-- ARGV[3n+2] (optional): least. Present, the script takes as many units as every GCRA
--   limit has free now, at most ARGV[1] and at least `least` (a lease refill), and
--   appends the units it decided on to the reply.
-- ARGV[3n+3] (optional; ARGV[3n+2] is then '' unless a lease refill): max_wait_us, shaping.
--   Present, a decision its enforcing limits deny for at most max_wait_us (never a lease
--   refill, never one with an enforcing sliding limit) is admitted for a future slot
--   instead: every enforcing limit's TAT is pushed as for an admitted request and the
--   wait is appended to the reply. Beyond max_wait_us it is denied as without it.
-- Returns {enforced, would, retry_us, binding, now_us, remaining_1, reset_us_1, ...[, cost][, expired][, waited_us]}
--   enforced: 1 allowed, 0 denied, -1 never satisfiable (cost > burst or N), by enforcing limits
--   would:    the same over all limits, shadow ones included
--   retry_us / binding: the largest retry among the denying limits (enforcing first), 1-based
--   reset_us: GCRA, until the key is rested; sliding, until one more unit is free; a quota,
--   until its period ends (0 when nothing is used)
-- With concurrency limits, the reply ends with the number of slots found expired (their
--   holders died or stopped extending them) and removed by this call.
-- Writes every limit's state when all limits allow; only the enforcing limits' when just
-- the shadow limits deny (the hypothetical denial consumes nothing); otherwise nothing.
-- The sliding log is a ZSET of admission times (score, us), one entry per unit, each
-- member the time's digits (a cost's k-th unit "<time>:k"; salted on a collision); the
-- weighted window a string "start:cur:prev". Their arithmetic is django_gcra/sliding.py's.
local cost = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local n = #KEYS
-- The hot path, straight through: one enforcing GCRA limit, nothing more asked (no lease
-- refill, no wait, no token). The same reply, writes and arithmetic as the loops below.
if n == 1 and ARGV[4] == '1' and not ARGV[5] then
  local interval, burst = tonumber(ARGV[2]), tonumber(ARGV[3])
  local tat = tonumber(redis.call('GET', KEYS[1])) or now
  if tat < now then tat = now end
  local tolerance = interval * burst
  if cost > burst then
    return {-1, -1, -1, 1, now, math.max(0, math.floor((now + tolerance - tat) / interval)), tat - now}
  end
  local new_tat = tat + interval * cost
  if new_tat - tolerance > now then
    return {0, 0, new_tat - tolerance - now, 1, now, math.max(0, math.floor((now + tolerance - tat) / interval)),
            tat - now}
  end
  if cost > 0 then  -- ('%d': exact for whole us, cheaper than '%.0f')
    redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
  end
  return {1, 1, 0, 0, now, math.floor((now + tolerance - new_tat) / interval), new_tat - now}  -- (>= 0: allowed)
end
-- The sliding algorithms' helpers are built only for a call that has such a limit, so a
-- GCRA-only call (the hot path) pays nothing for them, and a log-only call nothing for
-- the weighted window's.
local has_log, has_win, has_conc, has_quota = false, false, false, false
for i = 1, n do
  local flag = ARGV[3 * i + 1]
  if flag ~= '1' and flag ~= '0' then
    if flag == '7' or flag == '6' then has_conc = true
    elseif flag == '9' or flag == '8' then has_quota = true
    elseif flag == '3' or flag == '2' then has_log = true else has_win = true end
  end
end
local sliding = has_log or has_win
-- Every timestamp a sliding branch sends Redis is a string made once: Redis formats a
-- Lua number argument itself, and '%d' is exact (times are whole us, far below 2^53) and
-- cheaper than '%.0f'. A sliding limit's state between the two loops, slide[i], is an
-- array (cheaper than fields): {true, ok, p, N, count, k, at, cut, head, stale} for the
-- log, {false, ok, p, N, start, cur, prev, offset} for the weighted window.
local fmt, nows, unpk, log_at, log_kth, log_add, fits, earliest, wwait, wview
if sliding then
  fmt = string.format
end
if has_log then
  unpk = unpack or table.unpack  -- Lua 5.1 (Redis); 5.2+ elsewhere (fakeredis)
  nows = fmt('%d', now)  -- the score, and the member, of this call's entries
  -- The sliding log: entries in the window are those after cut = now - period. An
  -- entry's time is its member's leading digits (WITHSCORES would have Redis format each
  -- score, about a microsecond apiece).
  log_at = function(m) return tonumber(m) or tonumber(string.match(m, '^(%d+):')) end
  log_kth = function(key, st, k)  -- the k-th oldest entry's time in the window
    local e
    if st[10] then  -- the first `stale` entries by rank have left: rank stale + k - 1
      local r = st[10] + k
      if r <= #st[9] then return log_at(st[9][r]) end
      r = fmt('%d', r - 1)
      e = redis.call('ZRANGE', key, r, r)
    else
      e = redis.call('ZRANGEBYSCORE', key, '(' .. fmt('%d', st[8]), '+inf', 'LIMIT',
                     k == 1 and '0' or fmt('%d', k - 1), '1')
    end
    return log_at(e[1])
  end
  -- cost entries at now, members nows, nows:2 .. nows:cost. Members are unique while
  -- Redis time does not step back; if ZADD adds fewer (an entry at this very us: a clock
  -- that stepped back), the rest are salted with the count, above any earlier one's.
  log_add = function(key, count)
    local j, salt = 0, 0
    if cost == 1 then  -- the usual case: no table, no unpack
      j = redis.call('ZADD', key, nows, nows)
      salt = 1 - j
    end
    while j < cost and salt < 4 do
      local args, from = {}, j
      for k = from + 1, math.min(cost, from + 1000) do  -- unpack() takes a few thousand values
        args[#args + 1] = nows
        if salt > 0 then
          args[#args + 1] = nows .. ':' .. (count + k) .. ':' .. salt
        else
          args[#args + 1] = k == 1 and nows or nows .. ':' .. k
        end
      end
      j = from + redis.call('ZADD', key, unpk(args))
      if j == from + #args / 2 then salt = 0 else salt = salt + 1 end
    end
  end
end
if has_win then
  -- The weighted window (see sliding.py: _fits, _earliest, window_wait, window_remaining,
  -- window_reset).
  fits = function(cur, prev, off, p, lim, need)
    return cur + need <= lim and prev * (p - off) <= (lim - cur - need) * p
  end
  earliest = function(prev, room, p)
    local x = p - math.floor(room * p / prev)
    for _ = 1, 3 do
      if prev * (p - x) <= room * p then break end
      x = x + 1
    end
    return x
  end
  wwait = function(cur, prev, off, p, lim, need)
    if fits(cur, prev, off, p, lim, need) then return 0 end
    if cur + need <= lim then
      local x = earliest(prev, lim - cur - need, p)
      if x < p then return x - off end
      return p - off
    end
    local y = math.max(0, earliest(cur, lim - need, p))
    if y < p then return p - off + y end
    return 2 * p - off
  end
  wview = function(cur, prev, off, p, lim)  -- remaining, reset: fits() inlined, w its weight
    local w = prev * (p - off)
    local left = lim - cur - math.ceil(w / p)
    while left > 0 and not (cur + left <= lim and w <= (lim - cur - left) * p) do left = left - 1 end
    if left < 0 then left = 0 end
    if left >= lim then return left, 0 end
    return left, wwait(cur, prev, off, p, lim, left + 1)
  end
end
local least = tonumber(ARGV[3 * n + 2])
if least then
  for i = 1, n do
    local flag = ARGV[3 * i + 1]
    if flag == '1' or flag == '0' then  -- leases never run on sliding limits (check E054)
      local interval = tonumber(ARGV[3 * i - 1])
      local tat = tonumber(redis.call('GET', KEYS[i])) or now
      if tat < now then tat = now end
      local free = math.floor((now + interval * tonumber(ARGV[3 * i]) - tat) / interval)
      if free < cost then cost = free end
    end
  end
  if cost < least then cost = least end
end
-- [quota] quo[i]: {start, end, used, fits} of a quota limit's period that holds now
local quo = has_quota and {}
if has_quota then
  for i = 1, n do
    local flag = ARGV[3 * i + 1]
    if flag == '9' or flag == '8' then
      local b0, b1, b2, b3 = string.match(ARGV[3 * i - 1], '^(%d+):(%d+):(%d+):(%d+)$')
      b0, b1, b2, b3 = tonumber(b0), tonumber(b1), tonumber(b2), tonumber(b3)
      if not b0 or now < b0 or now >= b3 then return {-9, 0, 0, 0, now} end
      local s, e = b2, b3
      if now < b1 then s, e = b0, b1 elseif now < b2 then s, e = b1, b2 end
      local used = 0
      local raw = redis.call('GET', KEYS[i])
      if raw then
        local ss, uu = string.match(raw, '^(%d+):(%d+)$')
        if tonumber(ss) == s then used = tonumber(uu) end
      end
      quo[i] = {s, e, used, false}
    end
  end
end
-- [/quota]
-- [concurrency] a slot per concurrency limit: held[i] is its count of live slots.
local held, expired, token
if has_conc then held, expired, token = {}, 0, ARGV[3 * n + 4] end
-- [/concurrency]
local tats, new_tats, slide = {}, {}, sliding and {}
local enforced, would = 1, 1
local e_retry, e_bind, s_retry, s_bind = -1, 0, -1, 0
-- [shaping] each denying limit's retry, kept only for a call that may wait
local max_wait = tonumber(ARGV[3 * n + 3])
local denials = max_wait and {}

for i = 1, n do
  local flag = ARGV[3 * i + 1]
  local enforce, retry
  local status = 1
  if flag == '1' or flag == '0' then
    local interval = tonumber(ARGV[3 * i - 1])
    local burst = tonumber(ARGV[3 * i])
    enforce = flag == '1'
    local tat = tonumber(redis.call('GET', KEYS[i])) or now
    if tat < now then tat = now end
    tats[i] = tat
    if cost > burst then
      status, retry = -1, 1e300
    else
      local new_tat = tat + interval * cost
      local allow_at = new_tat - interval * burst
      if allow_at > now then
        status, retry = 0, allow_at - now
      else
        new_tats[i] = new_tat
      end
    end
  elseif has_quota and quo[i] then  -- [quota]
    local q, lim = quo[i], tonumber(ARGV[3 * i])
    enforce = flag == '9'
    if cost > lim then
      status, retry = -1, 1e300
    elseif q[3] + cost > lim then
      status, retry = 0, q[2] - now
    end
    q[4] = status == 1
  elseif has_conc and (flag == '7' or flag == '6') then  -- [concurrency]
    enforce = flag == '7'
    expired = expired + redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    local count = redis.call('ZCARD', KEYS[i])
    held[i] = count
    if cost > 0 and count >= tonumber(ARGV[3 * i]) then
      status, retry = 0, 1000000  -- a slot frees when a request ends: ask to retry in a second
    end
  else
    local f = tonumber(flag)
    local p, lim = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
    enforce = f % 2 == 1
    if f < 4 then
      -- The 2 oldest entries tell how many have left the window (then the count is ZCARD's,
      -- O(1), less those, and the oldest in the window is known), unless both have: ZCOUNT.
      local key, cut = KEYS[i], now - p
      local head = redis.call('ZRANGE', key, '0', '1')
      local stale, count = 0, 0
      while stale < #head do
        local m = head[stale + 1]
        if (tonumber(m) or log_at(m)) > cut then break end
        stale = stale + 1
      end
      if stale < #head then
        count = (#head < 2 and #head or redis.call('ZCARD', key)) - stale
      elseif #head == 2 then
        stale = false  -- (unknown)
        count = redis.call('ZCOUNT', key, '(' .. fmt('%d', cut), '+inf')
      end  -- (else the one entry there is has left: the count is 0)
      -- k, at: a denial's lookup (the k-th oldest entry in the window is at `at`)
      local st = {true, false, p, lim, count, false, false, cut, head, stale}
      slide[i] = st
      if cost > lim then
        status, retry = -1, 1e300
      elseif count + cost > lim then
        local k = count + cost - lim
        st[6], st[7] = k, log_kth(key, st, k)
        status, retry = 0, st[7] + p - now
      end
      st[2] = status == 1
    else
      local start = now - math.fmod(now, p)
      local s, cur, prev, off = start, 0, 0, now - start
      local raw = redis.call('GET', KEYS[i])
      local ss, cc, pp
      if raw then ss, cc, pp = string.match(raw, '^(%d+):(%d+):(%d+)$') end
      ss = tonumber(ss)
      if ss then  -- (a value the script did not write counts as a fresh key)
        if ss >= start then
          s, cur, prev, off = ss, tonumber(cc), tonumber(pp), math.max(0, now - ss)
        elseif ss >= start - p then
          prev = tonumber(cc)
        end
      end
      if cost > lim then
        status, retry = -1, 1e300
      elseif not fits(cur, prev, off, p, lim, cost) then
        status, retry = 0, wwait(cur, prev, off, p, lim, cost)
      end
      slide[i] = {false, status == 1, p, lim, s, cur, prev, off}
    end
  end
  if status ~= 1 then
    if denials then denials[i] = retry end  -- [shaping]
    if enforce then
      if enforced == 1 or status == -1 then enforced = status end
      if retry > e_retry then e_retry, e_bind = retry, i end
    end
    if would == 1 or status == -1 then would = status end
    if retry > s_retry then s_retry, s_bind = retry, i end
  end
end

-- [shaping] begin: a denial within max_wait becomes a reservation of the next free slot.
-- The wait is the largest retry over the enforcing limits (all GCRA); each one's TAT moves
-- on by the cost from where it stands, so concurrent waiters queue one interval apart.
-- Shadow limits never make a caller wait: they are judged as now, as without a wait.
local waited = 0
if max_wait and enforced == 0 and e_retry <= max_wait and not least then
  local reservable = true
  for i = 1, n do
    local flag = ARGV[3 * i + 1]
    if flag ~= '1' and flag ~= '0' and tonumber(flag) % 2 == 1 then reservable = false end
  end
  if reservable then
    waited = e_retry
    would, s_retry, s_bind = 1, -1, 0
    for i = 1, n do
      local flag = ARGV[3 * i + 1]
      if flag == '1' then
        if not new_tats[i] then new_tats[i] = tats[i] + tonumber(ARGV[3 * i - 1]) * cost end
      elseif denials[i] then  -- a shadow limit that denies now
        local r = denials[i]
        if would == 1 or r >= 1e300 then would = r >= 1e300 and -1 or 0 end
        if r > s_retry then s_retry, s_bind = r, i end
      end
    end
    enforced = 1
  end
end
-- [shaping] end

local result = {enforced, would, 0, 0, now}
for i = 1, n do
  local flag = ARGV[3 * i + 1]
  local st = sliding and slide[i]
  if has_quota and quo[i] then  -- [quota]
    local q = quo[i]
    local used = q[3]
    if enforced == 1 and q[4] and (would == 1 or flag == '9') then
      used = used + cost
      if cost > 0 then
        redis.call('SET', KEYS[i], string.format('%d:%d', q[1], used), 'PX', math.ceil((q[2] - now) / 1000))
      end
    end
    result[4 + 2 * i] = math.max(0, tonumber(ARGV[3 * i]) - used)
    result[5 + 2 * i] = used > 0 and q[2] - now or 0
  elseif has_conc and held[i] then  -- [concurrency]
    local count = held[i]
    if enforced == 1 and cost > 0 and (would == 1 or flag == '7') then
      local ttl = tonumber(ARGV[3 * i - 1])
      redis.call('ZADD', KEYS[i], string.format('%.0f', now + ttl), token)
      redis.call('PEXPIRE', KEYS[i], math.ceil(ttl / 1000) + 1000)
      count = count + 1
    end
    result[4 + 2 * i] = math.max(0, tonumber(ARGV[3 * i]) - count)
    result[5 + 2 * i] = 0
  elseif not st then
    local stored = tats[i]
    if enforced == 1 and new_tats[i] and (would == 1 or flag == '1') then
      stored = new_tats[i]
      if cost > 0 then
        redis.call('SET', KEYS[i], string.format('%.0f', stored),
                   'PX', math.ceil((stored - now) / 1000) + 1)
      end
    end
    local interval = tonumber(ARGV[3 * i - 1])
    local tolerance = interval * tonumber(ARGV[3 * i])
    result[4 + 2 * i] = math.max(0, math.floor((now + tolerance - stored) / interval))
    result[5 + 2 * i] = stored - now
  else
    local write = enforced == 1 and st[2] and (would == 1 or tonumber(flag) % 2 == 1)
    local p, lim = st[3], st[4]
    if st[1] then
      local count, key = st[5], KEYS[i]
      if write and cost > 0 then
        if st[10] ~= 0 then redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', st[8])) end
        log_add(key, count)
        redis.call('PEXPIRE', key, math.ceil(p / 1000) + 1)
      end
      if write then count = count + cost end
      local left = math.max(0, lim - count)
      result[4 + 2 * i] = left
      local k = count - lim + left + 1  -- one more unit is free when the k-th oldest leaves
      if count == 0 then
        result[5 + 2 * i] = 0
      elseif write and st[5] == 0 then
        result[5 + 2 * i] = p  -- the oldest entry is this decision's
      elseif k == st[6] then  -- the denial's lookup found it already
        result[5 + 2 * i] = st[7] + p - now
      else  -- (after a write k is 1: the oldest in the window before it, from the head)
        result[5 + 2 * i] = log_kth(key, st, k) + p - now
      end
    else
      local cur, prev, off = st[6], st[7], st[8]
      if write then
        cur = cur + cost
        if cost > 0 then
          redis.call('SET', KEYS[i], fmt('%d:%d:%d', st[5], cur, prev),
                     'PX', math.ceil((st[5] + 2 * p - now) / 1000) + 1)
        end
      end
      result[4 + 2 * i], result[5 + 2 * i] = wview(cur, prev, off, p, lim)
    end
  end
end

local retry, bind = 0, 0
if enforced ~= 1 then
  retry, bind = e_retry, e_bind
elseif would ~= 1 then
  retry, bind = s_retry, s_bind
end
if retry >= 1e300 then retry = -1 end
result[3], result[4] = retry, bind
if least then result[6 + 2 * n] = cost end
if has_conc then result[#result + 1] = expired end
if max_wait then result[#result + 1] = waited end  -- [shaping]
return result
