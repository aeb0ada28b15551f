"""Sending results to Service Bus, behind a small seam.

The Python output binding sets the body only (no MessageId, CorrelationId or
application properties), so results go through the azure-servicebus SDK:
`message_id = event_id` lets the queue's duplicate detection drop a republish, and the
correlation id and W3C trace context travel on. One client and one sender per queue
per process, created inside the running loop on first use; one batch send per queue
per invocation. `MemoryPublisher` is the fake for handler tests (and replay's sink):
it records what was sent and, like the queue, can show it deduplicated by message id.

azure.servicebus is imported inside functions only: never on function_app's import path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from shared.adapters.queue.messages import Outbound
from shared.errors import PublishFailed

if TYPE_CHECKING:
    from azure.servicebus import ServiceBusMessage

__all__ = ["MemoryPublisher", "Publisher", "ServiceBusPublisher", "to_sdk_message"]


class Publisher(Protocol):
    """Sends messages; a failure raises `PublishFailed` (and may have sent some of them)."""

    async def publish(self, messages: Sequence[Outbound]) -> None: ...

    async def aclose(self) -> None: ...


class MemoryPublisher:
    """Records every publish; `down=True` fails them, as an unreachable namespace would."""

    def __init__(self) -> None:
        self.sent: list[Outbound] = []
        self.down = False

    async def publish(self, messages: Sequence[Outbound]) -> None:
        if self.down:
            raise PublishFailed("publisher: down")
        self.sent.extend(messages)

    def delivered(self, queue: str) -> list[Outbound]:
        """What a queue with duplicate detection keeps: the first message of each message id."""
        seen: dict[str, Outbound] = {}
        for message in self.sent:
            if message.queue == queue:
                seen.setdefault(message.message_id, message)
        return list(seen.values())

    async def aclose(self) -> None:
        return None


def to_sdk_message(message: Outbound) -> ServiceBusMessage:
    """The SDK message: body, MessageId, CorrelationId, trace context as application properties."""
    from azure.servicebus import ServiceBusMessage

    return ServiceBusMessage(
        message.body,
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        application_properties=dict(message.properties) or None,  # type: ignore[arg-type]
        content_type="application/json",
    )


def by_queue(messages: Sequence[Outbound]) -> dict[str, list[Outbound]]:
    grouped: dict[str, list[Outbound]] = {}
    for message in messages:
        grouped.setdefault(message.queue, []).append(message)
    return grouped


class ServiceBusPublisher:
    """The SDK sender: a connection string locally, managed identity (namespace) in Azure."""

    def __init__(
        self,
        *,
        connection_string: str | None = None,
        namespace: str | None = None,
        client: Any = None,
        **client_options: Any,
    ) -> None:
        self._options = client_options  # e.g. retry_total; the SDK's defaults otherwise
        self._connection_string = connection_string
        self._namespace = namespace
        self._client: Any = client  # an already built `azure.servicebus.aio.ServiceBusClient`, else built here
        self._locks: dict[str, asyncio.Lock] = {}
        self._credential: Any = None
        self._senders: dict[str, Any] = {}

    def _connect(self) -> Any:
        """The SDK client; a client that cannot be built (settings, a missing package) is `PublishFailed`.

        azure.identity.aio's DefaultAzureCredential raises ImportError when aiohttp is not
        installed (its async transport); translated here, it fails the messages with its reason
        instead of escaping as an invocation error without a verdict.
        """
        if not self._connection_string and not self._namespace:
            raise PublishFailed("neither ServiceBusConnection nor ServiceBusConnection__fullyQualifiedNamespace is set")
        try:
            from azure.servicebus.aio import ServiceBusClient

            if self._connection_string:
                return ServiceBusClient.from_connection_string(self._connection_string, **self._options)
            from azure.identity.aio import DefaultAzureCredential

            self._credential = DefaultAzureCredential()
        except ImportError as exc:
            raise PublishFailed(f"the Service Bus client cannot be built: {exc}") from exc
        return ServiceBusClient(str(self._namespace), self._credential, **self._options)

    async def publish(self, messages: Sequence[Outbound]) -> None:
        from azure.core.exceptions import AzureError
        from azure.servicebus.exceptions import ServiceBusError

        if not messages:
            return
        try:
            if self._client is None:
                self._client = self._connect()  # inside the running loop, once per process
            for queue, group in by_queue(messages).items():
                # NOTE: one send at a time per sender: concurrent send_messages on one async sender
                # fails (Azure/azure-sdk-for-python#36334, open; a lock is the known workaround).
                async with self._locks.setdefault(queue, asyncio.Lock()):
                    sender = self._senders.get(queue)
                    if sender is None:
                        sender = self._senders[queue] = self._client.get_queue_sender(queue)
                    await self._send(sender, group)
        except (ServiceBusError, AzureError, OSError) as exc:
            raise PublishFailed(f"publishing to Service Bus failed: {type(exc).__name__}") from exc

    @staticmethod
    async def _send(sender: Any, group: list[Outbound]) -> None:
        """One batch send when it fits; a new batch where the previous one is full."""
        from azure.servicebus.exceptions import MessageSizeExceededError

        batch = await sender.create_message_batch()
        for message in group:
            sdk = to_sdk_message(message)
            try:
                batch.add_message(sdk)
            except MessageSizeExceededError:
                await sender.send_messages(batch)
                batch = await sender.create_message_batch()
                batch.add_message(sdk)
        await sender.send_messages(batch)

    async def aclose(self) -> None:
        for sender in self._senders.values():
            await sender.close()
        self._senders.clear()
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._credential is not None:
            await self._credential.close()
            self._credential = None
