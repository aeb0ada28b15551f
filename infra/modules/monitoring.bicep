// Log Analytics workspace + workspace-based Application Insights.
// The Container Apps environment ships its logs here through a diagnostic setting
// (destination 'azure-monitor'), so no workspace shared key is ever handled.

@description('Azure region.')
param location string

@description('Resource tags.')
param tags object

@description('Log Analytics workspace name.')
param logAnalyticsName string

@description('Application Insights component name.')
param appInsightsName string

@description('Days of log retention.')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

@description('Disable instrumentation-key ingestion (Entra-only telemetry). Requires the app exporter to send with a managed-identity credential.')
param disableLocalAuth bool = false

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: appInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    DisableLocalAuth: disableLocalAuth
  }
}

output workspaceId string = workspace.id
output appInsightsId string = appInsights.id
output appInsightsName string = appInsights.name
