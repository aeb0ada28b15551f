// Fraud-scoring service on Azure Container Apps (Functions, Python v2), resource-group scope.
//
//   azd up                                   (azure.yaml; parameters from main.parameters.json)
//   az deployment group create -g <rg> -f infra/main.bicep -p environmentName=<name>
//
// Identity-only: no key, password or connection string is created, passed or output.
// Module map:
//   monitoring   Log Analytics + Application Insights
//   identity     runtime identity + platform identity (image pull, KEDA scaler)
//   registry     Azure Container Registry (AcrPull for the platform identity)
//   storage      host storage + `models` container + `predictions` (WORM, the prediction log) + Event Grid system topic
//   servicebus   namespace + payments / risk-completed / risk-rejected
//   redis        Azure Managed Redis (volatile-lru, TLS, Entra auth); a second one, NoEviction,
//                for Feast's online store when deployFeastRedis (docs/capacity.md)
//   openai       optional Azure OpenAI account + deployment
//   environment  Container Apps environment with workload profiles (GPU optional)
//   app          the Functions container app, probes, KEDA rules, app settings
//   alerts       p99, 5xx, dead letters, queue depth/size/age, throttling, replicas at max, drift

@description('Short environment name, used to derive resource names (azd: AZURE_ENV_NAME).')
@minLength(2)
@maxLength(20)
param environmentName string

@description('Azure region for every resource.')
param location string = resourceGroup().location

@description('Image to run; empty on the first provision (azd sets it on deploy).')
param containerImage string = ''

@description('Sizing profile (docs/capacity.md, "Profiles"): dev, the development default (cheap: 2 replicas at rest); sale, production through the seed\'s flash sale (10,000 events/s, 3x within a minute), sized by `make capacity` (azd env set SCORING_PROFILE sale).')
@allowed([
  'dev'
  'sale'
])
param scoringProfile string = 'dev'

@description('Minimum replicas; 0: the profile\'s. At least 2 either way (bursts and replica loss).')
@minValue(0)
param minReplicas int = 0

@description('Maximum replicas; 0: the profile\'s.')
@minValue(0)
@maxValue(1000)
param maxReplicas int = 0

@description('HTTP scale rule: requests per second per replica (Container Apps reads it as a rate over 15 s: docs/platform.md); 0: the profile\'s.')
@minValue(0)
param httpConcurrentRequests int = 0

@description('Service Bus scale rule: active messages per replica; 0: the profile\'s.')
@minValue(0)
param queueMessagesPerReplica int = 0

@description('Sale calendar: a JSON array of windows, each {"start": "2026-12-11T08:50", "end": "2026-12-11T11:00", "timezone": "Europe/London", "replicas": 19} (local times in an IANA zone); each becomes a KEDA cron rule holding that many replicas from start to end. Empty: none. An array, not a string: azd (>= 1.23.4) parses an array parameter\'s azd value as JSON, while it pastes a string parameter\'s value into the parameters file unescaped (docs/platform.md P84). Checked before provision by infra/hooks/sale_calendar.py (docs/deploy.md, "A sale known in advance").')
param saleCalendar array = []

@description('vCPU per replica (CPU profile).')
param replicaCpu string = '2.0'

@description('Memory per replica (CPU profile).')
param replicaMemory string = '4Gi'

@description('Dedicated workload profile type for the scoring pool.')
param dedicatedProfileType string = 'D8'

@description('Run on a serverless GPU profile (needs the GPU image build, docs/gpu.md).')
param enableGpu bool = false

@description('Keep the dedicated CPU pool while the app runs on the GPU: true for the deployment that moves the app to the GPU; false afterwards stops its billing (docs/deploy.md).')
param keepCpuPool bool = true

@description('Keep the GPU profile while the app runs on CPU: true for the deployment that moves the app off the GPU (docs/deploy.md).')
param keepGpuProfile bool = false

@description('Serverless GPU profile type.')
@allowed([
  'Consumption-GPU-NC8as-T4'
  'Consumption-GPU-NC24-A100'
])
param gpuProfileType string = 'Consumption-GPU-NC8as-T4'

@description('Service Bus tier.')
@allowed([
  'Standard'
  'Premium'
])
param serviceBusSku string = 'Premium'

@description('Service Bus Premium messaging units.')
param serviceBusMessagingUnits int = 1

@description('Azure Managed Redis SKU.')
param redisSku string = 'Balanced_B5'

@description('Feast project whose online store the user features come from; empty: the native layout (README, Using a Feast online store).')
param feastProject string = ''

@description('Deploy a second Azure Managed Redis (NoEviction) for Feast\'s online store and point FEAST_REDIS_URL at it (docs/capacity.md, Feast\'s online store and eviction).')
param deployFeastRedis bool = false

@description('Azure Managed Redis SKU of the Feast online store (deployFeastRedis).')
param feastRedisSku string = 'Balanced_B5'

@description('rediss:// URL of an existing Feast online store when deployFeastRedis is false; empty: the cache Redis.')
param feastRedisUrl string = ''

@description('Deploy an Azure OpenAI account and deployment for the uncertain tail.')
param deployOpenAi bool = false

@description('Region for Azure OpenAI (model availability differs by region).')
param openAiLocation string = location

@description('Azure OpenAI model.')
param openAiModelName string = 'gpt-4o-mini'

@description('Azure OpenAI model version.')
param openAiModelVersion string = '2024-07-18'

@description('Email for alerts; empty for none.')
param alertEmail string = ''

@description('Container registry SKU.')
@allowed([
  'Standard'
  'Premium'
])
param registrySku string = 'Standard'

@description('Key of the prediction log\'s keyed hash of event ids (PREDICTION_LOG_HASH_KEY): whoever holds it can join chargebacks to decisions. Never a value in a template or a parameters file: azd generates it once per environment (crypto-random, 48 characters) and keeps it in .azure/<env>/config.json, reusing it on every later provision (docs/platform.md P71); `az deployment` callers pass their own.')
@secure()
@minLength(32)
@maxLength(64)
@metadata({
  azd: {
    type: 'generate'
    config: {
      length: 48
      noSpecial: true
    }
  }
})
param predictionLogHashKey string

var token = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName))
var prefix = toLower('${environmentName}')
var tags = {
  'azd-env-name': environmentName
  service: 'fraud-scoring'
}
var gpuCpu = gpuProfileType == 'Consumption-GPU-NC8as-T4' ? '8.0' : '24.0'
var gpuMemory = gpuProfileType == 'Consumption-GPU-NC8as-T4' ? '56Gi' : '220Gi'
var inputQueueName = 'payments'
var queueMaxSizeInMegabytes = 5120
var replicasPerNode = 3

// The sizing profiles. `sale` is what `make capacity` (--profile sale --write) computes from the
// measured service times (bench/flashsale/measured.json); tests/bench/test_profiles.py reruns it and
// fails on drift. `dev` is the development default: the same thresholds on a cheap fleet.
var profiles = {
  dev: {
    minReplicas: 2
    maxReplicas: 12
    httpConcurrentRequests: 1490
    queueMessagesPerReplica: 32
    saleReplicas: 12
    saleLeadMinutes: 10
  }
  sale: {
    minReplicas: 9
    maxReplicas: 26
    httpConcurrentRequests: 1490
    queueMessagesPerReplica: 32
    saleReplicas: 18
    saleLeadMinutes: 10
  }
}
var sizing = profiles[scoringProfile]
var scaleMinReplicas = max(2, minReplicas > 0 ? minReplicas : sizing.minReplicas)
var scaleMaxReplicas = max(scaleMinReplicas, maxReplicas > 0 ? maxReplicas : sizing.maxReplicas)
var scaleHttpRequests = httpConcurrentRequests > 0 ? httpConcurrentRequests : sizing.httpConcurrentRequests
var scaleQueueMessages = queueMessagesPerReplica > 0 ? queueMessagesPerReplica : sizing.queueMessagesPerReplica
var saleWindows = saleCalendar

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  params: {
    location: location
    tags: tags
    logAnalyticsName: 'log-${prefix}-${token}'
    appInsightsName: 'appi-${prefix}-${token}'
    appPrincipalId: identity.outputs.appPrincipalId
  }
}

module identity 'modules/identity.bicep' = {
  name: 'identity'
  params: {
    location: location
    tags: tags
    appIdentityName: 'id-${prefix}-app'
    platformIdentityName: 'id-${prefix}-platform'
  }
}

module registry 'modules/registry.bicep' = {
  name: 'registry'
  params: {
    location: location
    tags: tags
    name: 'cr${token}'
    sku: registrySku
    pullPrincipalId: identity.outputs.platformPrincipalId
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  params: {
    location: location
    tags: tags
    name: take('st${token}', 24)
    systemTopicName: 'evgt-${prefix}-models'
    appPrincipalId: identity.outputs.appPrincipalId
  }
}

module serviceBus 'modules/servicebus.bicep' = {
  name: 'servicebus'
  params: {
    location: location
    tags: tags
    name: 'sb-${prefix}-${token}'
    sku: serviceBusSku
    messagingUnits: serviceBusMessagingUnits
    inputQueueName: inputQueueName
    maxSizeInMegabytes: queueMaxSizeInMegabytes
    workspaceId: monitoring.outputs.workspaceId
    appPrincipalId: identity.outputs.appPrincipalId
    scalerPrincipalId: identity.outputs.platformPrincipalId
  }
}

module redis 'modules/redis.bicep' = {
  name: 'redis'
  params: {
    location: location
    tags: tags
    name: 'redis-${prefix}-${token}'
    sku: redisSku
    appPrincipalId: identity.outputs.appPrincipalId
  }
}

// Feast's online store: one database per Azure Managed Redis cluster, so a cluster of its own,
// NoEviction (its hashes carry a TTL when Feast sets key_ttl_seconds; volatile-lru would
// evict them beside the predictions: P41). Same TLS, Entra-only access and network settings.
module feastRedis 'modules/redis.bicep' = if (deployFeastRedis) {
  name: 'feast-redis'
  params: {
    location: location
    tags: tags
    name: 'redis-${prefix}-feast-${token}'
    sku: feastRedisSku
    appPrincipalId: identity.outputs.appPrincipalId
    evictionPolicy: 'NoEviction'
  }
}

module openAi 'modules/openai.bicep' = if (deployOpenAi) {
  name: 'openai'
  params: {
    location: openAiLocation
    tags: tags
    name: 'oai-${prefix}-${token}'
    modelName: openAiModelName
    modelVersion: openAiModelVersion
    appPrincipalId: identity.outputs.appPrincipalId
  }
}

module environment 'modules/environment.bicep' = {
  name: 'environment'
  params: {
    location: location
    tags: tags
    name: 'cae-${prefix}-${token}'
    workspaceId: monitoring.outputs.workspaceId
    dedicatedProfileType: dedicatedProfileType
    dedicatedMinNodes: (scaleMinReplicas + replicasPerNode - 1) / replicasPerNode
    dedicatedMaxNodes: (scaleMaxReplicas + replicasPerNode - 1) / replicasPerNode
    enableGpu: enableGpu
    keepCpuPool: keepCpuPool
    keepGpuProfile: keepGpuProfile
    gpuProfileType: gpuProfileType
  }
}

module app 'modules/app.bicep' = {
  name: 'app'
  params: {
    location: location
    tags: tags
    name: 'ca-${prefix}-scoring'
    environmentId: environment.outputs.id
    workloadProfileName: environment.outputs.appProfileName
    containerImage: containerImage
    registryServer: registry.outputs.loginServer
    appIdentityId: identity.outputs.appIdentityId
    appClientId: identity.outputs.appClientId
    platformIdentityId: identity.outputs.platformIdentityId
    appInsightsName: monitoring.outputs.appInsightsName
    storageAccountName: storage.outputs.name
    blobEndpoint: storage.outputs.blobEndpoint
    queueEndpoint: storage.outputs.queueEndpoint
    modelsContainerName: storage.outputs.modelsContainerName
    predictionsContainerName: storage.outputs.predictionsContainerName
    serviceBusName: serviceBus.outputs.name
    serviceBusFqdn: serviceBus.outputs.fullyQualifiedNamespace
    inputQueueName: inputQueueName
    redisHost: redis.outputs.hostName
    redisPort: redis.outputs.port
    feastProject: feastProject
    feastRedisUrl: deployFeastRedis ? 'rediss://${feastRedis.outputs.hostName}:${feastRedis.outputs.port}' : feastRedisUrl
    openAiEndpoint: deployOpenAi ? openAi.outputs.endpoint : ''
    openAiDeployment: deployOpenAi ? openAi.outputs.deploymentName : ''
    minReplicas: scaleMinReplicas
    maxReplicas: scaleMaxReplicas
    httpConcurrentRequests: scaleHttpRequests
    queueMessagesPerReplica: scaleQueueMessages
    saleWindows: saleWindows
    cpu: enableGpu ? gpuCpu : replicaCpu
    memory: enableGpu ? gpuMemory : replicaMemory
    useGpu: enableGpu
    // NOTE: ARM's int() takes integer strings only ('2.0' fails): whole cores, at least 1.
    ortIntraOpThreads: enableGpu ? 1 : max(1, int(first(split(replicaCpu, '.'))))
    predictionLogHashKey: predictionLogHashKey
  }
}

module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  params: {
    tags: tags
    prefix: prefix
    location: location
    alertEmail: alertEmail
    appInsightsId: monitoring.outputs.appInsightsId
    workspaceId: monitoring.outputs.workspaceId
    serviceBusId: serviceBus.outputs.id
    inputQueueName: inputQueueName
    queueMaxSizeInMegabytes: queueMaxSizeInMegabytes
    containerAppId: app.outputs.id
    maxReplicas: scaleMaxReplicas
  }
}

// azd reads these into its environment; the post-deploy hook uses them too.
output AZURE_LOCATION string = location
output AZURE_RESOURCE_GROUP string = resourceGroup().name
output AZURE_CONTAINER_REGISTRY_ENDPOINT string = registry.outputs.loginServer
output AZURE_CONTAINER_REGISTRY_NAME string = registry.outputs.name
output AZURE_APP_IDENTITY_CLIENT_ID string = identity.outputs.appClientId
output SERVICE_SCORING_NAME string = app.outputs.name
output SERVICE_SCORING_RESOURCE_ID string = app.outputs.id
// The KEDA scale block (no secret: names, counts and the platform identity's id) that
// infra/hooks/keda-scale-rules.sh PATCHes onto the app with allowScalingRuleOverride.
output SCORING_SCALE object = app.outputs.scale
output SERVICE_SCORING_URI string = 'https://${app.outputs.fqdn}'
output STORAGE_ACCOUNT_NAME string = storage.outputs.name
output MODELS_CONTAINER string = storage.outputs.modelsContainerName
output EVENTGRID_SYSTEM_TOPIC_NAME string = storage.outputs.systemTopicName
output SERVICEBUS_NAMESPACE string = serviceBus.outputs.fullyQualifiedNamespace
output REDIS_HOST string = redis.outputs.hostName
output FEAST_REDIS_HOST string = deployFeastRedis ? feastRedis.outputs.hostName : ''
