# azd postdeploy (Windows): postdeploy.sh in PowerShell, in the same order (docs/deploy.md, "A. azd up"):
# the KEDA rules again, the seed model published, the smoke test, then the Event Grid subscription.
# Each step throws on failure, which stops the hook (and `azd up`) there.
$ErrorActionPreference = 'Stop'
& "$PSScriptRoot/keda-scale-rules.ps1"
& "$PSScriptRoot/publish-seed-model.ps1"
& "$PSScriptRoot/smoke.ps1"
& "$PSScriptRoot/eventgrid-subscription.ps1"
