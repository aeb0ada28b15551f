#!/usr/bin/env bash
# Run a command with the servers the tests need, then stop them (nothing is left behind).
#   SERVICE_SETS=N (default 1): N sets of servers, one per pytest-xdist worker (tests/conftest.py gives
#            worker gwK set K), since the tests share fixed Redis keys and pub/sub channels (global across
#            a server's databases) and Blob containers: two workers on one server would meet.
#   Redis:   REDIS_URL when a server answers there, and then one set only (SERVICE_SETS=1: the command runs
#            its tests in one process; a second worker would share that server); else a redis-server per
#            set on a free loopback port.
#   Azurite: always our own, one per set, on a free loopback port, temporary storage, telemetry off.
# Exports SERVICE_SETS, REDIS_URL_K and AZURITE_BLOB_ENDPOINT_K for each set K, and REDIS_URL and
# AZURITE_BLOB_ENDPOINT as set 0's (a command that runs in one process uses those).
set -euo pipefail

PY=${PY:-.venv/bin/python}
sets=${SERVICE_SETS:-1}
tmp=$(mktemp -d -t scoring-services.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

free_ports() { # count: that many distinct free loopback ports (each socket held until all are chosen)
  "$PY" -c 'import socket, sys
held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in held))' "$1"
}
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
start_redis() { # port, dir
  mkdir -p "$2"
  redis-server --bind 127.0.0.1 --port "$1" --save "" --appendonly no --dir "$2" \
    --maxmemory 256mb --maxmemory-policy allkeys-lru --logfile "$2/redis.log" >/dev/null &
  pids+=($!)
}
start_azurite() { # port, dir
  mkdir -p "$2"
  node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$1" --location "$2" \
    --skipApiVersionCheck --loose --disableTelemetry --silent >"$2.log" 2>&1 &
  pids+=($!)
}

external=
if [ -n "${REDIS_URL:-}" ] && redis_answers "$REDIS_URL"; then
  external=$REDIS_URL sets=1
  echo "services: using Redis at $REDIS_URL (one set: the tests run in one process)"
else
  command -v redis-server >/dev/null || { echo "redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
fi

# NOTE: every server is started before any is waited for: the Azurites' starts (~1 s of node each) overlap.
read -r -a ports <<<"$(free_ports $((2 * sets)))"
redis_ports=("${ports[@]:0:sets}") azurite_ports=("${ports[@]:sets}")
for ((k = 0; k < sets; k++)); do
  [ -n "$external" ] || start_redis "${redis_ports[k]}" "$tmp/redis-$k"
  start_azurite "${azurite_ports[k]}" "$tmp/azurite-$k"
done
for ((k = 0; k < sets; k++)); do
  if [ -n "$external" ]; then
    export "REDIS_URL_$k=$external"
  else
    wait_port "${redis_ports[k]}" redis-server "$tmp/redis-$k/redis.log"
    export "REDIS_URL_$k=redis://127.0.0.1:${redis_ports[k]}/0"
  fi
  wait_port "${azurite_ports[k]}" azurite "$tmp/azurite-$k.log"
  export "AZURITE_BLOB_ENDPOINT_$k=http://127.0.0.1:${azurite_ports[k]}/devstoreaccount1"
done
export SERVICE_SETS=$sets REDIS_URL=$REDIS_URL_0 AZURITE_BLOB_ENDPOINT=$AZURITE_BLOB_ENDPOINT_0
what=$([ -n "$external" ] && echo "azurite" || echo "redis-server and azurite")
echo "services: started $sets x $what (set 0: $REDIS_URL, $AZURITE_BLOB_ENDPOINT)"

set +e
"$@"
status=$?
exit $status
