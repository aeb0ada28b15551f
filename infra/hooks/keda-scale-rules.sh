#!/bin/sh
# Turn on our KEDA rules on the Functions container app, the documented way: a PATCH of
# `properties.template.scale` (allowScalingRuleOverride + rules) on the EXISTING app. Learn
# documents the override only as that PATCH (docs/platform.md P11), so main.bicep creates the
# app without it and outputs the scale block (SCORING_SCALE) this hook sends. Idempotent: run
# it after every provision and deploy (azure.yaml postprovision and postdeploy; docs/deploy.md).
#
#   SERVICE_SCORING_RESOURCE_ID=/subscriptions/.../containerApps/ca-x-scoring \
#   SCORING_SCALE='{"allowScalingRuleOverride":true,...}' infra/hooks/keda-scale-rules.sh
set -eu

: "${SERVICE_SCORING_RESOURCE_ID:?set by azd (main.bicep output)}"
: "${SCORING_SCALE:?set by azd (main.bicep output)}"
# The Microsoft.App API version: the same as app.bicep and azure.yaml's apiVersion
# (tests/infra checks the three agree and that this version knows the override).
API_VERSION="2026-07-01"

body="$(mktemp)"
trap 'rm -f "$body"' EXIT
printf '{"properties":{"template":{"scale":%s}}}\n' "$SCORING_SCALE" >"$body"

az rest --method patch \
  --url "https://management.azure.com${SERVICE_SCORING_RESOURCE_ID}?api-version=${API_VERSION}" \
  --body "@$body" \
  --output none

override="$(az rest --method get \
  --url "https://management.azure.com${SERVICE_SCORING_RESOURCE_ID}?api-version=${API_VERSION}" \
  --query properties.template.scale.allowScalingRuleOverride -o tsv)"
if [ "$override" != "true" ]; then
  echo "error: allowScalingRuleOverride is '$override' after the PATCH" >&2
  exit 1
fi
echo "KEDA scale rules set on ${SERVICE_SCORING_RESOURCE_ID##*/} (allowScalingRuleOverride=true)"
