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

@description('Principal of the runtime identity: publishes telemetry with Entra ID (APPLICATIONINSIGHTS_AUTHENTICATION_STRING).')
param appPrincipalId string

@description('Disable instrumentation-key ingestion (Entra-only telemetry). Requires the app exporter to send with a managed-identity credential.')
param disableLocalAuth bool = false

resource workspace 'Microsoft.OperationalInsights/workspaces@2025-07-01' = {
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

var metricsPublisherRoleId = '3913510d-42f4-4e42-8a64-420c390055eb'

// Entra ingestion: the exporter's token must carry Monitoring Metrics Publisher on
// this component, else telemetry sent with APPLICATIONINSIGHTS_AUTHENTICATION_STRING is refused.
resource metricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, appPrincipalId, metricsPublisherRoleId)
  scope: appInsights
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', metricsPublisherRoleId)
  }
}

output workspaceId string = workspace.id
output appInsightsId string = appInsights.id
output appInsightsName string = appInsights.name
