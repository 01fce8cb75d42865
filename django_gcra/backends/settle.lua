-- django_gcra: settle a metered cost (decision.settle) on every rate and quota limit of one
-- allowed decision, in one atomic call. The arithmetic is django_gcra/metered.py's.
-- KEYS[i]: the decision's limit keys (one cluster slot), concurrency limits left out.
-- ARGV[1]: delta = actual - estimate (units; > 0 owed, < 0 refunded); ARGV[2]: the
--   decision's time (us, the store's); then per limit i: a, b, algorithm (0 GCRA: a =
--   interval_us, b = burst; 1 the sliding log, 2 the weighted window: a = period_us, b = N;
--   4 a calendar quota: a = "b0:b1:b2:b3", the period starts, b = its units).
-- Owed: at most the limit's own burst (N, quota) beyond full use. Refunded: never more
--   than a full burst left (a TAT never before now, counts never below 0).
-- Returns {1, now}; {-9, now} (nothing written) when now is outside a quota's [b0, b3).
local delta = tonumber(ARGV[1])
local at = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = #KEYS
local fmt = string.format
local nows = fmt('%d', now)

local periods = {}
for i = 1, n do
  if ARGV[3 * i + 2] == '4' then
    local b0, b1, b2, b3 = string.match(ARGV[3 * i], '^(%d+):(%d+):(%d+):(%d+)$')
    b0, b1, b2, b3 = tonumber(b0), tonumber(b1), tonumber(b2), tonumber(b3)
    if not b0 or now < b0 or now >= b3 then return {-9, now} end
    if now < b1 then periods[i] = {b0, b1} elseif now < b2 then periods[i] = {b1, b2} else periods[i] = {b2, b3} end
  end
end

for i = 1, n do
  local key, alg = KEYS[i], ARGV[3 * i + 2]
  local a, b = ARGV[3 * i], tonumber(ARGV[3 * i + 1])
  if alg == '0' then
    local interval = tonumber(a)
    local tat = tonumber(redis.call('GET', key)) or now
    if tat < now then tat = now end
    local new
    if delta > 0 then
      new = math.min(tat + interval * delta, now + 2 * interval * b)
      if new < tat then new = tat end
    else
      new = math.max(now, tat + interval * delta)
    end
    if new > now then
      redis.call('SET', key, fmt('%d', new), 'PX', math.ceil((new - now) / 1000) + 1)
    else
      redis.call('DEL', key)
    end
  elseif alg == '1' then
    local period = tonumber(a)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', now - period))
    local count = redis.call('ZCARD', key)
    if delta > 0 then
      local add = math.min(delta, 2 * b - count)
      for k = 1, add do
        local m = nows .. ':s' .. (count + k)
        local salt = 0
        while redis.call('ZADD', key, nows, m) == 0 and salt < 4 do
          salt = salt + 1
          m = nows .. ':s' .. (count + k) .. ':' .. salt
        end
      end
      if add > 0 then count = count + add end
    elseif delta < 0 and count > 0 then
      local drop = math.min(-delta, count)
      redis.call('ZPOPMAX', key, fmt('%d', drop))
      count = count - drop
    end
    if count > 0 then redis.call('PEXPIRE', key, math.ceil(period / 1000) + 1) end
  elseif alg == '2' then
    local p = tonumber(a)
    local start = now - math.fmod(now, p)
    local s, cur, prev = start, 0, 0
    local raw = redis.call('GET', key)
    local ss, cc, pp
    if raw then ss, cc, pp = string.match(raw, '^(%d+):(%d+):(%d+)$') end
    ss = tonumber(ss)
    if ss then
      if ss >= start then
        s, cur, prev = ss, tonumber(cc), tonumber(pp)
      elseif ss >= start - p then
        prev = tonumber(cc)
      end
    end
    if delta > 0 then
      local new = math.min(cur + delta, 2 * b)
      if new > cur then cur = new end
    elseif delta < 0 then
      local back = math.min(cur, -delta)
      cur = cur - back
      prev = math.max(0, prev - (-delta - back))
    end
    if cur == 0 and prev == 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, fmt('%d:%d:%d', s, cur, prev), 'PX', math.ceil((s + 2 * p - now) / 1000) + 1)
    end
  elseif alg == '4' then
    local s, e = periods[i][1], periods[i][2]
    local used, same = 0, false
    local raw = redis.call('GET', key)
    if raw then
      local ss, uu = string.match(raw, '^(%d+):(%d+)$')
      if tonumber(ss) == s then used, same = tonumber(uu), true end
    end
    local new
    if delta > 0 then
      new = math.min(used + delta, 2 * b)
      if new < used then new = used end
    elseif delta < 0 and same and s <= at then
      new = math.max(0, used + delta)
    end
    if new then
      redis.call('SET', key, fmt('%d:%d', s, new), 'PX', math.ceil((e - now) / 1000))
    end
  end
end
return {1, now}
