// One storage account for the Functions host (AzureWebJobsStorage: leases, keys,
// blob-trigger receipts and poison queue), the `models` container the blob trigger
// watches, and the `predictions` container the prediction log appends to (WORM: below).
// The runtime identity holds a blob role on each container it uses, never on the account
// (the role assignments below): it reads models, writes only the prediction log.
// Shared-key access is disabled: every client authenticates with Entra ID.
// The Event Grid system topic lives here; its BlobCreated subscription needs the
// Functions `blobs_extension` system key, which exists only once the app runs, so
// infra/hooks/eventgrid-subscription.sh creates it after deploy.

@description('Azure region.')
param location string

@description('Resource tags.')
param tags object

@description('Storage account name (3-24 lowercase alphanumerics).')
param name string

@description('Blob container the models are uploaded to.')
param modelsContainerName string = 'models'

@description('Blob container of the prediction log (PREDICTION_LOG_CONTAINER): hourly append blobs of decision records.')
param predictionsContainerName string = 'predictions'

// NOTE: 180 days outlasts the card networks' usual 120-day dispute window, when a decision is asked
// about (an assumption about the business, not a platform fact: set it to your retention rule).
@description('Days each decision record stays immutable (no overwrite, no delete) after its blob was last appended to.')
@minValue(1)
@maxValue(146000)
param predictionRetentionDays int = 180

@description('Event Grid system topic name for the account.')
param systemTopicName string

@description('Principal of the runtime identity.')
param appPrincipalId string

var blobDataOwnerRoleId = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
var blobDataReaderRoleId = '2a2b9908-6ea1-4ae2-8e65-a410df84e7d1'
var blobDataContributorRoleId = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
var queueDataContributorRoleId = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var tableDataContributorRoleId = '0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3'

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: 'Standard_ZRS'
  }
  /* Justified checkov skips:
    checkov:skip=CKV_AZURE_59: public endpoint kept because the environment has no VNet (see docs/deploy.md); shared-key and anonymous access are off, so only Entra principals with a data role get in.
    checkov:skip=CKV_AZURE_35: no VNet in this template (Container Apps egress is not a fixed subnet); exposure is limited by shared-key access being off, so only Entra principals with a data role get in.
    checkov:skip=CKV_AZURE_206: ZRS survives a zone loss; the data (model files, host leases) is rebuilt from the release pipeline, so geo-replication is not worth its cost.
  */
  properties: {
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: 'Allow'
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
  properties: {
    // NOTE: versioning keeps every uploaded model, so a bad version rolls back by
    // promoting the previous blob version; soft delete guards against deletes.
    isVersioningEnabled: true
    deleteRetentionPolicy: {
      enabled: true
      days: 7
    }
    containerDeleteRetentionPolicy: {
      enabled: true
      days: 7
    }
  }
}

resource modelsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: modelsContainerName
  properties: {
    publicAccess: 'None'
  }
}

// The prediction log: a record of every decision, appended and never rewritten. A container-level
// time-based retention policy (WORM) lets a client create blobs and, with allowProtectedAppendWrites,
// append blocks to an append blob, but refuses an overwrite or a delete of any blob until
// `predictionRetentionDays` after its last append: that holds for every principal, the app's identity
// (the writer, Blob Data Contributor on this container) and any account-wide role included. The policy is left unlocked: locking it is an
// operator's irreversible decision (it can then only be extended, and the account cannot be deleted
// while the container holds it: docs/platform.md P43). Point-in-time restore and last-access tracking are
// incompatible with immutable storage and stay off on this account (P43).
resource predictionsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: predictionsContainerName
  properties: {
    publicAccess: 'None'
  }
}

resource predictionsWorm 'Microsoft.Storage/storageAccounts/blobServices/containers/immutabilityPolicies@2023-05-01' = {
  parent: predictionsContainer
  name: 'default'
  properties: {
    immutabilityPeriodSinceCreationInDays: predictionRetentionDays
    allowProtectedAppendWrites: true
  }
}

// The log's end: a lifecycle rule deletes a log blob one day after its WORM retention ran out (the
// retention counts from a blob's last append; so does `daysAfterModificationGreaterThan`), so the log
// keeps decisions for `predictionRetentionDays` and no longer (docs/platform.md P68,
// tests/infra/test_log_retention.py). This account has no other lifecycle rule.
resource predictionsLifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  parent: account
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'prediction-log-retention'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'appendBlob'
              ]
              prefixMatch: [
                '${predictionsContainerName}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: predictionRetentionDays + 1
                }
              }
            }
          }
        }
      ]
    }
  }
}

// The writer's own grant, on the predictions container only. The role's data actions include delete;
// the WORM policy above is what refuses it.
resource predictionsWriter 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(predictionsContainer.id, appPrincipalId, blobDataContributorRoleId)
  scope: predictionsContainer
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataContributorRoleId)
  }
}

// Least privilege for the runtime identity (the app's code and the Functions host share it):
// - models: Blob Data Reader on the `models` container only. It reads model files; it can neither
//   write nor overwrite one, so nothing running in a replica can publish a model (docs/models.md).
//   The Blob trigger's connection reads the blob; its poison queue needs the Queue role below.
// - the host's own blobs: Blob Data Owner on the two containers the host uses (leases and
//   blob-trigger receipts in azure-webjobs-hosts, its keys in azure-webjobs-secrets), declared here
//   so the role has a scope narrower than the account; never Owner on the account, which would
//   cover every container (models and the prediction log included).
// - Queue Data Contributor (blob-trigger queues, poison queue) and Table Data Contributor (host
//   diagnostic events) on the account, as the Functions docs list (docs/platform.md).
resource hostLeasesContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: 'azure-webjobs-hosts'
  properties: {
    publicAccess: 'None'
  }
}

resource hostKeysContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: 'azure-webjobs-secrets'
  properties: {
    publicAccess: 'None'
  }
}

resource hostLeasesOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(hostLeasesContainer.id, appPrincipalId, blobDataOwnerRoleId)
  scope: hostLeasesContainer
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataOwnerRoleId)
  }
}

resource hostKeysOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(hostKeysContainer.id, appPrincipalId, blobDataOwnerRoleId)
  scope: hostKeysContainer
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataOwnerRoleId)
  }
}

resource modelsReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(modelsContainer.id, appPrincipalId, blobDataReaderRoleId)
  scope: modelsContainer
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', blobDataReaderRoleId)
  }
}

resource queueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, queueDataContributorRoleId)
  scope: account
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', queueDataContributorRoleId)
  }
}

resource tableContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, tableDataContributorRoleId)
  scope: account
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', tableDataContributorRoleId)
  }
}

resource systemTopic 'Microsoft.EventGrid/systemTopics@2022-06-15' = {
  name: systemTopicName
  location: location
  tags: tags
  properties: {
    source: account.id
    topicType: 'Microsoft.Storage.StorageAccounts'
  }
}

output name string = account.name
output id string = account.id
output blobEndpoint string = account.properties.primaryEndpoints.blob
output queueEndpoint string = account.properties.primaryEndpoints.queue
output tableEndpoint string = account.properties.primaryEndpoints.table
output modelsContainerName string = modelsContainer.name
output predictionsContainerName string = predictionsContainer.name
output systemTopicName string = systemTopic.name
