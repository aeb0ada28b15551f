"""Azure Functions adapters: decode the binding, call the core, encode the result.

`function_app.py` only declares triggers and bindings and forwards to `handlers`.
One `ServiceHolder` per process: the HTTP, Service Bus and Blob functions share
the warm sessions, the batches and the caches.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import logging

import azure.functions as func
import orjson

from shared.build import ServiceHolder
from shared.errors import ScoringError, error_body
from shared.http import create_app
from shared.models.source import parse_model_path

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

        Transient failures (model not ready, inference error) raise, so Service Bus
        redelivers and dead-letters after its max delivery count. Input that can never
        score goes to the rejected queue with the reason and the original body.
        """
        service = await self.holder.get()
        try:
            scored = await service.score_json(msg.get_body())
        except ScoringError as exc:
            if exc.retryable:
                raise
            log.warning("rejected message %s: %s", msg.message_id, exc.code)
            rejected.set(rejection(msg, exc))
            return
        completed.set(orjson.dumps(scored.as_dict()).decode())

    async def model_blob(self, blob: func.InputStream) -> None:
        """A new `{name}/{version}/model.onnx` landed: load, validate, warm and swap it in.

        An invalid model is logged and not retried (retrying cannot fix the file);
        the serving version stays active.
        """
        service = await self.holder.get()
        ref = parse_model_path(blob.name or "", container=service.settings.models_container)
        if ref is None:
            log.warning("ignoring blob %s: not {name}/{version}/model.onnx", blob.name)
            return
        try:
            await service.install_model(ref, blob.read())
        except ScoringError as exc:
            if exc.retryable:
                raise
            log.error("model %s/%s rejected: %s", ref.name, ref.version, exc.detail)


def rejection(msg: func.ServiceBusMessage, exc: ScoringError) -> str:
    """The rejected-queue record: why, which message, and its body, so nothing is lost."""
    body = msg.get_body()
    try:
        original: dict[str, str] = {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        original = {"body_base64": base64.b64encode(body).decode()}
    record = {**error_body(exc), "message_id": msg.message_id, "delivery_count": msg.delivery_count, **original}
    return orjson.dumps(record).decode()


handlers = FunctionHandlers(ServiceHolder())
