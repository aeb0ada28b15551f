#!/usr/bin/env bash
# Run a command with the servers the tests need, then stop them (nothing is left behind).
#   Redis:   REDIS_URL when a server answers there; else redis-server on a free loopback port.
#   Azurite: always our own, on a free loopback port, temporary storage, telemetry off.
# Exports REDIS_URL, AZURITE_BLOB_ENDPOINT for the command.
set -euo pipefail

PY=${PY:-.venv/bin/python}
tmp=$(mktemp -d -t scoring-services.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { # port, name, log
  for _ in $(seq 1 100); do
    "$PY" -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$2 did not start; its log:" >&2; cat "$3" >&2; return 1
}
redis_answers() {
  "$PY" -c 'import sys, redis; redis.Redis.from_url(sys.argv[1], socket_timeout=1, socket_connect_timeout=1).ping()' "$1" 2>/dev/null
}

if [ -n "${REDIS_URL:-}" ] && redis_answers "$REDIS_URL"; then
  echo "services: using Redis at $REDIS_URL"
else
  command -v redis-server >/dev/null || { echo "redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
  port=$(free_port)
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$tmp" \
    --maxmemory 256mb --maxmemory-policy allkeys-lru --logfile "$tmp/redis.log" &
  pids+=($!)
  wait_port "$port" redis-server "$tmp/redis.log"
  export REDIS_URL="redis://127.0.0.1:$port/0"
  echo "services: started redis-server on $REDIS_URL"
fi

port=$(free_port)
mkdir -p "$tmp/azurite"
node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$port" --location "$tmp/azurite" \
  --skipApiVersionCheck --loose --disableTelemetry --silent >"$tmp/azurite.log" 2>&1 &
pids+=($!)
wait_port "$port" azurite "$tmp/azurite.log"
export AZURITE_BLOB_ENDPOINT="http://127.0.0.1:$port/devstoreaccount1"
echo "services: started azurite on $AZURITE_BLOB_ENDPOINT"

set +e
"$@"
status=$?
exit $status
