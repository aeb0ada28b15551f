"""Azure Functions adapters: decode the binding, call the core, encode the result.

`function_app.py` only declares triggers and bindings and forwards to these.
One `ServiceHolder` per process: the HTTP, Service Bus and Blob functions share
the warm sessions, the batches and the caches.
"""

from __future__ import annotations

import base64
import logging

import azure.functions as func
import orjson

from shared.build import ServiceHolder
from shared.errors import ScoringError, error_body
from shared.http import create_app
from shared.models.source import parse_model_path

__all__ = ["handle_http", "handle_model_blob", "handle_payment", "holder"]

log = logging.getLogger(__name__)

holder = ServiceHolder()
_asgi = func.AsgiMiddleware(create_app(holder))


async def handle_http(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    """Every HTTP route: the same ASGI app that `make run` serves."""
    return await _asgi.handle_async(req, context)


async def handle_payment(msg: func.ServiceBusMessage, completed: func.Out[str], rejected: func.Out[str]) -> None:
    """Score one queued payment; publish the result, or reject it with the reason.

    Transient failures (model not ready, inference error) raise, so Service Bus
    redelivers and dead-letters after its max delivery count. Input that can never
    score is published to the rejected queue with the reason and the original body.
    """
    service = await holder.get()
    try:
        scored = await service.score_json(msg.get_body())
    except ScoringError as exc:
        if exc.retryable:
            raise
        log.warning("rejected message %s: %s", msg.message_id, exc.code)
        rejected.set(rejection(msg, exc))
        return
    completed.set(orjson.dumps(scored.as_dict()).decode())


def rejection(msg: func.ServiceBusMessage, exc: ScoringError) -> str:
    """The rejected-queue record: why, which message, and its body, so nothing is lost."""
    body = msg.get_body()
    try:
        original: dict[str, str] = {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        original = {"body_base64": base64.b64encode(body).decode()}
    record = {**error_body(exc), "message_id": msg.message_id, "delivery_count": msg.delivery_count, **original}
    return orjson.dumps(record).decode()


async def handle_model_blob(blob: func.InputStream) -> None:
    """A new `{name}/{version}/model.onnx` landed: load, validate, warm and swap it in.

    An invalid model is logged and not retried (retrying cannot fix the file);
    the serving version stays active.
    """
    service = await holder.get()
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
