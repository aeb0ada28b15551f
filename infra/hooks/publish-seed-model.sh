#!/bin/sh
# Publish the first model into the models container, so that a fresh deployment serves: in Azure
# the app reads models only from that container, which infra/ creates empty (docs/deploy.md).
# Runs as part of the azd postdeploy hook (postdeploy.sh), before the smoke test; idempotent: a
# version already in the container is left as it is (a redeploy never overwrites a model).
#
#   SCORING_SEED_MODEL_FILE   the ONNX file      (default models/fraud/1/model.onnx, the demo model)
#   SCORING_SEED_MODEL_NAME   its model name     (default fraud)
#   SCORING_SEED_MODEL_VERSION its version       (default 1)
#   SCORING_SEED_MODEL=false  publish nothing (a container you fill yourself)
#
# It publishes with the project's own script (scripts/publish_model.py: the file is vetted, loaded
# and warmed in its sandbox first). It promotes nothing: nothing in the container can (only the control
# plane: docs/models.md), and the seed needs no promote, since a model with no promoted version serves its
# oldest loaded one. In Azure (azd's outputs STORAGE_ACCOUNT_NAME, AZURE_RESOURCE_GROUP) it
# first grants the signed-in principal (AZURE_PRINCIPAL_ID, else the user or service principal az is
# signed in as)
# "Storage Blob Data Contributor" on the models container only: the account takes no keys, so
# publishing needs a data role, and a new role takes a minute or more to apply (the loop below waits).
# With `ModelStorage` set (a connection string: Azurite locally, the hook's replay test) it
# publishes there and touches nothing in Azure.
set -eu

if [ "${SCORING_SEED_MODEL:-true}" = "false" ]; then
  echo "seed model: SCORING_SEED_MODEL=false, nothing published"
  exit 0
fi
NAME="${SCORING_SEED_MODEL_NAME:-fraud}"
VERSION="${SCORING_SEED_MODEL_VERSION:-1}"
FILE="${SCORING_SEED_MODEL_FILE:-models/fraud/1/model.onnx}"
export MODELS_CONTAINER="${MODELS_CONTAINER:-models}"
[ -f "$FILE" ] || { echo "error: seed model: no file $FILE (SCORING_SEED_MODEL_FILE)" >&2; exit 1; }

if [ -z "${PY:-}" ]; then
  make -s .venv/.runtime # NOTE: the project's venv (requirements.txt), built on first use as `make run` does
  PY=.venv/bin/python
fi
export PYTHONPATH="${PYTHONPATH:-.}"

if [ -z "${ModelStorage:-}" ]; then
  : "${AZURE_RESOURCE_GROUP:?set by azd (main.bicep output)}"
  : "${STORAGE_ACCOUNT_NAME:?set by azd (main.bicep output)}"
  account_id="$(az storage account show -g "$AZURE_RESOURCE_GROUP" -n "$STORAGE_ACCOUNT_NAME" --query id -o tsv)"
  ModelStorage__blobServiceUri="$(az storage account show -g "$AZURE_RESOURCE_GROUP" -n "$STORAGE_ACCOUNT_NAME" \
    --query primaryEndpoints.blob -o tsv)"
  export ModelStorage__blobServiceUri
  # NOTE: a user (az login) or a service principal (CI): its object id and type, for the role assignment
  if [ "$(az account show --query user.type -o tsv)" = "servicePrincipal" ]; then
    type=ServicePrincipal
    principal="${AZURE_PRINCIPAL_ID:-$(az ad sp show --id "$(az account show --query user.name -o tsv)" --query id -o tsv)}"
  else
    type=User
    principal="${AZURE_PRINCIPAL_ID:-$(az ad signed-in-user show --query id -o tsv)}"
  fi
  scope="$account_id/blobServices/default/containers/$MODELS_CONTAINER"
  if [ -z "$(az role assignment list --assignee "$principal" --scope "$scope" \
    --role "Storage Blob Data Contributor" --query '[0].id' -o tsv)" ]; then
    az role assignment create --assignee-object-id "$principal" \
      --assignee-principal-type "$type" \
      --role "Storage Blob Data Contributor" --scope "$scope" --output none
    echo "seed model: granted Storage Blob Data Contributor on the $MODELS_CONTAINER container to $principal"
  fi
fi

attempt=0
while :; do
  status=0
  "$PY" scripts/model_present.py "$NAME" "$VERSION" || status=$?
  if [ "$status" -eq 0 ]; then
    echo "seed model: $NAME/$VERSION is in the $MODELS_CONTAINER container already; not published again" \
      "(a later version serves once promoted: make promote-model)"
    exit 0
  fi
  # NOTE: published, not promoted: the seed serves as the model's oldest (only) version
  if [ "$status" -eq 1 ] && "$PY" scripts/publish_model.py "$NAME" "$VERSION" "$FILE"; then
    exit 0
  fi
  attempt=$((attempt + 1))
  if [ "$attempt" -ge "${SCORING_SEED_ATTEMPTS:-20}" ]; then
    echo "error: seed model: $NAME/$VERSION could not be published to the $MODELS_CONTAINER container" >&2
    exit 1
  fi
  echo "seed model: not yet (a new role takes a while to apply); again in 15 s"
  sleep 15
done
