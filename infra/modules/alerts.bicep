// Azure Monitor alerts for the latency budget and the queue path:
// p99 latency and 5xx rate of the keyed routes (App Insights log queries over `requests`,
// which in host.json's OpenTelemetry mode are the host's own HTTP server spans, sampled by
// OTEL_TRACES_SAMPLER: docs/platform.md P16, P17; tests/infra checks the queries stay
// ratios and percentiles), the same for every port from the app's own metrics (V2 gRPC never
// reaches `requests`: P14), new dead letters, queue depth, queue size
// (the partition-exhaustion symptom), throttling, message age, replicas pinned at
// maxReplicas, and drift: a version's features or scores shifting from its first records
// (the app's `scoring.drift.psi` gauge, one series per replica, version and feature); and the
// review tail: refused lower verdicts (steering attempts) and a shift of the escalated share; and
// outcomes: the live version's recall or precision dropping against its own trailing baseline.

@description('Resource tags.')
param tags object

@description('Name prefix for the alert rules.')
param prefix string

@description('Azure region (log alerts are regional).')
param location string

@description('Email that receives alerts; empty for none (attach your own action group).')
param alertEmail string = ''

@description('Application Insights component id.')
param appInsightsId string

@description('Log Analytics workspace id (the Service Bus metrics land in its AzureMetrics table).')
param workspaceId string

@description('Service Bus namespace id.')
param serviceBusId string

@description('Queue the scoring trigger reads.')
param inputQueueName string = 'payments'

@description('Queue of outcomes learned later: its backlog and size alert with the input queue\'s.')
param outcomesQueueName string = 'risk-outcomes'

@description('Queue size (MB) the input queue may hold; the size alert fires at 80%.')
param queueMaxSizeInMegabytes int = 5120

@description('Container App id.')
param containerAppId string

@description('The app maxReplicas; the at-max alert fires when replicas reach it.')
param maxReplicas int

@description('p99 latency budget in ms for the HTTP scoring routes.')
param p99BudgetMs int = 50

@description('Mean time of one scored event, every port and trigger (the app\'s scoring.stage.duration, stage total), in ms.')
param meanEventBudgetMs int = 10

@description('Active messages in the input queue that count as a backlog.')
param queueDepthThreshold int = 10000

@description('Oldest acceptable message age, in ms, at the time it is scored.')
param queueAgeThresholdMs int = 5000

@description('Population stability index of a feature above which it has shifted (held for the whole window).')
param featureDriftPsi string = '0.2'

@description('Population stability index of the score above which decisions are moving (held for the whole window).')
param scoreDriftPsi string = '0.25'

@description('Refused lower review verdicts in 15 minutes above which someone may be steering the reviewer.')
param reviewRefusedThreshold int = 5

@description('Change of the escalated share of reviews, last hour against the day before, that alerts (0..1).')
param escalationShiftThreshold string = '0.15'

@description('Drop of the live version\'s recall (0..1, absolute) against its own 28-day baseline, mature labels only, that alerts.')
param recallDropThreshold string = '0.1'

@description('Drop of the live version\'s precision (0..1, absolute) against its own 28-day baseline, mature labels only, that alerts.')
param precisionDropThreshold string = '0.1'

@description('Custom metric the app emits per completed queue message: enqueued time to completion, in seconds (shared/telemetry/catalogue.py).')
param queueAgeMetricName string = 'scoring.queue.message.age'

var actionGroups = empty(alertEmail) ? [] : [actionGroup.id]
var metricActions = empty(alertEmail) ? [] : [
  {
    actionGroupId: actionGroup.id
  }
]
var queueDimension = [
  {
    name: 'EntityName'
    operator: 'Include'
    values: [
      inputQueueName
      outcomesQueueName
    ]
  }
]
// NOTE: a gauge reaches customMetrics as one row per export, its value in valueSum with
// valueCount 1 (docs/platform.md P44). The lowest value of each series over the window above the
// threshold = held throughout it, as Prometheus's `for: 30m` (ops/prometheus/alerts.yml).
var driftSeries = 'customMetrics | where name == \'scoring.drift.psi\' | extend model = tostring(customDimensions[\'scoring.model\']), version = tostring(customDimensions[\'scoring.model.version\']), feature = tostring(customDimensions[\'scoring.feature\'])'
var driftHeld = 'summarize held = min(valueSum / valueCount) by model, version, feature, cloud_RoleInstance | summarize psi = max(held)'
// NOTE: the daily report (function outcomes_report, shared/stores/prediction_log/daily.py) sets the
// `scoring.outcomes.*` gauges per version, role and window, over mature days only: `current` the newest 7
// mature days, `baseline` the 28 before them. The gauge is exported all day (P44: valueSum / valueCount),
// so a day's window holds the last run's figures; a version with no mature day, or no baseline yet, has
// no pair and cannot fire.
var outcomesDrop = 'extend model = tostring(customDimensions[\'scoring.model\']), version = tostring(customDimensions[\'scoring.model.version\']), role = tostring(customDimensions[\'scoring.role\']), window = tostring(customDimensions[\'scoring.window\']) | where role == \'live\' | summarize value = avg(valueSum / valueCount) by model, version, window | summarize current = avgif(value, window == \'current\'), baseline = avgif(value, window == \'baseline\'), windows = dcount(window) by model, version | where windows == 2 | summarize drop = max(baseline - current)'
var scoringRequests = 'requests | where isnotempty(url) and url has \'/api/\' and url !has \'/api/health/\''

resource actionGroup 'Microsoft.Insights/actionGroups@2023-01-01' = if (!empty(alertEmail)) {
  name: '${prefix}-oncall'
  location: 'global'
  tags: tags
  properties: {
    groupShortName: 'scoring'
    enabled: true
    emailReceivers: [
      {
        name: 'oncall'
        emailAddress: alertEmail
        useCommonAlertSchema: true
      }
    ]
  }
}

resource p99Latency 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-p99-latency'
  location: location
  tags: tags
  properties: {
    description: 'p99 of the HTTP scoring routes is over the budget.'
    severity: 2
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: '${scoringRequests} | summarize p99_ms = percentile(duration, 99)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'p99_ms'
          operator: 'GreaterThan'
          threshold: p99BudgetMs
          failingPeriods: {
            numberOfEvaluationPeriods: 2
            minFailingPeriodsToAlert: 2
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource errorRate 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-5xx-rate'
  location: location
  tags: tags
  properties: {
    description: 'More than 1% of scoring requests answered 5xx.'
    severity: 1
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: '${scoringRequests} | summarize total = count(), failed = countif(toint(resultCode) >= 500) | extend pct_5xx = iff(total == 0, 0.0, 100.0 * failed / total)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'pct_5xx'
          operator: 'GreaterThan'
          threshold: 1
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource queueAge 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-queue-age'
  location: location
  tags: tags
  properties: {
    description: 'Messages on the input queue wait too long before they are scored (Service Bus has no message-age metric; the app reports it).'
    severity: 2
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == \'${queueAgeMetricName}\' | summarize age_ms = 1000.0 * max(valueMax)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'age_ms'
          operator: 'GreaterThan'
          threshold: queueAgeThresholdMs
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

// NOTE: the keyed routes' alerts above read `requests`, which only the host writes: traffic on
// the additional TCP port (V2 gRPC) bypasses the host (docs/platform.md P14).
// These two read what the app's core records for every event whatever its port or trigger.
resource allPortsShed 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-all-ports-shed'
  location: location
  tags: tags
  properties: {
    description: 'The app turned work away (overloaded or past its deadline) on some port or trigger: scale out, or check the CPU rule.'
    severity: 2
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == \'scoring.requests.shed\' | summarize shed = sum(valueSum)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'shed'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource reviewRefused 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-review-refused'
  location: location
  tags: tags
  properties: {
    description: 'Reviews asked for a lower decision than the model\'s and were refused (a review only escalates): someone may be steering the reviewer through the payment\'s note (docs/reliability.md, the review tail\'s threat model).'
    severity: 3
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == \'scoring.llm.reviews\' and tostring(customDimensions[\'scoring.direction\']) == \'refused\' | summarize refused = sum(valueSum)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'refused'
          operator: 'GreaterThan'
          threshold: reviewRefusedThreshold
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource escalationShift 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-review-escalation-shift'
  location: location
  tags: tags
  properties: {
    description: 'The share of reviews that escalated the model\'s decision in the last hour moved away from the day before it (a new prompt, model deployment or attack changes what the reviewer does).'
    severity: 3
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT1H'
    windowSize: 'P1D'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == \'scoring.llm.reviews\' | extend escalated = tostring(customDimensions[\'scoring.direction\']) == \'escalated\', recent = timestamp > ago(1h) | summarize up = sumif(valueSum, escalated), all = sum(valueSum) by recent | summarize now_share = maxif(iff(all == 0, 0.0, up / all), recent), before_share = maxif(iff(all == 0, 0.0, up / all), not(recent)) | extend shift = abs(now_share - before_share)'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'shift'
          operator: 'GreaterThan'
          threshold: json(escalationShiftThreshold)
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource allPortsLatency 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-all-ports-latency'
  location: location
  tags: tags
  properties: {
    description: 'The mean time of one scored event, over every port and trigger, is over its budget.'
    severity: 2
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == \'scoring.stage.duration\' and tostring(customDimensions[\'scoring.stage\']) == \'total\' | summarize mean_ms = iff(sum(valueCount) == 0, 0.0, 1000.0 * sum(valueSum) / sum(valueCount))'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'mean_ms'
          operator: 'GreaterThan'
          threshold: meanEventBudgetMs
          failingPeriods: {
            numberOfEvaluationPeriods: 2
            minFailingPeriodsToAlert: 2
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

// A feature's shift is for a ticket (Informational): an input moving need not move a decision. The
// score's is Error: the score is what decides, so declines and reviews are moving now.
resource featureDrift 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-feature-drift'
  location: location
  tags: tags
  properties: {
    description: 'A feature of a model version has shifted from the version\'s first records (PSI over the threshold for 30 minutes on a replica): GET /api/models/{name}/rollout names it.'
    severity: 3
    enabled: true
    autoMitigate: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT30M'
    criteria: {
      allOf: [
        {
          query: '${driftSeries} | where feature != \'score\' | ${driftHeld}'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'psi'
          operator: 'GreaterThan'
          threshold: json(featureDriftPsi)
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource scoreDrift 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-score-drift'
  location: location
  tags: tags
  properties: {
    description: 'The scores of a model version have shifted from its first records (PSI over the threshold for 30 minutes on a replica): decisions are moving; pin the previous version if this one is the cause.'
    severity: 1
    enabled: true
    autoMitigate: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT30M'
    criteria: {
      allOf: [
        {
          query: '${driftSeries} | where feature == \'score\' | ${driftHeld}'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'psi'
          operator: 'GreaterThan'
          threshold: json(scoreDriftPsi)
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

// NOTE: DeadletteredMessages is a count of what sits in the dead-letter queues; an alert
// on `count > 0` stays fired until someone drains them. This one fires when the count
// GROWS within the window (new dead letters) and resolves by itself otherwise. Azure
// Monitor metric alerts cannot take a difference, so it reads the namespace metrics that
// servicebus.bicep sends to Log Analytics (AzureMetrics carries no queue dimension: it
// counts every queue of the namespace, which is what on-call wants anyway).
var newDeadLettersQuery = 'AzureMetrics | where ResourceId =~ \'${serviceBusId}\' and MetricName == \'DeadletteredMessages\' | summarize dead = max(Maximum) by bin(TimeGenerated, 1m) | order by TimeGenerated asc | extend grew = dead - prev(dead) | summarize new_dead_letters = sumif(grew, grew > 0)'

resource deadLetters 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-new-dead-letters'
  location: location
  tags: tags
  properties: {
    description: 'New messages were dead-lettered (poison or expired) in the last 10 minutes.'
    severity: 1
    enabled: true
    autoMitigate: true
    scopes: [
      workspaceId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT10M'
    criteria: {
      allOf: [
        {
          query: newDeadLettersQuery
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'new_dead_letters'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource queueDepth 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${prefix}-queue-depth'
  location: 'global'
  tags: tags
  properties: {
    description: 'The input queue holds a backlog the fleet is not draining.'
    severity: 2
    enabled: true
    scopes: [
      serviceBusId
    ]
    evaluationFrequency: 'PT1M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'active'
          metricName: 'ActiveMessages'
          dimensions: queueDimension
          operator: 'GreaterThan'
          threshold: queueDepthThreshold
          timeAggregation: 'Minimum'
        }
      ]
    }
    actions: metricActions
  }
}

resource queueSize 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${prefix}-queue-size'
  location: 'global'
  tags: tags
  properties: {
    description: 'The input queue is above 80% of its maximum size: sends will fail with QuotaExceeded (the partition-exhaustion symptom).'
    severity: 1
    enabled: true
    scopes: [
      serviceBusId
    ]
    evaluationFrequency: 'PT1M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'size'
          metricName: 'Size'
          dimensions: queueDimension
          operator: 'GreaterThan'
          threshold: queueMaxSizeInMegabytes * 1024 * 1024 / 10 * 8
          timeAggregation: 'Maximum'
        }
      ]
    }
    actions: metricActions
  }
}

resource throttled 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${prefix}-servicebus-throttled'
  location: 'global'
  tags: tags
  properties: {
    description: 'Service Bus is throttling requests: add messaging units.'
    severity: 2
    enabled: true
    scopes: [
      serviceBusId
    ]
    evaluationFrequency: 'PT1M'
    windowSize: 'PT5M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'throttled'
          metricName: 'ThrottledRequests'
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Total'
        }
      ]
    }
    actions: metricActions
  }
}

resource replicasAtMax 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: '${prefix}-replicas-at-max'
  location: 'global'
  tags: tags
  properties: {
    description: 'The app has been at maxReplicas for 15 minutes: it cannot scale further.'
    severity: 2
    enabled: true
    scopes: [
      containerAppId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: 'replicas'
          metricName: 'Replicas'
          operator: 'GreaterThanOrEqual'
          threshold: maxReplicas
          timeAggregation: 'Minimum'
        }
      ]
    }
    actions: metricActions
  }
}

resource recallDrop 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-outcomes-recall-drop'
  location: location
  tags: tags
  properties: {
    description: 'The live version declined a smaller share of the fraud in its newest mature week than over the 28 mature days before (outcomes past the maturity window only): fraud is getting through (docs/outcomes.md; make outcomes shows which days and segments).'
    severity: 2
    enabled: true
    autoMitigate: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT1H'
    windowSize: 'P1D'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == \'scoring.outcomes.recall\' | ${outcomesDrop}'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'drop'
          operator: 'GreaterThan'
          threshold: json(recallDropThreshold)
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}

resource precisionDrop 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${prefix}-outcomes-precision-drop'
  location: location
  tags: tags
  properties: {
    description: 'A smaller share of the live version\'s declines were fraud in its newest mature week than over the 28 mature days before (outcomes past the maturity window only): good customers are being declined (docs/outcomes.md).'
    severity: 3
    enabled: true
    autoMitigate: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT1H'
    windowSize: 'P1D'
    criteria: {
      allOf: [
        {
          query: 'customMetrics | where name == \'scoring.outcomes.precision\' | ${outcomesDrop}'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'drop'
          operator: 'GreaterThan'
          threshold: json(precisionDropThreshold)
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: actionGroups
    }
  }
}
