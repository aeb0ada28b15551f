"""The Service Bus path: a batch of payments in, exactly one result per payment out.

    messages     Incoming (transport-free received message) · Outbound · the result and rejection bodies
    idempotency  ResultStore: results kept by event_id (Redis SET NX + TTL), MemoryResultStore (its fake)
    publisher    Publisher: the azure-servicebus sender (message_id, correlation, trace), MemoryPublisher
    handler      QueueHandler: decode → look up → score → keep → publish, a verdict per message
    verdicts     Delivery, Handled: a message's verdict and the helpers that give it
    budget       BatchBudget: work held to a share of QUEUE_BATCH_BUDGET_MS
    retry        the retry policy: dependency outages held with backoff and full jitter; the publish's retries
    tracing      spans and stage spans of a batch, the trace context carried on, verdicts measured
    outcomes     OutcomeQueue: risk-outcomes, each outcome kept beside its decision (issue 57)
    replay       `make replay FILE=events.jsonl`: the same handler over a JSON-lines file

Nothing here imports azure.servicebus or redis at module level: the Functions worker
imports function_app.py (and so `shared.adapters.functions`) before any invocation.
"""
