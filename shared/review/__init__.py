"""The review of the uncertain tail by Azure OpenAI (off unless AZURE_OPENAI_ENDPOINT is set).

reviewer   the Decider that routes, bounds and waits (the only owner of review tasks)
client     the adapter to Azure OpenAI (the official client, structured output)
guard      token bucket, share budget, circuit breaker
prompt     the versioned template, the fields that leave the service, the answer's schema
store      reviews by event id (Redis when configured), for GET /api/reviews/{event_id}
"""
