// Container Apps environment with workload profiles:
// - 'Consumption' (always present),
// - 'scoring': a Dedicated general-purpose pool for steady, noisy-neighbour-free latency,
//   where the app runs on CPU; kept while `keepCpuPool` (default) even when the app runs on
//   the GPU, so the deployment that moves the app never removes the profile it leaves,
// - 'gpu': a serverless GPU profile, present while the app runs on it (`enableGpu`) or
//   `keepGpuProfile` keeps it for the way back.
// Moving the app between profiles is therefore two deployments (docs/deploy.md, "GPU on an
// existing deployment"): the move, with the old profile kept, then the removal of the old
// profile once nothing runs on it. tests/infra checks every state and both moves.
// Logs go to Azure Monitor and on to Log Analytics through a diagnostic setting, so
// the template never handles the workspace shared key.

@description('Azure region.')
param location string

@description('Resource tags.')
param tags object

@description('Environment name.')
param name string

@description('Log Analytics workspace resource id.')
param workspaceId string

@description('Dedicated profile type for the scoring pool (D4, D8, D16, ...).')
param dedicatedProfileType string = 'D8'

@description('Minimum nodes in the scoring pool.')
@minValue(1)
param dedicatedMinNodes int = 1

@description('Maximum nodes in the scoring pool.')
@minValue(1)
param dedicatedMaxNodes int = 4

@description('Add a serverless GPU workload profile.')
param enableGpu bool = false

@description('Keep the dedicated CPU pool while the app runs on the GPU (set false only once the app has left it).')
param keepCpuPool bool = true

@description('Keep the GPU profile while the app runs on CPU (set true for the deployment that moves the app off it).')
param keepGpuProfile bool = false

@description('Serverless GPU profile type.')
@allowed([
  'Consumption-GPU-NC8as-T4'
  'Consumption-GPU-NC24-A100'
])
param gpuProfileType string = 'Consumption-GPU-NC8as-T4'

var consumptionProfile = {
  name: 'Consumption'
  workloadProfileType: 'Consumption'
}

var dedicatedProfile = {
  name: 'scoring'
  workloadProfileType: dedicatedProfileType
  minimumCount: dedicatedMinNodes
  maximumCount: dedicatedMaxNodes
}

var gpuProfile = {
  name: 'gpu'
  workloadProfileType: gpuProfileType
}

var hasCpuPool = !enableGpu || keepCpuPool
var hasGpuProfile = enableGpu || keepGpuProfile

resource environment 'Microsoft.App/managedEnvironments@2026-07-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    appLogsConfiguration: {
      destination: 'azure-monitor'
    }
    workloadProfiles: concat([consumptionProfile], hasCpuPool ? [dedicatedProfile] : [], hasGpuProfile ? [gpuProfile] : [])
  }
}

resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: environment
  properties: {
    workspaceId: workspaceId
    logs: [
      {
        categoryGroup: 'allLogs'
        enabled: true
      }
    ]
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

output id string = environment.id
output name string = environment.name
output defaultDomain string = environment.properties.defaultDomain
output appProfileName string = enableGpu ? gpuProfile.name : dedicatedProfile.name
