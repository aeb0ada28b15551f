#!/bin/sh
# Subscribe the models blob trigger (source = EventGrid) to BlobCreated events.
#
# Runs as the azd postdeploy hook (azd exports the main.bicep outputs as environment
# variables) or by hand after `az deployment group create` + image deploy:
#
#   AZURE_RESOURCE_GROUP=rg SERVICE_SCORING_NAME=ca-x-scoring \
#   EVENTGRID_SYSTEM_TOPIC_NAME=evgt-x-models MODELS_CONTAINER=models \
#   BLOB_TRIGGER_FUNCTION=model_blob  infra/hooks/eventgrid-subscription.sh
#
# The webhook needs the Functions `blobs_extension` system key, created by the host at
# start-up. The key is read into a variable and reaches az through a private temporary
# file (az's `@file` argument syntax), never a command line (`ps` shows those): never
# echoed, never an output; the file is mode 600 and removed on exit.
set -eu

: "${AZURE_RESOURCE_GROUP:?set by azd (main.bicep output)}"
: "${SERVICE_SCORING_NAME:?set by azd (main.bicep output)}"
: "${EVENTGRID_SYSTEM_TOPIC_NAME:?set by azd (main.bicep output)}"
MODELS_CONTAINER="${MODELS_CONTAINER:-models}"
# The blob-triggered function's name in function_app.py (Python v2: the decorated
# function's name, or @app.function_name). Override with `azd env set BLOB_TRIGGER_FUNCTION ...`.
BLOB_TRIGGER_FUNCTION="${BLOB_TRIGGER_FUNCTION:-model_blob}"
SUBSCRIPTION_NAME="${EVENTGRID_SUBSCRIPTION_NAME:-models-blob-created}"

fqdn="$(az containerapp show -g "$AZURE_RESOURCE_GROUP" -n "$SERVICE_SCORING_NAME" \
  --query properties.configuration.ingress.fqdn -o tsv)"

# The host writes its keys a few seconds after start; retry for up to ~2 minutes.
key=""
attempt=0
while [ -z "$key" ] && [ "$attempt" -lt 24 ]; do
  key="$(az containerapp function keys show -g "$AZURE_RESOURCE_GROUP" -n "$SERVICE_SCORING_NAME" \
    --key-type systemKey --key-name blobs_extension --query "value || properties.value" -o tsv 2>/dev/null || true)"
  [ -n "$key" ] || { attempt=$((attempt + 1)); sleep 5; }
done
if [ -z "$key" ]; then
  echo "error: no blobs_extension system key on $SERVICE_SCORING_NAME; is the real image deployed and running?" >&2
  exit 1
fi

# NOTE: printf is a shell builtin: no process is started, so no argv carries the key.
umask 077
endpoint_file="$(mktemp)"
trap 'rm -f "$endpoint_file"' EXIT
printf '%s' "https://${fqdn}/runtime/webhooks/blobs?functionName=Host.Functions.${BLOB_TRIGGER_FUNCTION}&code=${key}" >"$endpoint_file"

# Only model files, only in the models container; Event Grid retries for 24 h.
# `create` is idempotent for the same name and updates the endpoint (key rotation).
az eventgrid system-topic event-subscription create \
  --resource-group "$AZURE_RESOURCE_GROUP" \
  --system-topic-name "$EVENTGRID_SYSTEM_TOPIC_NAME" \
  --name "$SUBSCRIPTION_NAME" \
  --endpoint-type webhook \
  --endpoint "@$endpoint_file" \
  --included-event-types Microsoft.Storage.BlobCreated \
  --subject-begins-with "/blobServices/default/containers/${MODELS_CONTAINER}/blobs/" \
  --subject-ends-with "/model.onnx" \
  --max-delivery-attempts 30 \
  --event-ttl 1440 \
  --output none

echo "Event Grid subscription '$SUBSCRIPTION_NAME' -> $SERVICE_SCORING_NAME ($BLOB_TRIGGER_FUNCTION)"
