"""Message building of the SDK path, checked against the SDK's own types (no emulator runs here)."""

from __future__ import annotations

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch

from shared.adapters.queue.messages import Outbound, trace_properties
from shared.adapters.queue.publisher import MemoryPublisher, ServiceBusPublisher, by_queue, to_sdk_message
from shared.errors import PublishFailed

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_result_becomes_an_sdk_message_with_id_correlation_and_trace() -> None:
    out = Outbound("risk-completed", b'{"event_id":"e-1"}', "e-1", "corr-1", {"traceparent": TRACEPARENT})
    msg = to_sdk_message(out)
    assert isinstance(msg, ServiceBusMessage)
    assert (msg.message_id, msg.correlation_id, msg.content_type) == ("e-1", "corr-1", "application/json")
    assert b"".join(msg.body) == b'{"event_id":"e-1"}'
    assert msg.application_properties == {"traceparent": TRACEPARENT}
    amqp = msg.raw_amqp_message
    assert amqp.properties is not None and amqp.properties.message_id == "e-1"


def test_without_trace_context_no_properties_are_sent() -> None:
    msg = to_sdk_message(Outbound("risk-rejected", b"{}", "m-1"))
    assert msg.application_properties is None and msg.correlation_id is None


def test_messages_fit_the_sdk_batch() -> None:
    batch = ServiceBusMessageBatch(max_size_in_bytes=4096)
    for i in range(5):
        batch.add_message(to_sdk_message(Outbound("q", b"x" * 200, f"e-{i}", None, {"traceparent": TRACEPARENT})))
    assert len(batch) == 5


def test_trace_context_is_read_from_the_incoming_properties() -> None:
    assert trace_properties({b"traceparent": TRACEPARENT.encode(), "other": "x"}) == {"traceparent": TRACEPARENT}
    assert trace_properties({"Diagnostic-Id": TRACEPARENT})["traceparent"] == TRACEPARENT  # the SDK's own header
    assert trace_properties(None) == {}


def test_one_send_per_queue() -> None:
    msgs = [Outbound("a", b"1", "1"), Outbound("b", b"2", "2"), Outbound("a", b"3", "3")]
    assert {q: [m.message_id for m in g] for q, g in by_queue(msgs).items()} == {"a": ["1", "3"], "b": ["2"]}


async def test_an_unconfigured_publisher_fails_as_transient() -> None:
    publisher = ServiceBusPublisher()
    with pytest.raises(PublishFailed, match="ServiceBusConnection"):
        await publisher.publish([Outbound("q", b"1", "1")])
    await publisher.publish([])  # nothing to send: nothing to connect
    await publisher.aclose()


async def test_an_unreachable_namespace_is_publish_failed() -> None:
    conn = "Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;SharedAccessKey=a2V5;UseDevelopmentEmulator=true"
    publisher = ServiceBusPublisher(connection_string=conn, retry_total=0)
    try:
        with pytest.raises(PublishFailed, match="publishing to Service Bus failed"):
            await publisher.publish([Outbound("q", b"1", "1")])
    finally:
        await publisher.aclose()


async def test_memory_publisher_shows_what_duplicate_detection_keeps() -> None:
    publisher = MemoryPublisher()
    await publisher.publish([Outbound("q", b"1", "a"), Outbound("q", b"1", "a"), Outbound("r", b"2", "a")])
    assert [m.body for m in publisher.delivered("q")] == [b"1"]


class FakeSender:
    """A sender over the SDK's own batch type; fails if two sends overlap, as the SDK's does."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self.sent: list[list[str]] = []
        self.inflight = 0
        self.closed = False

    async def create_message_batch(self) -> ServiceBusMessageBatch:
        return ServiceBusMessageBatch(max_size_in_bytes=self.max_size)

    async def send_messages(self, batch: ServiceBusMessageBatch) -> None:
        import asyncio

        self.inflight += 1
        assert self.inflight == 1, "concurrent send_messages on one sender"
        await asyncio.sleep(0.001)
        self.sent.append([m.message_id for m in batch._messages])
        self.inflight -= 1

    async def close(self) -> None:
        self.closed = True


class FakeClient:
    def __init__(self, max_size: int = 1 << 18) -> None:
        self.senders: dict[str, FakeSender] = {}
        self.max_size = max_size

    def get_queue_sender(self, queue: str) -> FakeSender:
        return self.senders.setdefault(queue, FakeSender(self.max_size))

    async def close(self) -> None:
        return None


async def test_one_batch_send_per_queue_and_a_new_batch_where_one_is_full() -> None:
    import asyncio

    client = FakeClient(max_size=2048)
    publisher = ServiceBusPublisher(client=client)
    results = [Outbound("risk-completed", b"x" * 300, f"e-{i}") for i in range(10)]
    await asyncio.gather(
        publisher.publish([*results[:5], Outbound("risk-rejected", b"{}", "m-1")]), publisher.publish(results[5:])
    )  # two invocations at once share one sender per queue, one send at a time
    completed = client.senders["risk-completed"].sent
    assert sorted(i for batch in completed for i in batch) == sorted(f"e-{i}" for i in range(10))
    assert all(len(batch) < 10 for batch in completed)  # split where the SDK's batch was full
    assert client.senders["risk-rejected"].sent == [["m-1"]]
    await publisher.aclose()
    assert all(s.closed for s in client.senders.values())
