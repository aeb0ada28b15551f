"""A benchmark refuses to report a figure when the work it names was not done (issue 53).

Each bench is fed events older than the queue path's idempotency window (EVENT_MAX_AGE_S, on by
default), which the app refuses as `event_expired` instead of scoring: the queue bench, the
Service Bus drain (the real queue handler publishing what the namespace would carry) and the
flash sale's open-loop points (a request the app rejects). Each must stop with `WorkNotDone`
naming the verdicts, where before it printed a throughput of rejections. Fresh events, the same
code: each reports (the control). bench.worker's own check runs through the real worker runtime
in tests/worker/test_bench_worker.py.
"""

from __future__ import annotations

import asyncio
import os

import orjson
import pytest

from bench import queue as queue_bench
from bench.flashsale.measure import open_loop_point
from bench.loadgen import event_body, now_stamp
from bench.servers import start_server
from bench.servicebus import Drained, events
from bench.verdicts import Verdicts, WorkNotDone, batch_verdicts, http_verdict
from shared.adapters.queue.handler import QueueHandler
from shared.adapters.queue.publisher import MemoryPublisher
from shared.adapters.queue.replay import messages, replay
from shared.core.holder import ServiceHolder
from shared.settings import Settings

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
TWO_HOURS = 7200.0  # older than EVENT_MAX_AGE_S's default (3,300 s)
SETTINGS = Settings(gc_gen0_threshold=0)  # NOTE: in-process features, no Redis; the GC as the tests leave it


def test_a_phase_under_its_share_is_refused_and_names_what_it_saw() -> None:
    verdicts = Verdicts("payments")
    verdicts.add("completed", 998)
    verdicts.add("rejected:event_expired", 2)
    with pytest.raises(WorkNotDone, match=r"payments: 99\.80% .*rejected:event_expired 2"):
        verdicts.require("completed")
    verdicts.add("completed", 1000)  # 1,998 of 2,000: 99.9 %
    verdicts.require("completed")
    with pytest.raises(WorkNotDone, match="no verdicts"):
        Verdicts("empty").require("completed")


def test_http_answers_are_judged_by_their_body_not_only_their_status() -> None:
    assert http_verdict(200, b'{"decision":"approve"}') == "completed"
    assert http_verdict(200, b'{"status":"ready"}') == "http_200_no_decision"
    assert http_verdict(422, b'{"error":"invalid_event","detail":"x"}') == "rejected:invalid_event"
    assert http_verdict(503, b'{"error":"overloaded","detail":"x"}') == "shed:overloaded"
    assert http_verdict(502, b"<html>") == "http_502"
    batch = b'{"results":[{"decision":"approve"},{"index":1,"error":"invalid_event","detail":"x"}]}'
    assert batch_verdicts(200, batch) == ["completed", "rejected:invalid_event"]


def test_events_are_dated_when_they_are_built() -> None:
    stamp = orjson.loads(event_body(1))["timestamp"]
    assert stamp == now_stamp() or stamp < now_stamp()  # the same second, or the one before
    assert orjson.loads(next(events(1, "r"))[1])["timestamp"][:13] == now_stamp()[:13]


def test_the_queue_bench_refuses_to_time_expired_events() -> None:
    with pytest.raises(WorkNotDone, match=r"queue: 0\.00% of 300 .*rejected:event_expired 300"):
        asyncio.run(queue_bench.run(300, None, event_age_s=TWO_HOURS, settings=SETTINGS))
    # the control: fresh events are scored and reported
    figures = asyncio.run(queue_bench.run(300, None, settings=SETTINGS))
    assert figures["queue_verdicts"] == {"completed": 300}
    assert figures["http_batch_verdicts"] == {"completed": 300}


async def _published(bodies: list[bytes]) -> list[bytes]:
    settings = SETTINGS
    holder = ServiceHolder(lambda: settings)
    await holder.get()
    publisher = MemoryPublisher()
    handler = QueueHandler.from_settings(settings, holder.get, publisher=publisher)
    try:
        await replay(handler, list(messages(bodies)), [])
    finally:
        await handler.aclose()
        await holder.aclose()
    return [m.body for m in publisher.delivered("risk-completed")]


def _drained(results: list[bytes]) -> Drained:
    drained = Drained()
    for n, body in enumerate(results):
        drained.add(f"m-{n}", body, None)
    return drained


def test_the_service_bus_drain_refuses_when_the_events_it_was_sent_were_not_scored() -> None:
    stale = [
        orjson.dumps({**orjson.loads(body), "timestamp": now_stamp(TWO_HOURS)}) for _, body in events(100, "stale")
    ]
    results = asyncio.run(_published(stale))
    assert results == []  # every one went to risk-rejected
    with pytest.raises(WorkNotDone, match=r"drain: 0\.00% of 100 .*no_result 100"):
        _drained(results).summary(expect=100)
    fresh = asyncio.run(_published([body for _, body in events(100, "fresh")]))
    assert _drained(fresh).summary(expect=100)["verdicts"] == {"completed": 100}


@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="the served app reads its features from Redis")
def test_an_open_loop_point_refuses_answers_that_are_not_decisions() -> None:
    env = {"REDIS_URL": os.environ["REDIS_URL"], "REDIS_KEY_PREFIX": "verdicts-test:", "LOG_LEVEL": "WARNING"}
    server = start_server("verdicts", "shared.adapters.http.asgi:app", env)
    try:

        def invalid(n: int) -> bytes:  # NOTE: a negative amount: every one is a 422, none is scored
            return orjson.dumps({**orjson.loads(event_body(n)), "amount": -1})

        with pytest.raises(WorkNotDone, match=r"rejected:invalid_event 50"):
            open_loop_point(server.port, server.process.pid, 50, 1.0, 0, body=invalid)
        point = open_loop_point(server.port, server.process.pid, 50, 1.0, 1000)
        assert point["verdicts"] == {"completed": 50}
    finally:
        server.stop()
