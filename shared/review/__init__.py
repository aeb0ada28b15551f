"""The review of the uncertain tail by Azure OpenAI (off unless AZURE_OPENAI_ENDPOINT is set).

reviewer   the Decider that routes, bounds and waits (the only owner of review tasks)
client     the adapter to Azure OpenAI (the official client, structured output)
guard      token bucket, share budget, circuit breaker
prompt     the versioned template, the fields that leave the service, the answer's schema
store      reviews by event id (Redis when configured), for GET /api/reviews/{event_id}
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.exports import lazy_exports

if TYPE_CHECKING:
    from shared.review.client import AzureOpenAIClient, ReviewClient
    from shared.review.prompt import Opinion, Prompt
    from shared.review.reviewer import Reviewer
    from shared.review.store import ReviewStore

__all__ = ["AzureOpenAIClient", "Opinion", "Prompt", "ReviewClient", "ReviewStore", "Reviewer"]

_HOMES = {
    "AzureOpenAIClient": "client",
    "ReviewClient": "client",
    "Opinion": "prompt",
    "Prompt": "prompt",
    "Reviewer": "reviewer",
    "ReviewStore": "store",
}

__getattr__ = lazy_exports(__name__, _HOMES)
