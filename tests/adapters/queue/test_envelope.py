"""Several events in one queued message: an envelope `{"events": [...]}` is unpacked into one
delivery per event (`<message id>#<index>`), each with its own verdict, over a real Redis;
an envelope that is itself at fault is rejected whole, its neighbours untouched."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from shared.adapters.queue.handler import COMPLETED_QUEUE, QueueHandler
from shared.adapters.queue.idempotency import RedisResultStore
from shared.adapters.queue.messages import REJECTED_QUEUE, Incoming, unpack
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.service import ScoringService
from shared.errors import InferenceFailed
from tests.conftest import event

TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
ENQUEUED = datetime(2026, 11, 29, 3, 12, tzinfo=UTC)
CAP = 256 * 1024


def envelope(items: list[Any], *, message_id: str = "env", delivery: int = 1) -> Incoming:
    """One message whose body is `{"events": items}` (dicts as events, anything else as given)."""
    return Incoming(
        message_id=message_id,
        body=json.dumps({"events": items}).encode(),
        delivery_count=delivery,
        enqueued_time=ENQUEUED,
        correlation_id=f"corr-{message_id}",
        properties=TRACE,
    )


def plain(event_id: str, **fields: object) -> Incoming:
    return Incoming(message_id=event_id, body=json.dumps(event(event_id=event_id, **fields)).encode())


class Counting:
    """The core, counting each event it scores; `failing` names events that fail once, transiently."""

    def __init__(self, service: ScoringService, failing: frozenset[str] = frozenset()) -> None:
        self._service, self._failing = service, set(failing)
        self.scored: Counter[str] = Counter()

    def __getattr__(self, name: str) -> object:
        return getattr(self._service, name)

    async def score(self, event: Any, **kwargs: Any) -> object:
        self.scored[event.event_id] += 1
        if event.event_id in self._failing:
            self._failing.discard(event.event_id)
            raise InferenceFailed("the model failed this once")
        return await self._service.score(event, **kwargs)


@pytest.fixture
async def handlers(
    service: ScoringService, redis_url: str, redis_prefix: str
) -> AsyncIterator[Callable[..., tuple[QueueHandler, Counting]]]:
    """`handler(...)`: a handler over the core (counted) and its own client of the shared Redis."""
    made: list[QueueHandler] = []

    def handler(
        publisher: MemoryPublisher | None = None, *, failing: frozenset[str] = frozenset(), **options: Any
    ) -> tuple[QueueHandler, Counting]:
        core = Counting(service, failing)

        async def get() -> ScoringService:
            return core  # type: ignore[return-value]

        store = RedisResultStore.from_url(redis_url, ttl_s=3600, prefix=redis_prefix)
        options.setdefault("max_message_bytes", CAP)
        made.append(QueueHandler(get, store, publisher or MemoryPublisher(), **options))
        return made[-1], core

    yield handler
    for made_one in made:
        await made_one.aclose()


def sent(handler: QueueHandler, queue: str) -> list[dict[str, Any]]:
    assert isinstance(handler.publisher, MemoryPublisher)
    return [orjson.loads(m.body) for m in handler.publisher.sent if m.queue == queue]


async def test_an_envelope_of_n_events_yields_n_results_sharing_the_messages_facts(
    handlers: Callable[..., tuple[QueueHandler, Counting]],
) -> None:
    handler, core = handlers()
    handled = await handler.handle(
        [envelope([event(event_id=f"n-{i}", amount=10.0 + i) for i in range(5)], delivery=2)]
    )
    assert [(h.message_id, h.outcome) for h in handled] == [(f"env#{i}", "completed") for i in range(5)]
    assert isinstance(handler.publisher, MemoryPublisher)
    out = handler.publisher.delivered(COMPLETED_QUEUE)
    assert [m.message_id for m in out] == [f"n-{i}" for i in range(5)]  # results keyed by event_id, as ever
    assert {m.correlation_id for m in out} == {"corr-env"}
    assert {m.properties["traceparent"].split("-")[1] for m in out} == {TRACE["traceparent"].split("-")[1]}
    bodies = [orjson.loads(m.body) for m in out]
    assert {(b["delivery_count"], b["enqueued_time"]) for b in bodies} == {(2, "2026-11-29T03:12:00Z")}
    assert core.scored == Counter({f"n-{i}": 1 for i in range(5)})


async def test_plain_messages_and_envelopes_mix_in_one_batch(
    handlers: Callable[..., tuple[QueueHandler, Counting]],
) -> None:
    handler, _ = handlers()
    pretty = Incoming("pretty", b' \n{\n  "events" : ' + json.dumps([event(event_id="x-2")]).encode() + b"}")
    # a plain event whose body merely holds an "events" field (not first) stays a plain event
    other = Incoming("x-3", json.dumps({**event(event_id="x-3"), "events": []}).encode())
    handled = await handler.handle([plain("x-1"), pretty, other])
    assert [(h.message_id, h.outcome) for h in handled] == [
        ("x-1", "completed"),
        ("pretty#0", "completed"),
        ("x-3", "completed"),
    ]


async def test_each_event_of_an_envelope_gets_its_own_verdict(
    handlers: Callable[..., tuple[QueueHandler, Counting]],
) -> None:
    now = ENQUEUED + timedelta(minutes=1)
    handler, core = handlers(max_age_s=3300.0, clock=now.timestamp)
    fresh = "2026-11-29T03:12:00Z"
    items = [
        event(event_id="v-0", timestamp=fresh),
        event(event_id="v-1", timestamp=fresh, amount=-1, user_id="u-payer-9"),  # invalid
        event(event_id="v-2", timestamp="2026-11-28T03:12:00Z"),  # past the idempotency window
        {"events": [event(event_id="v-inner", timestamp=fresh)]},  # an envelope in an envelope
        event(event_id="v-4", timestamp=fresh),
    ]
    handled = await handler.handle([envelope(items)])
    verdicts = [(h.message_id, h.outcome, h.error.code if h.error else None) for h in handled]
    assert verdicts == [
        ("env#0", "completed", None),
        ("env#1", "rejected", "invalid_event"),
        ("env#2", "rejected", "event_expired"),
        ("env#3", "rejected", "invalid_event"),  # not unpacked a second time
        ("env#4", "completed", None),
    ]
    assert set(core.scored) == {"v-0", "v-4"}  # the inner envelope's event was never scored
    records = sent(handler, REJECTED_QUEUE)
    assert [r["message_id"] for r in records] == ["env#1", "env#2", "env#3"]
    invalid = orjson.loads(records[0]["body"])  # what was sent for that event, redacted
    assert invalid["event_id"] == "v-1" and invalid["amount"] == -1 and "u-payer-9" not in records[0]["body"]
    assert records[0]["body_bytes"] == len(json.dumps(items[1]).encode())
    assert [r["event_id"] for r in sent(handler, COMPLETED_QUEUE)] == ["v-0", "v-4"]


def oversized(cap: int) -> list[Any]:
    """Small events, each far under `cap`, that together are over it."""
    count = cap // len(json.dumps(event()).encode()) + 2
    return [event(event_id=f"big-{i}") for i in range(count)]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (json.dumps({"events": [event(event_id=f"t-{i}") for i in range(5)]}).encode(), "too_many_items"),
        (json.dumps({"events": oversized(4096)}).encode(), "payload_too_large"),
        (b'{"events": []}', "invalid_event"),
        (b'{"events": {"event_id": "o-1"}}', "invalid_event"),
        (json.dumps({"events": [event(event_id="i-0"), 7]}).encode(), "invalid_event"),
        (json.dumps({"events": [event(event_id="s-0"), "a string"]}).encode(), "invalid_event"),
        (b'{"events": [{"event_id": "cut-1", "user_id": "u-payer-9", "amount": ', "malformed_json"),
    ],
    ids=["over-max-events", "over-max-bytes", "empty", "not-a-list", "item-a-number", "item-a-string", "cut-short"],
)
async def test_an_envelope_at_fault_is_rejected_whole_and_its_neighbours_go_on(
    handlers: Callable[..., tuple[QueueHandler, Counting]], body: bytes, code: str
) -> None:
    handler, core = handlers(max_message_bytes=4096, max_envelope_events=4)
    handled = await handler.handle([plain("before"), Incoming("env", body), plain("after")])
    assert [(h.message_id, h.outcome) for h in handled] == [
        ("before", "completed"),
        ("env", "rejected"),
        ("after", "completed"),
    ]
    assert handled[1].error is not None and handled[1].error.code == code
    assert set(core.scored) == {"before", "after"}  # not one event of the envelope was scored
    [record] = sent(handler, REJECTED_QUEUE)
    assert record["message_id"] == "env" and record["error"] == code and record["body_bytes"] == len(body)
    assert "u-payer-9" not in json.dumps(record)


def test_a_rejected_envelopes_record_hashes_every_events_payer_and_drops_every_note() -> None:
    from shared.adapters.queue.messages import rejection_record
    from shared.errors import TooManyItems

    items = [event(event_id=f"r-{i}", user_id=f"u-payer-{i}", note=f"secret {i}") for i in range(3)]
    nested = {"events": [{"events": items}]}
    for body in (json.dumps({"events": items}), json.dumps(items), json.dumps(nested)):
        record = rejection_record(Incoming("env", body.encode()), TooManyItems("x"), b"k" * 32)
        assert b"u-payer" not in record and b"secret" not in record, body[:40]


async def test_a_redelivered_envelope_is_all_duplicates_and_nothing_is_scored_twice(
    handlers: Callable[..., tuple[QueueHandler, Counting]],
) -> None:
    publisher = MemoryPublisher()
    first, first_core = handlers(publisher)
    again, again_core = handlers(publisher)  # another replica, the same Redis and queue
    items = [event(event_id=f"d-{i}", amount=20.0 + i) for i in range(4)]
    done = await first.handle([envelope(items)])
    redone = await again.handle([envelope(items, delivery=2)])
    assert [h.outcome for h in done] == ["completed"] * 4 and [h.outcome for h in redone] == ["duplicate"] * 4
    assert [h.body for h in redone] == [h.body for h in done]  # byte for byte
    assert sum(first_core.scored.values()) == 4 and not again_core.scored
    assert [m.message_id for m in publisher.delivered(COMPLETED_QUEUE)] == [f"d-{i}" for i in range(4)]


async def test_a_transient_failure_redelivers_the_envelope_and_only_the_failed_event_is_scored_again(
    handlers: Callable[..., tuple[QueueHandler, Counting]],
) -> None:
    publisher = MemoryPublisher()
    handler, core = handlers(publisher, failing=frozenset({"f-1"}))
    items = [event(event_id=f"f-{i}", amount=30.0 + i) for i in range(3)]
    done = await handler.handle([envelope(items)])
    assert [h.outcome for h in done] == ["completed", "failed", "completed"]  # the adapter raises: redelivered
    assert done[1].error is not None and done[1].error.code == "inference_failed"
    redone = await handler.handle([envelope(items, delivery=2)])
    assert [h.outcome for h in redone] == ["duplicate", "completed", "duplicate"]
    assert core.scored == Counter({"f-0": 1, "f-1": 2, "f-2": 1})
    for event_id in ("f-0", "f-2"):  # kept results republished byte for byte, under the same id
        assert len({m.body for m in publisher.sent if m.message_id == event_id}) == 1
    assert sorted(m.message_id for m in publisher.delivered(COMPLETED_QUEUE)) == ["f-0", "f-1", "f-2"]


async def test_one_event_id_twice_in_an_envelope_with_other_content_is_a_conflict(
    handlers: Callable[..., tuple[QueueHandler, Counting]],
) -> None:
    handler, core = handlers()
    items = [
        event(event_id="c-1", amount=12.0),
        event(event_id="c-1", amount=12.0),  # the same payment again: its first result
        event(event_id="c-1", amount=9_000.0),  # another payment under that id
    ]
    handled = await handler.handle([envelope(items)])
    assert [h.outcome for h in handled] == ["completed", "duplicate", "rejected"]
    assert handled[2].error is not None and handled[2].error.code == "event_id_conflict"
    assert handled[1].body == handled[0].body and core.scored == Counter({"c-1": 1})
    [later] = await handler.handle([envelope([event(event_id="c-1", amount=1.0)], message_id="env-2")])
    assert later.outcome == "rejected" and later.error is not None and later.error.code == "event_id_conflict"


def test_a_plain_event_is_passed_through_as_the_same_message() -> None:
    msg = plain("p-1")
    assert unpack(msg, CAP, 256) == [msg] and unpack(msg, CAP, 256)[0] is msg


def test_the_load_tools_envelopes_unpack_into_the_events_it_packed_each_under_the_cap() -> None:
    from bench.servicebus import MESSAGE_BYTES, events, pack

    todo = list(events(2_000, "pk"))
    packed = pack(todo, per_message=1_500)  # more than fit in one message: closed early, by size
    counts = [count for _, _, count in packed]
    assert counts[0] < 1_500 and sum(counts) == 2_000 and all(len(body) <= MESSAGE_BYTES for _, body, _ in packed)
    unpacked = [e for mid, body, _ in packed for e in unpack(Incoming(mid, body), CAP, 2_000)]
    assert [e.body for e in unpacked] == [body for _, body in todo]
    assert unpacked[0].message_id == "pk-0..pk-" + str(packed[0][2] - 1) + "#0"
    assert [(m, b) for m, b, _ in pack(todo[:3], per_message=1)] == todo[:3]  # one event: the plain body


async def test_an_event_of_an_envelope_with_a_longest_message_id_is_rejected_under_an_id_service_bus_takes(
    handlers: Callable[..., tuple[QueueHandler, Counting]],
) -> None:
    from shared.adapters.queue.publisher import to_sdk_message

    handler, _ = handlers()
    head = "m" * 126  # Service Bus message ids go up to 128 characters
    items = [event(event_id="l-0"), event(event_id="l-1", amount=-1)]
    handled = await handler.handle([envelope(items, message_id=head + "-a"), envelope(items, message_id=head + "-b")])
    assert [h.outcome for h in handled] == ["completed", "rejected", "duplicate", "rejected"]
    assert isinstance(handler.publisher, MemoryPublisher)
    rejected = [m for m in handler.publisher.sent if m.queue == REJECTED_QUEUE]
    assert len({m.message_id for m in rejected}) == 2 and all(m.message_id.endswith("#1") for m in rejected)
    for outbound in handler.publisher.sent:
        assert to_sdk_message(outbound).message_id == outbound.message_id  # the SDK refuses one over 128
