#!/bin/sh
# The deploy's smoke test: wait until a replica answers /api/health/ready (its models loaded and
# warmed), then score the README's example event at /api/score and check the answer. Runs in the
# azd postdeploy hook after the seed model is published and before the Event Grid subscription.
#
#   SERVICE_SCORING_URI=https://ca-x-scoring.<env>.<region>.azurecontainerapps.io infra/hooks/smoke.sh
#
# The function key (hostKey `default`) is read with az when AZURE_RESOURCE_GROUP and
# SERVICE_SCORING_NAME are set, and reaches curl through a private temporary file (`-H @file`),
# never a command line. SCORING_SMOKE_TIMEOUT_S (default 600) bounds the wait for readiness.
set -eu

: "${SERVICE_SCORING_URI:?set by azd (main.bicep output)}"
uri="${SERVICE_SCORING_URI%/}"
deadline=$(($(date +%s) + ${SCORING_SMOKE_TIMEOUT_S:-600}))

umask 077
headers="$(mktemp)"
answer="$(mktemp)"
trap 'rm -f "$headers" "$answer"' EXIT
printf 'content-type: application/json\n' >"$headers"
if [ -n "${AZURE_RESOURCE_GROUP:-}" ] && [ -n "${SERVICE_SCORING_NAME:-}" ]; then
  key="$(az containerapp function keys show -g "$AZURE_RESOURCE_GROUP" -n "$SERVICE_SCORING_NAME" \
    --key-type hostKey --key-name default --query "value || properties.value" -o tsv)"
  printf 'x-functions-key: %s\n' "$key" >>"$headers" # NOTE: printf is a builtin: no argv carries the key
fi

echo "smoke: waiting for $uri/api/health/ready"
until curl -fsS -o "$answer" --max-time 10 "$uri/api/health/ready" 2>/dev/null; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "error: smoke: $uri is not ready after ${SCORING_SMOKE_TIMEOUT_S:-600} s; its last answer:" >&2
    curl -sS --max-time 10 "$uri/api/health/ready" >&2 || true
    echo >&2
    exit 1
  fi
  sleep 5
done
echo "smoke: ready: $(cat "$answer")"

# The README's example event (tests/test_readme.py holds the two equal).
event='{"event_id": "evt-1001", "user_id": "u00042", "amount": 912.40, "currency": "USD", "merchant_id": "m-77", "merchant_category": "7995", "country": "NG", "channel": "web", "timestamp": "2026-11-29T03:12:00Z", "note": "gift cards"}'
if ! curl -fsS -o "$answer" --max-time 30 -H @"$headers" -X POST "$uri/api/score" -d "$event"; then
  echo "error: smoke: POST $uri/api/score failed" >&2
  exit 1
fi
if ! grep -q '"risk_score"' "$answer"; then
  echo "error: smoke: POST $uri/api/score answered without a risk score: $(cat "$answer")" >&2
  exit 1
fi
echo "smoke: POST /api/score answered: $(cat "$answer")"
