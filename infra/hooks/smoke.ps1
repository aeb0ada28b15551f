# azd postdeploy (Windows): smoke.sh in PowerShell, step for step. Wait until a replica answers
# /api/health/ready, then score the README's example event at /api/score and check the answer.
# The function key (hostKey `default`) is read with az when AZURE_RESOURCE_GROUP and SERVICE_SCORING_NAME
# are set and stays in this process (a request header), never on a command line.
$ErrorActionPreference = 'Stop'

if (-not $env:SERVICE_SCORING_URI) { throw 'SERVICE_SCORING_URI: set by azd (main.bicep output)' }
$uri = $env:SERVICE_SCORING_URI.TrimEnd('/')
$timeout = if ($env:SCORING_SMOKE_TIMEOUT_S) { [int]$env:SCORING_SMOKE_TIMEOUT_S } else { 600 }
$deadline = (Get-Date).AddSeconds($timeout)

$headers = @{}
if ($env:AZURE_RESOURCE_GROUP -and $env:SERVICE_SCORING_NAME) {
  $raw = az containerapp function keys show -g $env:AZURE_RESOURCE_GROUP -n $env:SERVICE_SCORING_NAME `
    --key-type hostKey --key-name default -o json
  if ($LASTEXITCODE -ne 0) { throw 'smoke: cannot read the function key' }
  $found = ($raw | Out-String | ConvertFrom-Json)
  $headers['x-functions-key'] = if ($found.PSObject.Properties['value']) { $found.value } else { $found.properties.value }
}

Write-Host "smoke: waiting for $uri/api/health/ready"
while ($true) {
  try {
    $ready = Invoke-RestMethod -Uri "$uri/api/health/ready" -TimeoutSec 10
    break
  } catch {
    if ((Get-Date) -ge $deadline) { throw "smoke: $uri is not ready after $timeout s: $($_.Exception.Message)" }
    Start-Sleep -Seconds 5
  }
}
Write-Host "smoke: ready: $($ready | ConvertTo-Json -Compress)"

# The README's example event (tests/test_readme.py holds the two equal).
$payment = '{"event_id": "evt-1001", "user_id": "u00042", "amount": 912.40, "currency": "USD", "merchant_id": "m-77", "merchant_category": "7995", "country": "NG", "channel": "web", "timestamp": "2026-11-29T03:12:00Z", "note": "gift cards"}'
$answer = Invoke-RestMethod -Method Post -Uri "$uri/api/score" -Headers $headers -ContentType 'application/json' -Body $payment -TimeoutSec 30
if ($null -eq $answer.risk_score) { throw "smoke: POST $uri/api/score answered without a risk score: $($answer | ConvertTo-Json -Compress)" }
Write-Host "smoke: POST /api/score answered: $($answer | ConvertTo-Json -Compress)"
