"""The Service Bus path: a batch of payments in, exactly one result per payment out.

    messages     Incoming (transport-free received message) · Outbound · the result and rejection bodies
    idempotency  ResultStore: results kept by event_id (Redis SET NX + TTL), MemoryResultStore (its fake)
    publisher    Publisher: the azure-servicebus sender (message_id, correlation, trace), MemoryPublisher
    handler      QueueHandler: decode → look up → score → keep → publish, a verdict per message
    replay       `make replay FILE=events.jsonl`: the same handler over a JSON-lines file

Nothing here imports azure.servicebus or redis at module level: the Functions worker
imports function_app.py (and so `shared.adapters.functions`) before any invocation.
"""
