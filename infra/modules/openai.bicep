// Optional Azure OpenAI account + one deployment, reviewed only for the uncertain tail.
// Key auth is disabled; the runtime identity gets "Cognitive Services OpenAI User".

@description('Azure region (must offer the model).')
param location string

@description('Resource tags.')
param tags object

@description('Account name (also its custom subdomain).')
param name string

@description('Deployment name the app calls.')
param deploymentName string = 'review'

@description('Model name.')
param modelName string = 'gpt-4o-mini'

@description('Model version.')
param modelVersion string = '2024-07-18'

@description('Deployment capacity in thousands of tokens per minute.')
param capacity int = 50

@description('Principal of the runtime identity.')
param appPrincipalId string

var openAiUserRoleId = '5e0bd9bd-7b93-4f28-af87-19fc36ad61bd'

resource account 'Microsoft.CognitiveServices/accounts@2024-10-01' = {
  name: name
  location: location
  tags: tags
  kind: 'OpenAI'
  identity: {
    type: 'SystemAssigned'
  }
  sku: {
    name: 'S0'
  }
  /* Justified checkov skips:
    checkov:skip=CKV_AZURE_134: no private network in this template; local (key) auth is disabled, so only Entra principals with the OpenAI User role get in.
  */
  properties: {
    customSubDomainName: name
    disableLocalAuth: true
    publicNetworkAccess: 'Enabled'
  }
}

resource deployment 'Microsoft.CognitiveServices/accounts/deployments@2024-10-01' = {
  parent: account
  name: deploymentName
  sku: {
    name: 'GlobalStandard'
    capacity: capacity
  }
  properties: {
    model: {
      format: 'OpenAI'
      name: modelName
      version: modelVersion
    }
  }
}

resource openAiUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, openAiUserRoleId)
  scope: account
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', openAiUserRoleId)
  }
}

output endpoint string = account.properties.endpoint
output deploymentName string = deployment.name
