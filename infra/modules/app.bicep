// The scoring service: an Azure Functions (Python v2) container on Azure Container Apps
// (kind 'functionapp'). Scaling is ours, not the platform's trigger mapping, but the
// documented way to say so is a PATCH on the existing app: this template creates the app
// with replica bounds only, and outputs `scale` (allowScalingRuleOverride + the three KEDA
// rules below), which infra/hooks/keda-scale-rules.sh PATCHes in after provision and
// after every deploy (idempotent; order in docs/deploy.md). Each platform behaviour this
// relies on is a row of docs/platform.md.
//
// Every setting the code reads (shared/settings.py APP_SETTING_NAMES) is set here;
// tests/infra checks that. Connections are identity-based. One secret is held: the prediction
// log's hash key, which azd generates once per environment (main.bicep), never a template value.

@description('Azure region.')
param location string

@description('Resource tags (the azd service tag is added here).')
param tags object

@description('Container App name.')
param name string

@description('When the daily outcomes report runs (function outcomes_report): NCRONTAB, six fields with seconds, UTC.')
param outcomesReportSchedule string = '0 30 2 * * *'

@description('azd service name (azure.yaml) this app deploys.')
param serviceName string = 'scoring'

@description('Container Apps environment id.')
param environmentId string

@description('Workload profile the app runs on.')
param workloadProfileName string

@description('Image to run. Empty on the first provision: a placeholder runs until `azd deploy` pushes the real image.')
param containerImage string = ''

@description('Registry login server.')
param registryServer string

@description('Runtime identity resource id.')
param appIdentityId string

@description('Runtime identity client id.')
param appClientId string

@description('Platform identity resource id (image pull + KEDA scaler only).')
param platformIdentityId string

@description('Application Insights component name (same resource group).')
param appInsightsName string

@description('Storage account name (Functions host storage + models).')
param storageAccountName string

@description('Storage blob endpoint.')
param blobEndpoint string

@description('Storage queue endpoint.')
param queueEndpoint string

@description('Blob container with the models.')
param modelsContainerName string

@description('Blob container of the prediction log, in the same storage account (WORM: storage.bicep).')
param predictionsContainerName string = 'predictions'

@description('Service Bus namespace name (the scaler needs the short name).')
param serviceBusName string

@description('Service Bus FQDN.')
param serviceBusFqdn string

@description('Queue the Service Bus trigger reads.')
param inputQueueName string = 'payments'

@description('Queue of outcomes learned later (the risk_outcomes trigger); its own KEDA rule.')
param outcomesQueueName string = 'risk-outcomes'

@description('Outcome messages per replica before KEDA adds one (an outcome is a line written, not a model run).')
param outcomeMessagesPerReplica int = 5000

@description('Redis host name.')
param redisHost string

@description('Redis TLS port.')
param redisPort int

@description('Azure OpenAI endpoint; empty when Azure OpenAI is not deployed.')
param openAiEndpoint string = ''

@description('Azure OpenAI deployment name.')
param openAiDeployment string = ''

@description('Minimum replicas: at least 2 to absorb bursts and survive a replica loss.')
@minValue(2)
param minReplicas int = 2

@description('Maximum replicas (see docs/capacity.md).')
@minValue(2)
@maxValue(1000)
param maxReplicas int = 12

@description('HTTP scale rule: concurrent requests per replica (docs/capacity.md).')
@minValue(1)
param httpConcurrentRequests int = 14

@description('Service Bus scale rule: active messages per replica (docs/capacity.md).')
@minValue(1)
param queueMessagesPerReplica int = 100

@description('Sale windows (main.bicep saleCalendar, parsed): each becomes a KEDA cron rule.')
param saleWindows array = []

@description('vCPU per replica.')
param cpu string = '2.0'

@description('Memory per replica.')
param memory string = '4Gi'

@description('Run ONNX Runtime on the GPU (the image must be the GPU build, docs/gpu.md).')
param useGpu bool = false

@description('ONNX Runtime intra-op threads (match the replica vCPU on CPU).')
param ortIntraOpThreads int = 2

@description('Local features file; empty in Azure (features come from Redis).')
param featuresFile string = ''

@description('Prefix for every Redis key (lets environments share a cache).')
param redisKeyPrefix string = ''

@description('Feast project whose Redis online store the user features come from; empty: the native layout (README, Using a Feast online store).')
param feastProject string = ''

@description('rediss:// URL of the Feast online store; empty: the cache Redis. Give Feast a Redis of its own when it sets key_ttl_seconds (docs/capacity.md).')
param feastRedisUrl string = ''

@description('Log level of the service.')
@allowed([
  'DEBUG'
  'INFO'
  'WARNING'
  'ERROR'
])
param logLevel string = 'INFO'

@description('Port of the Open Inference Protocol (V2) gRPC server in the app process; reachable inside the environment only (docs/deploy.md).')
@minValue(1)
@maxValue(65535)
param grpcPort int = 8001

@description('CPU scale rule: average CPU utilization (%) of the replicas above which one is added. Transport-agnostic: it sees the work on the additional TCP port (V2 gRPC), which the HTTP rule never counts (docs/platform.md P14).')
@minValue(10)
@maxValue(95)
param cpuScaleUtilization int = 70

@description('Host spans (the `requests` table the latency and 5xx alerts read) each replica\'s host exports per second at most: a fixed count keeps p99 meaningful at low load and the ingestion bounded at 10k req/s (docs/platform.md P17).')
param requestsTracesPerSecond string = '5'

@description('Key of the keyed BLAKE2b hash of event ids in the prediction log (PREDICTION_LOG_HASH_KEY): generated once per environment by azd (main.bicep); held as the Container App secret `prediction-log-hash-key`.')
@secure()
@minLength(32)
@maxLength(64)
param predictionLogHashKey string

var placeholderImage = 'mcr.microsoft.com/azure-functions/python:4-python3.11'
var isPlaceholder = empty(containerImage)
var image = isPlaceholder ? placeholderImage : containerImage
var port = 80

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

// Functions host + identity-based connections. A connection named X is read from
// X__fullyQualifiedNamespace / X__blobServiceUri, with X__credential and X__clientId
// selecting the user-assigned identity.
var hostSettings = [
  { name: 'FUNCTIONS_WORKER_RUNTIME', value: 'python' }
  { name: 'FUNCTIONS_EXTENSION_VERSION', value: '~4' }
  { name: 'AZURE_CLIENT_ID', value: appClientId }
  { name: 'AzureWebJobsStorage__accountName', value: storageAccountName }
  { name: 'AzureWebJobsStorage__credential', value: 'managedidentity' }
  { name: 'AzureWebJobsStorage__clientId', value: appClientId }
  { name: 'ServiceBusConnection__fullyQualifiedNamespace', value: serviceBusFqdn }
  { name: 'ServiceBusConnection__credential', value: 'managedidentity' }
  { name: 'ServiceBusConnection__clientId', value: appClientId }
  { name: 'ModelStorage__blobServiceUri', value: blobEndpoint }
  { name: 'OUTCOMES_REPORT_SCHEDULE', value: outcomesReportSchedule } // the outcomes_report timer's NCRONTAB (the host reads it, not the app)
  { name: 'ModelStorage__queueServiceUri', value: queueEndpoint }
  { name: 'ModelStorage__credential', value: 'managedidentity' }
  { name: 'ModelStorage__clientId', value: appClientId }
  { name: 'APPLICATIONINSIGHTS_CONNECTION_STRING', value: appInsights.properties.ConnectionString }
  { name: 'APPLICATIONINSIGHTS_AUTHENTICATION_STRING', value: 'Authorization=AAD;ClientId=${appClientId}' }
  // host.json telemetryMode OpenTelemetry: the worker attaches each invocation's trace context
  // and streams its own logs (the host does not copy them); the app configures the exporter once.
  { name: 'PYTHON_ENABLE_OPENTELEMETRY', value: 'true' }
  // The host's own spans (the `requests` table) are sampled by its Azure Monitor exporter from
  // these two (host 4.1048.100+, azure-functions-host#11568); host.json's
  // logging.applicationInsights is not read in OpenTelemetry mode (docs/platform.md P16, P17).
  { name: 'OTEL_TRACES_SAMPLER', value: 'microsoft.rate_limited' }
  { name: 'OTEL_TRACES_SAMPLER_ARG', value: requestsTracesPerSecond }
  // One worker process per replica: the warm sessions, caches and batchers are per process, and
  // the gRPC port can be bound once (docs/capacity.md). Scale with replicas.
  { name: 'FUNCTIONS_WORKER_PROCESS_COUNT', value: '1' }
  // The host refuses a larger body (413) before buffering it for the worker; the app's largest cap is a
  // batch's or a V2 request's, MAX_BODY_BYTES x 16 (docs/platform.md P65; tests/infra/test_edges.py).
  { name: 'FUNCTIONS_REQUEST_BODY_SIZE_LIMIT', value: '1048576' }
]

// shared/settings.py APP_SETTING_NAMES, one entry each (values are strings).
var serviceSettings = [
  { name: 'REDIS_URL', value: 'rediss://${redisHost}:${redisPort}' }
  { name: 'REDIS_USE_ENTRA', value: 'true' }
  { name: 'REDIS_KEY_PREFIX', value: redisKeyPrefix }
  { name: 'MODELS_DIR', value: '/home/site/wwwroot/models' }
  { name: 'MODELS_CONTAINER', value: modelsContainerName }
  { name: 'MODEL_POLL_SECONDS', value: '5' } // the safety net behind the Redis announcement of a new version
  { name: 'DEFAULT_MODEL', value: 'fraud' }
  { name: 'FEATURES_FILE', value: featuresFile }
  { name: 'FEATURE_STORE', value: empty(feastProject) ? 'native' : 'feast' }
  { name: 'FEAST_PROJECT', value: feastProject }
  { name: 'FEAST_REDIS_URL', value: feastRedisUrl } // empty = unset: REDIS_URL
  { name: 'BATCH_WINDOW_MS', value: '5' }
  { name: 'BATCH_MAX_SIZE', value: '8' }
  { name: 'CACHE_L1_SIZE', value: '50000' }
  { name: 'CACHE_L1_TTL_S', value: '30' }
  { name: 'CACHE_L2_TTL_S', value: '3600' } // > 0: under volatile-lru only predictions are evictable, never features
  { name: 'FEATURES_L1_SIZE', value: '100000' }
  { name: 'FEATURES_L1_TTL_S', value: '5' }
  { name: 'REDIS_TIMEOUT_MS', value: '50' }
  { name: 'PREDICTION_L2', value: 'auto' }
  { name: 'ORT_INTRA_OP_THREADS', value: string(ortIntraOpThreads) }
  { name: 'ORT_USE_GPU', value: useGpu ? 'true' : 'false' }
  { name: 'ORT_USE_TENSORRT', value: 'false' }
  { name: 'ORT_REQUIRE_GPU', value: useGpu ? 'true' : 'false' } // the CPU image on a GPU profile is not ready
  { name: 'ORT_INLINE', value: useGpu ? 'false' : 'true' } // on a GPU the run leaves the event loop; a second batch forms meanwhile
  { name: 'ORT_RUN_DEADLINE_MS', value: '50' } // a run past it is stopped and its version quarantined (docs/models.md)
  { name: 'ORT_ARENA_MAX_MB', value: '64' } // every model run of a replica shares this capped arena
  { name: 'MAX_BODY_BYTES', value: '65536' }
  { name: 'MAX_BATCH_ITEMS', value: '256' }
  { name: 'MAX_MESSAGE_BYTES', value: '262144' }
  { name: 'RESULT_TTL_S', value: '3600' } // > the queues' duplicate-detection window (servicebus.bicep)
  { name: 'EVENT_MAX_AGE_S', value: '3300' } // the idempotency window: RESULT_TTL_S less 300 s of clock skew
  { name: 'QUEUE_BATCH_BUDGET_MS', value: '60000' } // + the host's settling < the payments lock (servicebus.bicep): nothing renews a batch's locks
  { name: 'MAX_MODEL_BYTES', value: '268435456' }
  { name: 'BODY_TIMEOUT_MS', value: '5000' }
  { name: 'MAX_INFLIGHT', value: '16' }
  { name: 'MAX_QUEUED', value: '64' }
  { name: 'MAX_QUEUE_WAIT_MS', value: '20' }
  { name: 'QUEUE_TARGET_MS', value: '5' }
  { name: 'REQUEST_TIMEOUT_MS', value: '2000' }
  { name: 'MODELS_KEEP_VERSIONS', value: '2' }
  { name: 'GC_GEN0_THRESHOLD', value: '50000' }
  { name: 'LOG_LEVEL', value: logLevel }
  { name: 'ANSWER_DEFAULTED', value: 'false' } // no enumeration through the data plane (docs/security.md)
  // The review of the uncertain tail (inert until AZURE_OPENAI_ENDPOINT is set, below).
  { name: 'LLM_BAND_LOW', value: '0.45' }
  { name: 'LLM_BAND_HIGH', value: '0.75' }
  { name: 'LLM_REVIEW_NOTES', value: 'true' }
  { name: 'LLM_REVIEW_MAY_LOWER', value: 'false' } // a review only escalates (docs/reliability.md)
  { name: 'LLM_REVIEW_DETAIL', value: 'false' } // answers carry the decision, not the reviewer's working
  { name: 'LLM_TIMEOUT_MS', value: '150' } // the HTTP path's wait; the p99 budget is 50 ms for the rest
  { name: 'LLM_QUEUE_TIMEOUT_MS', value: '5000' } // well inside QUEUE_BATCH_BUDGET_MS; never past the batch's budget
  { name: 'LLM_CALL_TIMEOUT_MS', value: '10000' }
  { name: 'LLM_MAX_RPS', value: '20' } // per replica (openai.bicep sizes the deployment's tokens/min)
  { name: 'LLM_MAX_SHARE', value: '0.25' }
  { name: 'REVIEW_TTL_S', value: '86400' }
  { name: 'TELEMETRY', value: 'true' }
  { name: 'TRACE_SAMPLE_RATIO', value: '0.01' }
  { name: 'GRPC_PORT', value: string(grpcPort) } // the V2 gRPC server in the same process (ingress below)
  // NOTE: empty = every gRPC call is refused (UNAUTHENTICATED) until an operator sets the keys as a
  // Container App secret (docs/deploy.md, "Keys"): a key is a secret, and this template holds none.
  { name: 'GRPC_KEYS', value: '' }
  { name: 'GRPC_MAX_CONCURRENT', value: '64' } // calls at once; the next are RESOURCE_EXHAUSTED
  { name: 'GRPC_STREAM_MAX_IN_FLIGHT', value: '16' } // events one ScoreStream call holds at once (issue 56's default)
  { name: 'GRPC_STREAM_IDLE_MS', value: '300000' } // a ScoreStream silent this long is ended (stream_idle): its call slot freed
  { name: 'GRPC_MAX_CONNECTION_AGE_MS', value: '120000' } // the port is balanced by connection (docs/platform.md P93): aged ones reconnect, onto new replicas too
  { name: 'GRPC_MAX_CONNECTION_AGE_GRACE_MS', value: '30000' } // calls of an aged connection may run this much longer
  // The record of every decision: hourly append blobs in the WORM `predictions` container (storage.bicep).
  { name: 'PREDICTION_LOG', value: 'blob' }
  { name: 'PREDICTION_LOG_DIR', value: '' } // PREDICTION_LOG=dir only
  { name: 'PREDICTION_LOG_CONTAINER', value: predictionsContainerName }
  { name: 'PREDICTION_LOG_SAMPLE', value: '1' }
  { name: 'PREDICTION_LOG_REASONS', value: 'false' } // reason codes on `?explain=1` answers only
  // NOTE: a secret (generated once per environment: main.bicep), never a value in the template.
  { name: 'PREDICTION_LOG_HASH_KEY', secretRef: 'prediction-log-hash-key' }
  // Shadow scoring, the sticky canary and its automatic abort.
  { name: 'CANARY_WINDOW', value: '1000' }
  { name: 'CANARY_MIN_EVENTS', value: '200' }
  { name: 'CANARY_MAX_DECLINE_DELTA', value: '0.05' }
  { name: 'CANARY_MAX_ERROR_DELTA', value: '0.01' }
  // Drift per version (the drift alerts: alerts.bicep) and reason codes.
  { name: 'DRIFT_SAMPLE', value: '0.1' }
  { name: 'DRIFT_REFERENCE', value: '2000' }
  { name: 'DRIFT_WINDOW', value: '2000' }
  { name: 'DRIFT_BINS', value: '10' }
]

var openAiSettings = [
  { name: 'AZURE_OPENAI_ENDPOINT', value: openAiEndpoint }
  { name: 'AZURE_OPENAI_DEPLOYMENT', value: openAiDeployment }
]

var env = concat(hostSettings, serviceSettings, empty(openAiEndpoint) ? [] : openAiSettings)

// Startup gives the first model load up to 2 minutes (on the function route: the worker has
// indexed and answers). Liveness restarts a replica whose host stopped answering: it asks the
// host's own `/admin/host/ping`, anonymous and outside the host's HTTP throttle (admin paths
// skip it), so overload (429 past maxOutstandingRequests) never restarts replicas at peak
// (docs/platform.md P8, P9). Readiness takes a replica out of rotation until its model is
// loaded and warm, and while a GPU it requires is missing (ORT_REQUIRE_GPU).
var probes = [
  {
    type: 'Startup'
    httpGet: {
      path: '/api/health/live'
      port: port
    }
    initialDelaySeconds: 2
    periodSeconds: 2
    failureThreshold: 60
    timeoutSeconds: 2
  }
  {
    type: 'Liveness'
    httpGet: {
      path: '/admin/host/ping'
      port: port
    }
    periodSeconds: 10
    failureThreshold: 3
    timeoutSeconds: 2
  }
  {
    type: 'Readiness'
    httpGet: {
      path: '/api/health/ready'
      port: port
    }
    periodSeconds: 5
    failureThreshold: 2
    successThreshold: 1
    timeoutSeconds: 2
  }
]

// A sale known in advance: one KEDA cron rule per window of the calendar (main.bicep saleCalendar),
// holding `replicas` from `start` to `end` in `timezone` (docs/platform.md P80). The local times
// "YYYY-MM-DDTHH:MM" become cron's "minute hour day month *" (infra/hooks/sale_calendar.py checks
// them first and makes the same strings; tests/infra/test_sale_calendar.py holds the two together).
var saleRules = [for (window, i) in saleWindows: {
  name: 'sale-window-${i}'
  custom: {
    type: 'cron'
    metadata: {
      timezone: window.timezone
      start: '${int(substring(window.start, 14, 2))} ${int(substring(window.start, 11, 2))} ${int(substring(window.start, 8, 2))} ${int(substring(window.start, 5, 2))} *'
      end: '${int(substring(window.end, 14, 2))} ${int(substring(window.end, 11, 2))} ${int(substring(window.end, 8, 2))} ${int(substring(window.end, 5, 2))} *'
      desiredReplicas: string(window.replicas)
    }
  }
}]

var baseRules = [
  {
    name: 'payments-queue-depth'
    custom: {
      type: 'azure-servicebus'
      // NOTE: KEDA authenticates with the platform identity (Data Owner on this queue
      // only); no connection string or secret is involved.
      identity: platformIdentityId
      metadata: {
        namespace: serviceBusName
        queueName: inputQueueName
        messageCount: string(queueMessagesPerReplica)
      }
    }
  }
  {
    // NOTE: outcomes come in bursts (a day's chargebacks at once): a backlog adds replicas, never the floor
    name: 'outcomes-queue-depth'
    custom: {
      type: 'azure-servicebus'
      identity: platformIdentityId
      metadata: {
        namespace: serviceBusName
        queueName: outcomesQueueName
        messageCount: string(outcomeMessagesPerReplica)
      }
    }
  }
  {
    name: 'http-concurrency'
    http: {
      metadata: {
        concurrentRequests: string(httpConcurrentRequests)
      }
    }
  }
  {
    // NOTE: the HTTP rule counts requests through the ingress's main port only; V2 gRPC arrives
    // on an additional TCP port, which it never sees. CPU sees every port's work.
    name: 'cpu-all-ports'
    custom: {
      type: 'cpu'
      metadata: {
        type: 'Utilization'
        value: string(cpuScaleUtilization)
      }
    }
  }
]

var scaleRules = concat(baseRules, saleRules)

resource app 'Microsoft.App/containerApps@2026-07-01' = {
  name: name
  location: location
  tags: union(tags, { 'azd-service-name': serviceName })
  kind: 'functionapp'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${appIdentityId}': {}
      '${platformIdentityId}': {}
    }
  }
  properties: {
    environmentId: environmentId
    workloadProfileName: workloadProfileName
    configuration: {
      activeRevisionsMode: 'Single'
      // NOTE: the one secret; azd's deploy carries it over (it reads the values back: docs/platform.md P72).
      secrets: [
        {
          name: 'prediction-log-hash-key'
          value: predictionLogHashKey
        }
      ]
      // Runtime containers may use only the app identity; the platform identity serves
      // image pulls and the scaler.
      identitySettings: [
        {
          identity: appIdentityId
          lifecycle: 'Main'
        }
        {
          identity: platformIdentityId
          lifecycle: 'None'
        }
      ]
      ingress: {
        external: true
        targetPort: port
        transport: 'auto'
        allowInsecure: false
        // V2 gRPC (GRPC_PORT): a port of the worker process, internal to the environment. The
        // Functions host never sees it, so no function key guards it: the network does
        // (docs/deploy.md).
        additionalPortMappings: [
          {
            external: false
            targetPort: grpcPort
            exposedPort: grpcPort
          }
        ]
      }
      registries: [
        {
          server: registryServer
          identity: platformIdentityId
        }
      ]
    }
    template: {
      containers: [
        {
          name: 'scoring'
          image: image
          env: env
          probes: isPlaceholder ? [] : probes
          resources: {
            cpu: json(cpu)
            memory: memory
          }
        }
      ]
      // NOTE: no allowScalingRuleOverride and no rules here: Learn documents the override only as
      // a PATCH on an existing app (docs/platform.md P11), which the hooks send (output below).
      scale: {
        minReplicas: minReplicas
        maxReplicas: maxReplicas
      }
    }
  }
}

output id string = app.id
output name string = app.name
output fqdn string = app.properties.configuration.ingress.fqdn

@description('The scale block infra/hooks/keda-scale-rules.sh PATCHes onto the app.')
output scale object = {
  allowScalingRuleOverride: true
  minReplicas: minReplicas
  maxReplicas: maxReplicas
  rules: scaleRules
}
