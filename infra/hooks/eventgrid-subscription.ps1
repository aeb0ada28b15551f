# azd postdeploy (Windows): eventgrid-subscription.sh in PowerShell, step for step. Subscribe the
# models blob trigger (source = EventGrid) to BlobCreated events of model files in the models container.
# The webhook needs the Functions `blobs_extension` system key: it is read into a variable and reaches
# az through a temporary file (az's `@file` syntax), never a command line; the file is removed at once.
$ErrorActionPreference = 'Stop'

foreach ($name in 'AZURE_RESOURCE_GROUP', 'SERVICE_SCORING_NAME', 'EVENTGRID_SYSTEM_TOPIC_NAME') {
  if (-not [Environment]::GetEnvironmentVariable($name)) { throw "${name}: set by azd (main.bicep output)" }
}
$rg = $env:AZURE_RESOURCE_GROUP
$app = $env:SERVICE_SCORING_NAME
$container = if ($env:MODELS_CONTAINER) { $env:MODELS_CONTAINER } else { 'models' }
$trigger = if ($env:BLOB_TRIGGER_FUNCTION) { $env:BLOB_TRIGGER_FUNCTION } else { 'model_blob' }
$subscription = if ($env:EVENTGRID_SUBSCRIPTION_NAME) { $env:EVENTGRID_SUBSCRIPTION_NAME } else { 'models-blob-created' }

$fqdn = az containerapp show -g $rg -n $app --query properties.configuration.ingress.fqdn -o tsv
if ($LASTEXITCODE -ne 0) { throw "az containerapp show failed ($LASTEXITCODE)" }

# The host writes its keys a few seconds after start; retry for up to ~2 minutes.
# NOTE: -o json, not a `a || b` query: az.cmd passes its arguments through cmd.exe, which splits on `|`.
$key = ''
for ($attempt = 0; $attempt -lt 24 -and -not $key; $attempt++) {
  $raw = az containerapp function keys show -g $rg -n $app --key-type systemKey --key-name blobs_extension -o json 2>$null
  if ($LASTEXITCODE -eq 0 -and $raw) {
    $found = ($raw | Out-String | ConvertFrom-Json)
    $key = if ($found.PSObject.Properties['value']) { $found.value } elseif ($found.PSObject.Properties['properties']) { $found.properties.value } else { '' }
  }
  if (-not $key) { Start-Sleep -Seconds 5 }
}
if (-not $key) { throw "no blobs_extension system key on ${app}; is the real image deployed and running?" }

$endpoint = New-TemporaryFile
try {
  Set-Content -Path $endpoint -NoNewline -Encoding utf8 `
    -Value "https://$fqdn/runtime/webhooks/blobs?functionName=Host.Functions.$trigger&code=$key"
  # Only model files, only in the models container; Event Grid retries for 24 h.
  az eventgrid system-topic event-subscription create `
    --resource-group $rg `
    --system-topic-name $env:EVENTGRID_SYSTEM_TOPIC_NAME `
    --name $subscription `
    --endpoint-type webhook `
    --endpoint "@$endpoint" `
    --included-event-types Microsoft.Storage.BlobCreated `
    --subject-begins-with "/blobServices/default/containers/$container/blobs/" `
    --subject-ends-with "/model.onnx" `
    --max-delivery-attempts 30 `
    --event-ttl 1440 `
    --output none
  if ($LASTEXITCODE -ne 0) { throw "az eventgrid system-topic event-subscription create failed ($LASTEXITCODE)" }
} finally {
  Remove-Item -Path $endpoint -ErrorAction SilentlyContinue
}
Write-Host "Event Grid subscription '$subscription' -> $app ($trigger)"
