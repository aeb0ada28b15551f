// Azure Managed Redis (redisEnterprise) as the cross-replica cache and online feature
// store. TLS only, access keys disabled (Entra ID auth via an access-policy assignment
// for the runtime identity), eviction volatile-lru: only keys with a TTL (predictions,
// CACHE_L2_TTL_S > 0) are evicted, never the feature store (no TTL), and a full cache evicts instead of
// failing writes (a miss then costs one round-trip, never an error) (docs/platform.md P41).
// main.bicep deploys it a second time for Feast's online store (deployFeastRedis) with
// NoEviction: Feast's hashes carry a TTL when Feast sets key_ttl_seconds, and features must
// never be evicted (docs/capacity.md, Feast's online store and eviction).

@description('Azure region.')
param location string

@description('Resource tags.')
param tags object

@description('Cluster name.')
param name string

@description('SKU, e.g. Balanced_B5 (see docs/capacity.md for sizing).')
param sku string = 'Balanced_B5'

@description('Principal (object id) of the runtime identity.')
param appPrincipalId string

@description('Eviction policy: VolatileLRU for the cache (predictions carry a TTL), NoEviction for a feature store whose keys may carry one (P41).')
@allowed([
  'VolatileLRU'
  'NoEviction'
])
param evictionPolicy string = 'VolatileLRU'

resource cluster 'Microsoft.Cache/redisEnterprise@2025-07-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: sku
  }
  properties: {
    minimumTlsVersion: '1.2'
    highAvailability: 'Enabled'
    publicNetworkAccess: 'Enabled'
  }
}

resource database 'Microsoft.Cache/redisEnterprise/databases@2025-07-01' = {
  parent: cluster
  name: 'default'
  properties: {
    clientProtocol: 'Encrypted'
    port: 10000
    // NOTE: EnterpriseCluster exposes one endpoint, so the plain (non-cluster) redis-py
    // client works; the proxy spreads keys over shards. It also allows MGET/MSET/DEL/EXISTS
    // across hash slots, which OSS clustering refuses (CROSSSLOT, P42): the native feature
    // layout reads with MGET. Feast's layout (single-key HMGETs, pipelined) needs neither.
    clusteringPolicy: 'EnterpriseCluster'
    evictionPolicy: evictionPolicy
    accessKeysAuthentication: 'Disabled'
  }
}

resource appAccess 'Microsoft.Cache/redisEnterprise/databases/accessPolicyAssignments@2025-07-01' = {
  parent: database
  name: 'scoringapp'
  properties: {
    accessPolicyName: 'default'
    user: {
      objectId: appPrincipalId
    }
  }
}

output name string = cluster.name
output hostName string = cluster.properties.hostName
output port int = database.properties.port
