-- django_gcra: one atomic GCRA decision over 1..N limits (a composite policy).
-- KEYS[i]: the limit keys, all in one cluster slot (shared hash tag).
-- ARGV[1]: cost (0 peeks); then per limit i: interval_us, burst, enforce (1) | shadow (0).
-- ARGV[3n+2] (optional): least. Present, the script takes as many units as every limit
--   has free now, at most ARGV[1] and at least `least` (a lease refill), and appends the
--   units it decided on to the reply.
-- Returns {enforced, would, retry_us, binding, now_us, remaining_1, reset_us_1, ...[, cost]}
--   enforced: 1 allowed, 0 denied, -1 never satisfiable (cost > burst), by enforcing limits
--   would:    the same over all limits, shadow ones included
--   retry_us / binding: the largest retry among the denying limits (enforcing first), 1-based
-- Writes every TAT when all limits allow; only the enforcing limits' TATs when just
-- the shadow limits deny (the hypothetical denial consumes nothing); otherwise nothing.
local cost = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local n = #KEYS
local least = tonumber(ARGV[3 * n + 2])
if least then
  for i = 1, n do
    local interval = tonumber(ARGV[3 * i - 1])
    local tat = tonumber(redis.call('GET', KEYS[i])) or now
    if tat < now then tat = now end
    local free = math.floor((now + interval * tonumber(ARGV[3 * i]) - tat) / interval)
    if free < cost then cost = free end
  end
  if cost < least then cost = least end
end
local tats, new_tats = {}, {}
local enforced, would = 1, 1
local e_retry, e_bind, s_retry, s_bind = -1, 0, -1, 0

for i = 1, n do
  local interval = tonumber(ARGV[3 * i - 1])
  local burst = tonumber(ARGV[3 * i])
  local enforce = ARGV[3 * i + 1] == '1'
  local tat = tonumber(redis.call('GET', KEYS[i])) or now
  if tat < now then tat = now end
  local tolerance = interval * burst
  tats[i] = tat
  local retry = nil
  local status = 1
  if cost > burst then
    status, retry = -1, 1e300
  else
    local new_tat = tat + interval * cost
    local allow_at = new_tat - tolerance
    if allow_at > now then
      status, retry = 0, allow_at - now
    else
      new_tats[i] = new_tat
    end
  end
  if status ~= 1 then
    if enforce then
      if enforced == 1 or status == -1 then enforced = status end
      if retry > e_retry then e_retry, e_bind = retry, i end
    end
    if would == 1 or status == -1 then would = status end
    if retry > s_retry then s_retry, s_bind = retry, i end
  end
end

local result = {enforced, would, 0, 0, now}
for i = 1, n do
  local stored = tats[i]
  if enforced == 1 and new_tats[i] and (would == 1 or ARGV[3 * i + 1] == '1') then
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
return result
