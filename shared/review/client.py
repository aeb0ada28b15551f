"""The adapter to Azure OpenAI: one chat completion per review, translated into our errors.

Through the official `openai` client (`AsyncAzureOpenAI`). Its own retries are off
(`max_retries=0`): the reviewer's bounds (deadline, bucket, breaker) are the only retry
policy, so they never stack. Authentication is the API key when one is set, else a
Microsoft Entra token for the managed identity (azure-identity; infra/ grants the role).
`ReviewClient` is the seam the reviewer calls; tests drive the real client against a
local server that answers the Azure route (bench/llm_server.py).
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from shared.errors import ReviewFailed, ReviewInvalid, ReviewRateLimited, ReviewTimeout
from shared.policies import ReviewPolicy
from shared.review.prompt import Opinion, Prompt, read_opinion

if TYPE_CHECKING:
    from openai import AsyncAzureOpenAI

__all__ = ["Answer", "AzureOpenAIClient", "ReviewClient", "retry_after_s"]

COGNITIVE_SERVICES_SCOPE = "https://cognitiveservices.azure.com/.default"
API_VERSION = "2024-10-21"  # fixed by design: the GA version with structured outputs (json_schema) the prompt needs
MAX_TOKENS = 300  # fixed by design: the prompt asks for a score, a decision and at most two sentences
_SAMPLE_COMPLETION = {
    "id": "warm-up",
    "object": "chat.completion",
    "created": 0,
    "model": "warm-up",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "{}"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
}


@dataclass(frozen=True, slots=True)
class Answer:
    """A validated opinion and what it cost."""

    opinion: Opinion
    prompt_tokens: int
    completion_tokens: int


class ReviewClient(Protocol):
    async def ask(self, fields: dict[str, object]) -> Answer: ...

    async def aclose(self) -> None: ...


class AzureOpenAIClient:
    """Asks one Azure OpenAI chat deployment for an `Opinion`, with structured output."""

    def __init__(self, policy: ReviewPolicy, prompt: Prompt, client: AsyncAzureOpenAI | None = None) -> None:
        self._policy = policy
        self._prompt = prompt
        self._response_format: Any = prompt.response_format()  # the client's TypedDicts, built from a file
        self._credential: Any = None
        self._client = client or self._connect(policy)
        self._warm()

    def _warm(self) -> None:
        """Load what the first call would load, at start-up rather than on the event loop
        under traffic (measured: ~25 ms of imports and validator building)."""
        from openai.types.chat import ChatCompletion

        _ = self._client.chat.completions
        ChatCompletion.model_validate(_SAMPLE_COMPLETION)

    def _connect(self, policy: ReviewPolicy) -> AsyncAzureOpenAI:
        from openai import AsyncAzureOpenAI

        auth: dict[str, Any]
        if policy.api_key:
            auth = {"api_key": policy.api_key}
        else:
            auth = {"azure_ad_token_provider": self._entra_token_provider()}
        return AsyncAzureOpenAI(
            azure_endpoint=policy.endpoint or "",
            api_version=API_VERSION,
            max_retries=0,  # NOTE: ours are the only retries (breaker, bucket); the client's would stack
            timeout=policy.call_timeout_ms / 1000,
            **auth,
        )

    def _entra_token_provider(self) -> Callable[[], Awaitable[str]]:
        """A Microsoft Entra token for the managed identity, fetched off the event loop.

        azure-identity's sync credential (its async one needs aiohttp, which nothing
        else here uses); the provider caches the token, so the thread hop is per call only.
        AZURE_CLIENT_ID (set by infra/) selects the app's user-assigned identity.
        """
        from azure.identity import DefaultAzureCredential, get_bearer_token_provider

        self._credential = DefaultAzureCredential()
        fetch = get_bearer_token_provider(self._credential, COGNITIVE_SERVICES_SCOPE)

        async def token() -> str:
            return await asyncio.to_thread(fetch)

        return token

    async def ask(self, fields: dict[str, object]) -> Answer:
        import openai

        try:
            response = await self._client.chat.completions.create(
                model=self._policy.deployment,
                messages=cast(Any, self._prompt.messages(fields)),
                response_format=self._response_format,
                max_completion_tokens=MAX_TOKENS,
                temperature=0,
            )
        except openai.RateLimitError as exc:
            raise ReviewRateLimited("Azure OpenAI answered 429", retry_after_s(exc.response.headers)) from exc
        except openai.APITimeoutError as exc:
            raise ReviewTimeout(f"no answer within {self._policy.call_timeout_ms:.0f} ms") from exc
        except openai.APIStatusError as exc:
            raise ReviewFailed(f"Azure OpenAI answered {exc.status_code}") from exc
        except openai.APIConnectionError as exc:
            raise ReviewFailed("cannot reach Azure OpenAI") from exc
        except openai.OpenAIError as exc:  # e.g. the response did not parse as a completion
            raise ReviewInvalid(f"unusable answer from Azure OpenAI ({type(exc).__name__})") from exc
        except Exception as exc:  # e.g. the Entra token provider's own errors pass through the client
            raise ReviewFailed(f"no review: {type(exc).__name__}") from exc
        if not response.choices:
            raise ReviewInvalid("the review came back with no choices")
        choice = response.choices[0]
        if choice.finish_reason not in ("stop", None):
            raise ReviewInvalid(f"the review stopped early ({choice.finish_reason})")
        opinion = read_opinion(choice.message.content)
        usage = response.usage
        return Answer(opinion, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0)

    async def aclose(self) -> None:
        await self._client.close()
        if self._credential is not None:
            self._credential.close()


def retry_after_s(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """What a 429 asks us to wait: `retry-after-ms`, `retry-after` in seconds or as an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))
