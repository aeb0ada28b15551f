"""The adapter, through the real `openai` client, against a local server on the Azure route."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from bench.llm_server import LlmServer
from shared.errors import ReviewFailed, ReviewInvalid, ReviewRateLimited, ReviewTimeout
from shared.review.client import AzureOpenAIClient, retry_after_s
from shared.review.prompt import Prompt
from shared.settings import ReviewPolicy
from tests.review.conftest import TEST_KEY

FIELDS: dict[str, object] = {"amount": 12.5, "currency": "USD", "model_score": 0.5, "model_decision": "review"}


def client(llm: LlmServer, **policy: object) -> AzureOpenAIClient:
    settings = ReviewPolicy(endpoint=llm.endpoint, api_key=TEST_KEY, **policy)  # type: ignore[arg-type]
    return AzureOpenAIClient(settings, Prompt.load())


async def test_an_answer_is_a_validated_opinion_with_its_token_use(llm: LlmServer) -> None:
    c = client(llm, deployment="fraud-review")
    try:
        answer = await c.ask(FIELDS)
    finally:
        await c.aclose()
    assert answer.opinion.risk_score == pytest.approx(0.7) and answer.opinion.decision == "review"
    assert (answer.prompt_tokens, answer.completion_tokens) == (180, 40)
    sent = llm.requests[-1]
    assert sent["deployment"] == "fraud-review" and sent["headers"]["api-key"] == TEST_KEY
    body = sent["body"]
    assert body["response_format"]["type"] == "json_schema" and body["response_format"]["json_schema"]["strict"]
    assert body["temperature"] == 0 and body["max_completion_tokens"] == 300


@pytest.mark.parametrize(
    ("fault", "error", "code"),
    [("500", ReviewFailed, "review_failed"), ("bad", ReviewInvalid, "review_invalid")],
)
async def test_faults_become_review_errors(llm: LlmServer, fault: str, error: type[Exception], code: str) -> None:
    llm.behaviour.fault = fault
    c = client(llm)
    try:
        with pytest.raises(error) as caught:
            await c.ask(FIELDS)
    finally:
        await c.aclose()
    assert caught.value.code == code  # type: ignore[attr-defined]
    assert len(llm.requests) == 1, "the client's own retries must be off: ours are the only ones"


async def test_a_429_carries_its_retry_after(llm: LlmServer) -> None:
    llm.behaviour.fault, llm.behaviour.retry_after = "429", "7"
    c = client(llm)
    try:
        with pytest.raises(ReviewRateLimited) as caught:
            await c.ask(FIELDS)
    finally:
        await c.aclose()
    assert caught.value.retry_after_s == 7.0
    assert len(llm.requests) == 1


async def test_a_slow_answer_times_out(llm: LlmServer) -> None:
    llm.behaviour.delay_s = 1.0
    c = client(llm, call_timeout_ms=200.0)
    try:
        with pytest.raises(ReviewTimeout):
            await c.ask(FIELDS)
    finally:
        await c.aclose()


async def test_an_unreachable_endpoint_is_a_review_failure() -> None:
    from tests.conftest import closed_port

    settings = ReviewPolicy(endpoint=f"http://127.0.0.1:{closed_port()}", api_key=TEST_KEY)
    c = AzureOpenAIClient(settings, Prompt.load())
    try:
        with pytest.raises(ReviewFailed, match="cannot reach"):
            await c.ask(FIELDS)
    finally:
        await c.aclose()


def test_retry_after_reads_every_form_the_service_sends() -> None:
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    when = datetime(2026, 11, 30, 12, 0, 10, tzinfo=UTC)
    assert retry_after_s({"retry-after": format_datetime(when, usegmt=True)}, now=when.timestamp() - 10) == 10.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_without_a_key_the_client_uses_an_entra_token_provider() -> None:
    c = AzureOpenAIClient(ReviewPolicy(endpoint="https://example.openai.azure.com"), Prompt.load())
    assert c._credential is not None  # DefaultAzureCredential: the managed identity in Azure
    assert c._client._azure_ad_token_provider is not None
