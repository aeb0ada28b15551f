"""Reviewed tables the infra checks compare against. Each entry says where it came from.

Change a table only with its source open; the checks trust these as ground truth.
"""

from __future__ import annotations

LEARN_ROLES = "https://learn.microsoft.com/azure/role-based-access-control/built-in-roles"

# Built-in roles used in infra/: GUID -> (role name, the Learn page that lists it).
# Cross-checked against the built-in-roles pages (also in their translated copies) and
# against public templates that assign them.
BUILT_IN_ROLES: dict[str, tuple[str, str]] = {
    "7f951dda-4ed3-4680-a7ca-43fe172d538d": ("AcrPull", f"{LEARN_ROLES}/containers#acrpull"),
    "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0": (
        "Azure Service Bus Data Receiver",
        f"{LEARN_ROLES}/integration#azure-service-bus-data-receiver",
    ),
    "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39": (
        "Azure Service Bus Data Sender",
        f"{LEARN_ROLES}/integration#azure-service-bus-data-sender",
    ),
    "090c5cfd-751d-490a-894a-3ce6f1109419": (
        "Azure Service Bus Data Owner",
        f"{LEARN_ROLES}/integration#azure-service-bus-data-owner",
    ),
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b": (
        "Storage Blob Data Owner",
        f"{LEARN_ROLES}/storage#storage-blob-data-owner",
    ),
    "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1": (
        "Storage Blob Data Reader",
        f"{LEARN_ROLES}/storage#storage-blob-data-reader",
    ),
    "ba92f5b4-2d11-453d-a403-e96b0029c9fe": (
        "Storage Blob Data Contributor",
        f"{LEARN_ROLES}/storage#storage-blob-data-contributor",
    ),
    "974c5e8b-45b9-4653-ba55-5f855dd0fb88": (
        "Storage Queue Data Contributor",
        f"{LEARN_ROLES}/storage#storage-queue-data-contributor",
    ),
    "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3": (
        "Storage Table Data Contributor",
        f"{LEARN_ROLES}/storage#storage-table-data-contributor",
    ),
    "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd": (
        "Cognitive Services OpenAI User",
        f"{LEARN_ROLES}/ai-machine-learning#cognitive-services-openai-user",
    ),
    "3913510d-42f4-4e42-8a64-420c390055eb": (
        "Monitoring Metrics Publisher",
        f"{LEARN_ROLES}/monitor#monitoring-metrics-publisher",
    ),
}

# The design's least-privilege grants: identity -> {(role name, scope resource type)}.
# The identity is the module parameter the principal comes in on (app vs platform).
# Source: docs/deploy.md "Role assignments" (the design), Functions identity-based
# connections (https://learn.microsoft.com/azure/azure-functions/functions-reference#connecting-to-host-storage-with-an-identity),
# KEDA azure-servicebus scaler (Manage claim for queue runtime properties),
# Application Insights Entra ingestion (https://learn.microsoft.com/azure/azure-monitor/app/azure-ad-authentication).
EXPECTED_GRANTS: dict[str, set[tuple[str, str]]] = {
    "app": {
        # the host's own containers only (azure-webjobs-hosts, -secrets); which containers: checks/model_roles.py
        ("Storage Blob Data Owner", "Microsoft.Storage/storageAccounts/blobServices/containers"),
        # the models container, read only (storage.bicep `modelsReader`)
        ("Storage Blob Data Reader", "Microsoft.Storage/storageAccounts/blobServices/containers"),
        # the prediction log's writer, on its container only (storage.bicep `predictionsWriter`)
        ("Storage Blob Data Contributor", "Microsoft.Storage/storageAccounts/blobServices/containers"),
        ("Storage Queue Data Contributor", "Microsoft.Storage/storageAccounts"),
        ("Storage Table Data Contributor", "Microsoft.Storage/storageAccounts"),
        ("Azure Service Bus Data Receiver", "Microsoft.ServiceBus/namespaces/queues"),
        ("Azure Service Bus Data Sender", "Microsoft.ServiceBus/namespaces/queues"),
        ("Cognitive Services OpenAI User", "Microsoft.CognitiveServices/accounts"),
        ("Monitoring Metrics Publisher", "Microsoft.Insights/components"),
    },
    "platform": {
        ("AcrPull", "Microsoft.ContainerRegistry/registries"),
        ("Azure Service Bus Data Owner", "Microsoft.ServiceBus/namespaces/queues"),
    },
}

# Resource type (lower case) -> (Python package with its REST models, model class of the
# PUT body). The package's versioned subpackages (or its one default version) are the API
# versions it knows; requirements-infra.txt pins the packages. None: no package models it.
RESOURCE_MODELS: dict[str, tuple[str | None, str]] = {
    "microsoft.app/containerapps": ("azure.mgmt.appcontainers", "ContainerApp"),
    "microsoft.app/managedenvironments": ("azure.mgmt.appcontainers", "ManagedEnvironment"),
    "microsoft.insights/components": ("azure.mgmt.applicationinsights", "ApplicationInsightsComponent"),
    "microsoft.insights/actiongroups": ("azure.mgmt.monitor", "ActionGroupResource"),
    "microsoft.insights/metricalerts": ("azure.mgmt.monitor", "MetricAlertResource"),
    "microsoft.insights/scheduledqueryrules": ("azure.mgmt.monitor", "ScheduledQueryRuleResource"),
    "microsoft.insights/diagnosticsettings": (None, "DiagnosticSettingsResource"),
    "microsoft.servicebus/namespaces": ("azure.mgmt.servicebus", "SBNamespace"),
    "microsoft.servicebus/namespaces/queues": ("azure.mgmt.servicebus", "SBQueue"),
    "microsoft.authorization/roleassignments": ("azure.mgmt.authorization", "RoleAssignmentCreateParameters"),
    "microsoft.managedidentity/userassignedidentities": ("azure.mgmt.msi", "Identity"),
    "microsoft.containerregistry/registries": ("azure.mgmt.containerregistry", "Registry"),
    "microsoft.operationalinsights/workspaces": ("azure.mgmt.loganalytics", "Workspace"),
    "microsoft.cognitiveservices/accounts": ("azure.mgmt.cognitiveservices", "Account"),
    "microsoft.cognitiveservices/accounts/deployments": ("azure.mgmt.cognitiveservices", "Deployment"),
    "microsoft.storage/storageaccounts": ("azure.mgmt.storage", "StorageAccountCreateParameters"),
    "microsoft.storage/storageaccounts/blobservices": ("azure.mgmt.storage", "BlobServiceProperties"),
    "microsoft.storage/storageaccounts/blobservices/containers": ("azure.mgmt.storage", "BlobContainer"),
    "microsoft.storage/storageaccounts/blobservices/containers/immutabilitypolicies": (
        "azure.mgmt.storage",
        "ImmutabilityPolicy",
    ),
    "microsoft.storage/storageaccounts/managementpolicies": ("azure.mgmt.storage", "ManagementPolicy"),
    "microsoft.eventgrid/systemtopics": ("azure.mgmt.eventgrid", "SystemTopic"),
    "microsoft.cache/redisenterprise": ("azure.mgmt.redisenterprise", "Cluster"),
    "microsoft.cache/redisenterprise/databases": ("azure.mgmt.redisenterprise", "Database"),
    "microsoft.cache/redisenterprise/databases/accesspolicyassignments": (
        "azure.mgmt.redisenterprise",
        "AccessPolicyAssignment",
    ),
}

# Bodies that reach a resource provider outside a resource declaration: an output that a
# hook PATCHes. (file, output) -> (resource type whose API version and package apply, model).
PATCH_BODIES: dict[tuple[str, str], tuple[str, str]] = {
    ("app.bicep", "scale"): ("microsoft.app/containerapps", "Scale"),  # infra/hooks/keda-scale-rules.sh
}

# KEDA scale-rule metadata keys: the models type `metadata` as a free dict, so a misspelt
# key is silently ignored by the scaler. Sources:
#   https://keda.sh/docs/2.17/scalers/azure-service-bus/
#   https://learn.microsoft.com/azure/container-apps/scale-app#http
KEDA_METADATA: dict[str, frozenset[str]] = {
    "azure-servicebus": frozenset(
        {
            "queueName",
            "topicName",
            "subscriptionName",
            "namespace",
            "messageCount",
            "activationMessageCount",
            "cloud",
            "endpointSuffix",
            "useRegex",
            "operation",
            "connectionFromEnv",
        }
    ),
    "http": frozenset({"concurrentRequests"}),
    # KEDA cpu scaler (docs/platform.md P23): `type` (Utilization | AverageValue; KEDA marks it
    # deprecated for trigger.metricType, which a Container Apps rule has no field for), `value`,
    # `containerName`.
    "cpu": frozenset({"type", "value", "containerName"}),
    # KEDA cron scaler (docs/platform.md P80): all four required.
    "cron": frozenset({"timezone", "start", "end", "desiredReplicas"}),
}

# Some resource types span several operation groups of one package (azure-mgmt-monitor 7
# carries one API version per operation group): the version must be that group's.
OPERATION_GROUPS: dict[str, str] = {
    "microsoft.insights/actiongroups": "_action_groups_operations",
    "microsoft.insights/metricalerts": "_metric_alerts_operations",
    "microsoft.insights/scheduledqueryrules": "_scheduled_query_rules_operations",
}

# (resource type, API version) that no pinned package models: the version is reviewed
# here with its source, and the body is NOT schema-checked (say so in docs/deploy.md).
UNMODELLED_API_VERSIONS: dict[tuple[str, str], str] = {
    ("microsoft.insights/diagnosticsettings", "2021-05-01-preview"): (
        "azure-rest-api-specs specification/monitor/resource-manager/Microsoft.Insights/preview/"
        "2021-05-01-preview/diagnosticsSettings_API.json; azure-mgmt-monitor 6.x v2021_05_01_preview "
        "(7.x dropped diagnostic settings)"
    ),
}

# Platform metrics by resource type (metric alerts and AzureMetrics queries may name only
# these). Source: Learn "Supported metrics" pages:
#   https://learn.microsoft.com/azure/azure-monitor/reference/supported-metrics/microsoft-servicebus-namespaces-metrics
#   https://learn.microsoft.com/azure/azure-monitor/reference/supported-metrics/microsoft-app-containerapps-metrics
METRICS: dict[str, frozenset[str]] = {
    "microsoft.servicebus/namespaces": frozenset(
        {
            "ActiveMessages",
            "DeadletteredMessages",
            "Messages",
            "ScheduledMessages",
            "Size",
            "IncomingMessages",
            "OutgoingMessages",
            "IncomingRequests",
            "SuccessfulRequests",
            "ServerErrors",
            "UserErrors",
            "ThrottledRequests",
            "ActiveConnections",
            "ConnectionsOpened",
            "ConnectionsClosed",
            "NamespaceCpuUsage",
            "NamespaceMemoryUsage",
            "ServerSendLatency",
            "CompleteMessage",
            "AbandonMessage",
        }
    ),
    "microsoft.app/containerapps": frozenset(
        {
            "Replicas",
            "Requests",
            "RestartCount",
            "UsageNanoCores",
            "WorkingSetBytes",
            "CpuPercentage",
            "MemoryPercentage",
            "RxBytes",
            "TxBytes",
            "ResponseTime",
        }
    ),
}

# Bicep built-in functions and namespaces an identifier may name without a declaration.
# Source: https://learn.microsoft.com/azure/azure-resource-manager/bicep/bicep-functions
BICEP_FUNCTIONS = frozenset(
    [
        "any",
        "array",
        "bool",
        "concat",
        "contains",
        "dataUri",
        "dataUriToString",
        "deployer",
        "deployment",
        "empty",
        "endsWith",
        "environment",
        "filter",
        "first",
        "flatten",
        "format",
        "guid",
        "indexOf",
        "int",
        "intersection",
        "items",
        "join",
        "json",
        "last",
        "lastIndexOf",
        "length",
        "lambda",
        "listKeys",
        "loadFileAsBase64",
        "loadJsonContent",
        "loadTextContent",
        "loadYamlContent",
        "managementGroup",
        "managementGroupResourceId",
        "map",
        "max",
        "min",
        "newGuid",
        "objectKeys",
        "padLeft",
        "pickZones",
        "range",
        "readEnvironmentVariable",
        "reduce",
        "reference",
        "replace",
        "resourceGroup",
        "resourceId",
        "shallowMerge",
        "skip",
        "sort",
        "split",
        "startsWith",
        "string",
        "subscription",
        "subscriptionResourceId",
        "substring",
        "take",
        "tenant",
        "tenantResourceId",
        "toLower",
        "toObject",
        "toUpper",
        "trim",
        "union",
        "uniqueString",
        "uri",
        "uriComponent",
        "uriComponentToString",
        "utcNow",
        "extensionResourceId",
        "groupBy",
        "mapValues",
        "base64",
        "base64ToJson",
        "base64ToString",
        "dateTimeAdd",
        "dateTimeFromEpoch",
        "dateTimeToEpoch",
        "parseCidr",
        "cidrHost",
        "cidrSubnet",
        "tryGet",
    ]
)
BICEP_DECORATORS = frozenset(
    [
        "description",
        "minLength",
        "maxLength",
        "minValue",
        "maxValue",
        "allowed",
        "secure",
        "metadata",
        "batchSize",
        "export",
        "sealed",
        "discriminator",
        "onlyIfNotExists",
    ]
)
BICEP_NAMESPACES = frozenset({"sys", "az"})
BICEP_TYPES = frozenset({"string", "int", "bool", "object", "array", "resourceInput", "resourceOutput"})
BICEP_KEYWORDS = frozenset(
    [
        "param",
        "var",
        "resource",
        "module",
        "output",
        "existing",
        "if",
        "for",
        "in",
        "true",
        "false",
        "null",
        "targetScope",
        "import",
        "type",
        "func",
        "metadata",
        "with",
        "as",
        "using",
        "extends",
    ]
)
