// Service Bus namespace with the scoring queues. Local (SAS) auth is disabled: the
// Functions trigger/outputs and the KEDA scaler authenticate with managed identities.
//
// Partitioning decision (see docs/capacity.md): queues are NOT partitioned.
// A partitioned queue splits its quota across fragments; skewed partition keys fill
// one fragment and sends fail with QuotaExceeded while the queue looks half empty
// ("partition exhaustion"). Throughput is scaled with Premium messaging units instead;
// `premiumPartitions` > 1 is reserved for a measured broker bottleneck, and the
// Size / ThrottledRequests alerts in alerts.bicep watch for the symptom either way.

@description('Azure region.')
param location string

@description('Resource tags.')
param tags object

@description('Namespace name.')
param name string

@description('Tier. Premium gives predictable latency (dedicated messaging units).')
@allowed([
  'Standard'
  'Premium'
])
param sku string = 'Premium'

@description('Premium messaging units (1, 2, 4, 8 or 16).')
@allowed([
  1
  2
  4
  8
  16
])
param messagingUnits int = 1

@description('Premium namespace partitions (1 = not partitioned). Fixed at creation.')
@allowed([
  1
  2
  4
])
param premiumPartitions int = 1

@description('Queue the scoring trigger reads.')
param inputQueueName string = 'payments'

@description('Queue of outcomes learned later (chargebacks, reviews): the risk_outcomes trigger reads it.')
param outcomesQueueName string = 'risk-outcomes'

@description('How long an outcome waits for the app (a chargeback is no less true a week later).')
param outcomesTtl string = 'P14D'

@description('Queues the scoring function writes to.')
param outputQueueNames array = [
  'risk-completed'
  'risk-rejected'
]

@description('How long a rejected message (a payment that could not be scored, as it came: user id and note included) waits for its consumers; then it is deleted, never dead-lettered.')
param rejectionTtl string = 'P3D'

@description('The output queue of rejections, which keeps less than the others (rejectionTtl).')
param rejectionQueueName string = 'risk-rejected'

@description('Where the rejection queue\'s dead letters go to expire: a dead-letter queue never observes a TTL and is never cleaned up by itself (docs/platform.md P69).')
param rejectedDeadLettersName string = 'risk-rejected-dead'

@description('Peek-lock duration of the input queue. The trigger is a batch trigger, whose locks nothing renews (docs/platform.md P1): the lock must outlast the whole batch, i.e. QUEUE_BATCH_BUDGET_MS plus the host\'s settling, and functionTimeout (tests/infra checks both). Longer means a crashed replica\'s messages return later.')
param lockDuration string = 'PT2M'

@description('Deliveries before a message is dead-lettered.')
@minValue(1)
@maxValue(100)
param maxDeliveryCount int = 5

@description('Duplicate-detection window: publishers that retry within it are deduplicated by MessageId.')
param duplicateDetectionWindow string = 'PT10M'

@description('Maximum queue size in MB (Standard: up to 5120).')
param maxSizeInMegabytes int = 5120

@description('Log Analytics workspace id: the namespace metrics go there (AzureMetrics), for the new-dead-letters alert.')
param workspaceId string

@description('Principal of the runtime identity (receives payments, sends results).')
param appPrincipalId string

@description('Principal of the platform identity (KEDA scaler).')
param scalerPrincipalId string

var isPremium = sku == 'Premium'
var receiverRoleId = '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
var senderRoleId = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
var ownerRoleId = '090c5cfd-751d-490a-894a-3ce6f1109419'

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: sku
    tier: sku
    capacity: isPremium ? messagingUnits : null
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
    premiumMessagingPartitions: isPremium ? premiumPartitions : null
  }
}

// Metrics to Log Analytics (AzureMetrics): the dead-letter alert compares successive
// DeadletteredMessages values there, so it fires on new dead letters, not on a backlog.
resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'to-log-analytics'
  scope: namespace
  properties: {
    workspaceId: workspaceId
    metrics: [
      {
        category: 'AllMetrics'
        enabled: true
      }
    ]
  }
}

resource inputQueue 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = {
  parent: namespace
  name: inputQueueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: 'P1D'
    enablePartitioning: false
    requiresSession: false
    enableBatchedOperations: true
    maxSizeInMegabytes: maxSizeInMegabytes
  }
}

// Outcomes: the same rules as the input queue (its batch trigger renews no lock either), a longer TTL;
// what is dead-lettered (a batch held past maxDeliveryCount while the store was down) stays to replay.
resource outcomesQueue 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = {
  parent: namespace
  name: outcomesQueueName
  properties: {
    lockDuration: lockDuration
    maxDeliveryCount: maxDeliveryCount
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    deadLetteringOnMessageExpiration: true
    defaultMessageTimeToLive: outcomesTtl
    enablePartitioning: false
    requiresSession: false
    enableBatchedOperations: true
    maxSizeInMegabytes: maxSizeInMegabytes
  }
}

// NOTE: the rejection queue holds raw bodies (user ids, notes): an expired one is deleted, not kept
// in a dead-letter queue that never expires; one its consumers fail on is forwarded to
// `rejectedDeadLetters`, where the same TTL applies (tests/infra/test_rejection_retention.py).
resource outputQueues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = [for queueName in outputQueueNames: {
  parent: namespace
  name: queueName
  properties: {
    lockDuration: 'PT1M'
    maxDeliveryCount: 10
    // NOTE: results are sent with MessageId = the payment event id, so a redelivered
    // payment that is scored twice still yields one result event downstream.
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    deadLetteringOnMessageExpiration: queueName != rejectionQueueName
    defaultMessageTimeToLive: (queueName == rejectionQueueName) ? rejectionTtl : 'P7D'
    forwardDeadLetteredMessagesTo: (queueName == rejectionQueueName) ? rejectedDeadLetters.name : null
    enablePartitioning: false
    requiresSession: false
    enableBatchedOperations: true
    maxSizeInMegabytes: maxSizeInMegabytes
  }
}]

// Runtime identity: receive on the input queue only, send on the output queues only.
// The rejection queue's dead letters, as an ordinary queue: its TTL applies, and what expires is deleted.
resource rejectedDeadLetters 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = {
  parent: namespace
  name: rejectedDeadLettersName
  properties: {
    lockDuration: 'PT1M'
    maxDeliveryCount: 10
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: duplicateDetectionWindow
    deadLetteringOnMessageExpiration: false
    defaultMessageTimeToLive: rejectionTtl
    enablePartitioning: false
    requiresSession: false
    enableBatchedOperations: true
    maxSizeInMegabytes: maxSizeInMegabytes
  }
}

resource inputReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(inputQueue.id, appPrincipalId, receiverRoleId)
  scope: inputQueue
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', receiverRoleId)
  }
}

resource outputSenders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for (queueName, i) in outputQueueNames: {
  name: guid(outputQueues[i].id, appPrincipalId, senderRoleId)
  scope: outputQueues[i]
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', senderRoleId)
  }
}]

// Runtime identity: receive on the outcomes queue only (the rejections it sends go to risk-rejected, above).
resource outcomesReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(outcomesQueue.id, appPrincipalId, receiverRoleId)
  scope: outcomesQueue
  properties: {
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', receiverRoleId)
  }
}

// KEDA reads the queue's runtime properties (active message count), which Service Bus
// only serves to the Manage claim, i.e. Data Owner. It is scoped to the one queue and
// given to the platform identity, which no container can use.
resource scalerOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(inputQueue.id, scalerPrincipalId, ownerRoleId)
  scope: inputQueue
  properties: {
    principalId: scalerPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', ownerRoleId)
  }
}

// The same for the outcomes queue's KEDA rule: Data Owner on that one queue, for the platform identity.
resource outcomesScalerOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(outcomesQueue.id, scalerPrincipalId, ownerRoleId)
  scope: outcomesQueue
  properties: {
    principalId: scalerPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', ownerRoleId)
  }
}

output id string = namespace.id
output name string = namespace.name
output fullyQualifiedNamespace string = '${namespace.name}.servicebus.windows.net'
output inputQueueName string = inputQueue.name
output outcomesQueueName string = outcomesQueue.name
