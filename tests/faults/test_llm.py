"""The Azure OpenAI endpoint (bench/llm_server.py, the real `openai` client) slow, failing, rate-limiting.

Each review is bounded: HTTP answers locally within LLM_TIMEOUT_MS (review pending, failed or
skipped), the queue path publishes the local decision, the breaker opens and readiness and the
metrics say so; once the endpoint answers again a probe closes the breaker, without a restart.
The bounds one by one are tested in tests/review/ (test_reviewer.py, test_client.py,
test_telemetry.py); this is the whole app under each fault.
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from bench.llm_server import Behaviour, LlmServer
from shared.settings import Settings
from tests.faults.rig import HANG_S, Queue, Replica, eventually, payment

FAULTS = {
    "slow": (Behaviour(delay_s=1.5), "timeout"),  # past LLM_CALL_TIMEOUT_MS
    "failing": (Behaviour(fault="500"), "error"),
    "rate_limiting": (Behaviour(fault="429", retry_after="1"), "error"),
}
REVIEWED = {"gen_ai_request_model": "review"}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_the_llm_endpoint_misbehaving(
    fault: str,
    reviewing: Callable[..., Settings],
    llm: LlmServer,
    replicas: Callable[[Settings], Replica],
    queue: Queue,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = reviewing(
        band_low=0.0, band_high=1.0, max_rps=1000.0, max_share=1.0,  # every event asks for a review
        timeout_ms=100.0, queue_timeout_ms=1000.0, call_timeout_ms=400.0,
        breaker_failures=3, breaker_reset_s=0.5,
    )  # fmt: skip
    replica = replicas(settings)
    service = await replica.start()

    async def reviewed() -> bool:
        [answer] = [r.json() for r in await replica.load("before", 1)]
        return answer["source"] == "llm" and answer["review"]["status"] == "done"

    await eventually(reviewed, 10.0, "a review")  # NOTE: the client's first call may outlast one wait
    assert await replica.degraded() == []
    behaviour, outcome = FAULTS[fault]
    calls = await replica.metric("scoring_llm_calls_total", **REVIEWED, scoring_outcome=outcome)

    llm.behaviour = behaviour
    answers = await replica.load("during", 30)
    assert {r.status_code for r in answers} == {200}
    assert {r.json()["source"] for r in answers} == {"model"}  # the local decision stands
    assert {r.json()["review"]["status"] for r in answers} <= {"pending", "failed", "skipped"}

    async def breaker_open() -> bool:
        listed = any(r.startswith("reviews: breaker open") for r in await replica.degraded())
        return listed and await replica.metric("scoring_llm_breaker_state") == 2

    await eventually(breaker_open, 10.0, "the open breaker in readiness")
    assert await replica.metric("scoring_degraded", scoring_component="reviews") == 1
    assert await replica.metric("scoring_llm_calls_total", **REVIEWED, scoring_outcome=outcome) >= calls + 3
    queue.send([payment(f"q-{fault}-{i}", 100 + i) for i in range(16)])
    await queue.drain(replica.handlers)
    results = queue.results()
    assert len(results) == 16 and all(b'"source":"model"' in body for body in results.values())

    llm.behaviour = Behaviour()

    async def reviewing_again() -> bool:
        [answer] = [r.json() for r in await replica.load("after", 1)]
        if answer["source"] != "llm" or await replica.degraded():
            return False
        return await replica.metric("scoring_llm_breaker_state") == 0

    await eventually(reviewing_again, 15.0, "reviews again")
    assert await replica.metric("scoring_degraded", scoring_component="reviews") == 0
    assert replica.service is service
    assert set(replica.statuses) == {200} and replica.slowest_s < HANG_S
    gc.collect()
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []  # no review's failure left unread
