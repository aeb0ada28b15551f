-- POST /api/score with events. MODE=miss: every request a unique feature row (cache misses).
-- MODE=hit: a fixed set of HIT_KEYS events from HIT_OFFSET, so after warm-up every request is a cache hit.
-- MODE=batch: /api/score/batch with BATCH events of unique rows.
local mode = os.getenv("MODE") or "miss"
local hit_keys = tonumber(os.getenv("HIT_KEYS") or "200")
local hit_offset = tonumber(os.getenv("HIT_OFFSET") or "0") -- MODE=hit: the first event number of the set
local batch = tonumber(os.getenv("BATCH") or "8")
local users = tonumber(os.getenv("USERS") or "2000")
local channels = {"web", "app", "pos"}
local countries = {"US", "GB", "DE", "NG"}
local counter = 0
local next_tid = 0
tid = 0 -- a global: setup() gives each thread its own value

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end

function init(args)
  counter = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  if mode == "batch" then wrk.path = "/api/score/batch" end
end

local function event(n)
  local cents = n % 500000
  return string.format(
    '{"event_id":"e-%d-%d","user_id":"u%05d","amount":%d.%02d,"currency":"USD","merchant_id":"m-%d",' ..
    '"merchant_category":"5411","country":"%s","channel":"%s","timestamp":"%s"}',
    tid, n, n % users, 1 + math.floor(cents / 100), cents % 100, n % 97, countries[n % 4 + 1], channels[n % 3 + 1],
    os.date("!%Y-%m-%dT%H:%M:%SZ"))
end

function request()
  counter = counter + 1
  local n = counter * 16 + tid
  if mode == "hit" then
    n = hit_offset + counter % hit_keys
  end
  if mode == "batch" then
    local items = {}
    for i = 1, batch do items[i] = event(n * batch + i) end
    return wrk.format(nil, nil, nil, '{"events":[' .. table.concat(items, ",") .. ']}')
  end
  return wrk.format(nil, nil, nil, event(n))
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_us":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
    '"non2xx":%d,"timeouts":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
