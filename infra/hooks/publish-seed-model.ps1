# azd postdeploy (Windows): publish-seed-model.sh in PowerShell, step for step. Publish the first model
# into the models container with the project's own script (scripts/publish_model.py), unless that
# version is there already (no promote: the seed serves as the model's only version; docs/models.md); in Azure, first grant the signed-in principal "Storage Blob Data
# Contributor" on the models container only (the account takes no keys). Settings as in the .sh:
# SCORING_SEED_MODEL_FILE / _NAME / _VERSION, SCORING_SEED_MODEL=false; ModelStorage (a connection
# string) publishes there and touches nothing in Azure. Python: PY, else the project's .venv, made
# here from requirements.txt when missing (Python 3.11: `py -3.11` on Windows).
$ErrorActionPreference = 'Stop'

if ($env:SCORING_SEED_MODEL -eq 'false') { Write-Host 'seed model: SCORING_SEED_MODEL=false, nothing published'; return }
$name = if ($env:SCORING_SEED_MODEL_NAME) { $env:SCORING_SEED_MODEL_NAME } else { 'fraud' }
$version = if ($env:SCORING_SEED_MODEL_VERSION) { $env:SCORING_SEED_MODEL_VERSION } else { '1' }
$file = if ($env:SCORING_SEED_MODEL_FILE) { $env:SCORING_SEED_MODEL_FILE } else { 'models/fraud/1/model.onnx' }
if (-not $env:MODELS_CONTAINER) { $env:MODELS_CONTAINER = 'models' }
if (-not (Test-Path -Path $file -PathType Leaf)) { throw "seed model: no file $file (SCORING_SEED_MODEL_FILE)" }

$py = $env:PY
if (-not $py) {
  $py = if ($IsWindows) { '.venv/Scripts/python.exe' } else { '.venv/bin/python' }
  if (-not (Test-Path -Path $py)) {
    if ($IsWindows -and (Get-Command py -ErrorAction SilentlyContinue)) { py -3.11 -m venv .venv } else { python3 -m venv .venv }
    if ($LASTEXITCODE -ne 0) { throw 'seed model: cannot create .venv (Python 3.11 needed)' }
    & $py -m pip install -q --disable-pip-version-check -r requirements.txt
    if ($LASTEXITCODE -ne 0) { throw 'seed model: cannot install requirements.txt into .venv' }
  }
}
if (-not $env:PYTHONPATH) { $env:PYTHONPATH = '.' }

if (-not $env:ModelStorage) {
  foreach ($var in 'AZURE_RESOURCE_GROUP', 'STORAGE_ACCOUNT_NAME') {
    if (-not [Environment]::GetEnvironmentVariable($var)) { throw "${var}: set by azd (main.bicep output)" }
  }
  $account = az storage account show -g $env:AZURE_RESOURCE_GROUP -n $env:STORAGE_ACCOUNT_NAME -o json | Out-String | ConvertFrom-Json
  $env:ModelStorage__blobServiceUri = $account.primaryEndpoints.blob
  # NOTE: a user (az login) or a service principal (CI): its object id and type, for the role assignment
  if ((az account show --query user.type -o tsv) -eq 'servicePrincipal') {
    $type = 'ServicePrincipal'
    $principal = if ($env:AZURE_PRINCIPAL_ID) { $env:AZURE_PRINCIPAL_ID } else { az ad sp show --id (az account show --query user.name -o tsv) --query id -o tsv }
  } else {
    $type = 'User'
    $principal = if ($env:AZURE_PRINCIPAL_ID) { $env:AZURE_PRINCIPAL_ID } else { az ad signed-in-user show --query id -o tsv }
  }
  $scope = "$($account.id)/blobServices/default/containers/$($env:MODELS_CONTAINER)"
  $held = az role assignment list --assignee $principal --scope $scope --role 'Storage Blob Data Contributor' --query '[0].id' -o tsv
  if (-not $held) {
    az role assignment create --assignee-object-id $principal --assignee-principal-type $type `
      --role 'Storage Blob Data Contributor' --scope $scope --output none
    if ($LASTEXITCODE -ne 0) { throw "seed model: cannot grant Storage Blob Data Contributor on $scope" }
    Write-Host "seed model: granted Storage Blob Data Contributor on the $($env:MODELS_CONTAINER) container to $principal"
  }
}

$attempts = if ($env:SCORING_SEED_ATTEMPTS) { [int]$env:SCORING_SEED_ATTEMPTS } else { 20 }
for ($attempt = 1; ; $attempt++) {
  & $py scripts/model_present.py $name $version
  $status = $LASTEXITCODE
  if ($status -eq 0) {
    Write-Host ("seed model: $name/$version is in the $($env:MODELS_CONTAINER) container already; not published again " +
      "(a later version serves once promoted: make promote-model)")
    return
  }
  if ($status -eq 1) {
    # NOTE: published, not promoted: the seed serves as the model's oldest (only) version
    & $py scripts/publish_model.py $name $version $file
    if ($LASTEXITCODE -eq 0) { return }
  }
  if ($attempt -ge $attempts) { throw "seed model: $name/$version could not be published to the $($env:MODELS_CONTAINER) container" }
  Write-Host 'seed model: not yet (a new role takes a while to apply); again in 15 s'
  Start-Sleep -Seconds 15
}
