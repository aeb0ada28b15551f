// Two user-assigned identities, each with the least it needs:
// - app: what the code and the Functions host use at run time (data-plane roles only). On
//   storage it reads the models container, writes the prediction log's, and owns only the host's
//   own containers: never a blob role on the account (storage.bicep; checks/model_roles.py).
//   Publishing a model is the publisher's grant (Blob Data Contributor on `models`), not the app's.
// - platform: what Container Apps itself uses to pull the image (AcrPull) and what the
//   KEDA Service Bus scaler uses to read queue depth. It is attached to the app with
//   lifecycle 'None', so no container can request a token for it.

@description('Azure region.')
param location string

@description('Resource tags.')
param tags object

@description('Name of the runtime identity.')
param appIdentityName string

@description('Name of the platform (image pull + scaler) identity.')
param platformIdentityName string

resource appIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: appIdentityName
  location: location
  tags: tags
}

resource platformIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: platformIdentityName
  location: location
  tags: tags
}

output appIdentityId string = appIdentity.id
output appIdentityName string = appIdentity.name
output appClientId string = appIdentity.properties.clientId
output appPrincipalId string = appIdentity.properties.principalId
output platformIdentityId string = platformIdentity.id
output platformPrincipalId string = platformIdentity.properties.principalId
