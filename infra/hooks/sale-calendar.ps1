# azd preprovision (Windows): sale-calendar.sh in PowerShell. Check the sale calendar
# (SCORING_SALE_CALENDAR, docs/deploy.md "A sale known in advance") before anything is provisioned,
# and print the KEDA cron rules it becomes; a bad window stops `azd provision` / `azd up` here.
# The checks are infra/hooks/sale_calendar.py's (standard library only; on Windows the time zone
# database comes from the tzdata package: `py -3.11 -m pip install tzdata`).
$ErrorActionPreference = 'Stop'

$py = $env:PY
if (-not $py) {
  $py = if ($IsWindows -and (Get-Command py -ErrorAction SilentlyContinue)) { 'py' } else { 'python3' }
}
$pyArgs = if ($py -eq 'py') { @('-3.11') } else { @() }
& $py @pyArgs "$PSScriptRoot/sale_calendar.py"
if ($LASTEXITCODE -ne 0) { throw "sale calendar refused (SCORING_SALE_CALENDAR): see the message above" }
