// Azure Container Registry. The admin user is off: Container Apps pulls with the
// platform identity (AcrPull), and `azd deploy` / `az acr build` push with the
// deployer's Entra identity.

@description('Azure region.')
param location string

@description('Resource tags.')
param tags object

@description('Registry name (5-50 alphanumerics).')
param name string

@description('Registry SKU.')
@allowed([
  'Standard'
  'Premium'
])
param sku string = 'Standard'

@description('Principal that pulls images (the platform identity).')
param pullPrincipalId string

var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'

resource registry 'Microsoft.ContainerRegistry/registries@2025-04-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: sku
  }
  /* Justified checkov skips:
    checkov:skip=CKV_AZURE_139: no private network in this template; pulls and pushes are Entra-authenticated (admin user off, anonymous pull off).
    checkov:skip=CKV_AZURE_163: image scanning is Microsoft Defender for Containers, enabled per subscription, not per registry.
    checkov:skip=CKV_AZURE_166: quarantine is Premium-only and needs a scanner to release images; not used.
    checkov:skip=CKV_AZURE_233: zone redundancy is Premium-only; replicas keep running from their pulled image if the registry is briefly unavailable.
  */
  properties: {
    adminUserEnabled: false
    anonymousPullEnabled: false
    publicNetworkAccess: 'Enabled'
  }
}

resource acrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(registry.id, pullPrincipalId, acrPullRoleId)
  scope: registry
  properties: {
    principalId: pullPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)
  }
}

output name string = registry.name
output loginServer string = registry.properties.loginServer
