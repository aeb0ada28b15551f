"""Azure Functions adapters: decode the binding, call the core, encode the result.

`function_app.py` only declares triggers and bindings and forwards to `handlers`.
One `ServiceHolder` per process: the HTTP, Service Bus and Blob functions share
the warm sessions, the batches and the caches.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import logging
import time

import azure.functions as func
import orjson

from shared.build import ServiceHolder
from shared.errors import PayloadTooLarge, ScoringError, error_body
from shared.events import decode_event
from shared.http import create_app
from shared.models.source import check_size, parse_model_path

__all__ = ["FunctionHandlers", "handlers", "rejection"]

log = logging.getLogger(__name__)

# What building the service imports; loaded in a thread at warm-up so the worker's loop stays free.
_HEAVY_MODULES = ("numpy", "onnxruntime", "redis.asyncio", "shared.service", "shared.build")


class FunctionHandlers:
    """The three trigger bodies over one lazily built service."""

    def __init__(self, holder: ServiceHolder) -> None:
        self.holder = holder
        self._asgi = func.AsgiMiddleware(create_app(holder))  # type: ignore[no-untyped-call,unused-ignore]
        self._warm_up: asyncio.Task[None] | None = None

    def warm_up_soon(self) -> None:
        """Start building the service now if a worker's loop is running, else on first use.

        NOTE: the Python worker imports function_app.py on its one event loop (the loop that
        later runs every async function), so a task created here starts right after
        indexing: models load before the first probe or message instead of during it.
        Imported by a tool or a test (no running loop), this does nothing.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._warm_up is None:
            self._warm_up = loop.create_task(self._warm())

    async def _warm(self) -> None:
        for name in _HEAVY_MODULES:  # NOTE: an import holds the loop; in a thread it does not
            await asyncio.to_thread(importlib.import_module, name)
        try:
            await self.holder.get()
        except ScoringError as exc:  # NOTE: readiness says why; the next probe or call retries
            log.error("warm-up failed: %s", exc.detail)

    async def http(self, req: func.HttpRequest, context: func.Context | None = None) -> func.HttpResponse:
        """Every HTTP route: the same ASGI app that `make run` serves."""
        response: func.HttpResponse = await self._asgi.handle_async(req, context)
        return response

    async def payment(self, msg: func.ServiceBusMessage, completed: func.Out[str], rejected: func.Out[str]) -> None:
        """Score one queued payment; publish the result, or reject it with the reason.

        Per cause: the message's own fault (too large, unreadable, invalid, a model it
        names that does not exist) is rejected at once, with the reason, whatever state
        the service is in; the service's state or configuration (models still loading,
        DEFAULT_MODEL not loaded, a bad setting, an inference failure) raises, so Service
        Bus redelivers and dead-letters after its max delivery count, and readiness says why.
        """
        body = msg.get_body()
        started = time.perf_counter()
        try:
            cap = self.holder.settings.max_message_bytes
            if len(body) > cap:
                raise PayloadTooLarge(f"message of {len(body)} bytes exceeds MAX_MESSAGE_BYTES ({cap})")
            event = decode_event(body)
            service = await self.holder.get()
            scored = await service.score(event, parse_s=time.perf_counter() - started)
        except ScoringError as exc:
            if exc.retryable:
                raise
            log.warning("rejected message %s: %s", msg.message_id, exc.code)
            rejected.set(rejection(msg, exc))
            return
        completed.set(orjson.dumps(scored.as_dict()).decode())

    async def model_blob(self, blob: func.InputStream) -> None:
        """A new `{name}/{version}/model.onnx` landed: load, validate, warm and swap it in.

        An invalid model (bad name or version, over MAX_MODEL_BYTES, not servable) is
        logged and not retried (retrying cannot fix the file); the serving version stays.
        """
        service = await self.holder.get()
        ref = parse_model_path(blob.name or "", container=service.settings.models_container)
        if ref is None:
            log.warning("ignoring blob %s: not {name}/{version}/model.onnx (see shared/models/source.py)", blob.name)
            return
        try:
            check_size(blob.length or 0, service.settings.max_model_bytes, ref)  # NOTE: before reading it
            await service.install_model(ref, blob.read())
        except ScoringError as exc:
            if exc.retryable:
                raise
            log.error("model %s/%s rejected: %s", ref.name, ref.version, exc.detail)


# A record keeps a body up to this size whole; past it (far beyond any valid event) an excerpt,
# the size and a SHA-256 identify it, so the record stays within the output queue's message size.
WHOLE_BODY_BYTES = 64 * 1024
EXCERPT_BYTES = 1024


def rejection(msg: func.ServiceBusMessage, exc: ScoringError) -> str:
    """The rejected-queue record: why, which message, and its body (or an excerpt when huge)."""
    body = msg.get_body()
    record: dict[str, object] = {
        **error_body(exc),
        "message_id": msg.message_id,
        "delivery_count": msg.delivery_count,
        "body_bytes": len(body),
    }
    if len(body) > WHOLE_BODY_BYTES:
        record["body_sha256"] = hashlib.sha256(body).hexdigest()
        record["truncated"] = True
        body = body[:EXCERPT_BYTES]
    try:
        record["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        record["body_base64"] = base64.b64encode(body).decode()
    return orjson.dumps(record).decode()


handlers = FunctionHandlers(ServiceHolder())
