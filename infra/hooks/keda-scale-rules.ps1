# azd postprovision (Windows): keda-scale-rules.sh in PowerShell, step for step. Turn on our KEDA rules
# on the Functions container app the documented way: a PATCH of properties.template.scale
# (allowScalingRuleOverride + rules) on the existing app (docs/platform.md P11), read back.
#
#   $env:SERVICE_SCORING_RESOURCE_ID = '/subscriptions/.../containerApps/ca-x-scoring'
#   $env:SCORING_SCALE = '{"allowScalingRuleOverride":true,...}'; ./infra/hooks/keda-scale-rules.ps1
$ErrorActionPreference = 'Stop'

foreach ($name in 'SERVICE_SCORING_RESOURCE_ID', 'SCORING_SCALE') {
  if (-not [Environment]::GetEnvironmentVariable($name)) { throw "${name}: set by azd (main.bicep output)" }
}
# The Microsoft.App API version: the same as app.bicep, azure.yaml and keda-scale-rules.sh (tests check).
$ApiVersion = "2026-07-01"
$url = "https://management.azure.com$($env:SERVICE_SCORING_RESOURCE_ID)?api-version=$ApiVersion"

$body = New-TemporaryFile
try {
  Set-Content -Path $body -Value ('{"properties":{"template":{"scale":' + $env:SCORING_SCALE + '}}}') -NoNewline -Encoding utf8
  az rest --method patch --url $url --body "@$body" --output none
  if ($LASTEXITCODE -ne 0) { throw "az rest --method patch failed ($LASTEXITCODE)" }
} finally {
  Remove-Item -Path $body -ErrorAction SilentlyContinue
}

$override = az rest --method get --url $url --query properties.template.scale.allowScalingRuleOverride -o tsv
if ($override -ne 'true') { throw "allowScalingRuleOverride is '$override' after the PATCH" }
Write-Host "KEDA scale rules set on $(($env:SERVICE_SCORING_RESOURCE_ID -split '/')[-1]) (allowScalingRuleOverride=true)"
