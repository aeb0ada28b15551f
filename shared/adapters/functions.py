"""Azure Functions adapters: decode the binding, call the core, encode the result.

`function_app.py` only declares triggers and bindings and forwards to `handlers`.
One `ServiceHolder` per process: the HTTP, Service Bus and Blob functions share
the warm sessions, the batches and the caches.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from typing import TYPE_CHECKING

import azure.functions as func
from msgspec import to_builtins

from shared.adapters.answered import log_answered
from shared.adapters.http.app import create_app
from shared.adapters.http.routes import framed
from shared.adapters.oip.jobs import grpc_server
from shared.adapters.queue.budget import BatchBudget
from shared.adapters.queue.handler import QueueHandler
from shared.adapters.queue.idempotency import ResultStore
from shared.adapters.queue.messages import Incoming, trace_properties
from shared.adapters.queue.publisher import Publisher
from shared.core.holder import ServiceHolder
from shared.domain.answers import error_body
from shared.errors import BadRequest, BatchIncomplete, ScoringError, SettingsError
from shared.models.repository import check_size, parse_model_path
from shared.runtime.doctor import WORKER_LOGGERS

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message

    from shared.core.service import ScoringService

__all__ = ["FunctionHandlers", "call_asgi", "handlers", "incoming", "quiet_worker_logs", "scoring_path"]

log = logging.getLogger(__name__)

# What building the service imports; loaded in a thread at warm-up so the worker's loop stays free.
_HEAVY_MODULES = (
    "numpy",
    "onnxruntime",
    "redis.asyncio",
    "shared.core.service",
    "shared.core.wiring",
    "azure.servicebus.aio",
)


class FunctionHandlers:
    """The three trigger bodies over one lazily built service."""

    def __init__(
        self, holder: ServiceHolder, *, publisher: Publisher | None = None, store: ResultStore | None = None
    ) -> None:
        self.holder = holder
        self.publisher = publisher  # the seams of the queue path; None: built from settings
        self.store = store
        self._queue: QueueHandler | None = None
        self._app = create_app(holder, hosted=True)
        self._asgi = func.AsgiMiddleware(self._app)  # type: ignore[no-untyped-call,unused-ignore]
        self._warm_up: asyncio.Task[None] | None = None

    def warm_up_soon(self) -> None:
        """Start building the service now if a worker's loop is running, else on first use.

        The Python worker imports function_app.py on its one event loop (the loop that
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
        except ScoringError as exc:  # readiness says why; the next probe or call retries
            log.error("warm-up failed: %s", exc.detail)

    async def http(self, req: func.HttpRequest, context: func.Context | None = None) -> func.HttpResponse:
        """Every HTTP route: the same ASGI app that `make run` serves.

        The scoring routes are framed here in a few lines (`call_asgi`); every other route
        goes through `func.AsgiMiddleware`, whose general bridge costs a large share of an
        invocation's worker CPU on the hot route (docs/capacity.md). Same app, same answers.
        """
        if req.method == "POST" and (path := scoring_path(req.url)) is not None:
            return await call_asgi(self._app, req, path)
        try:
            response: func.HttpResponse = await self._asgi.handle_async(req, context)
        except UnicodeDecodeError:  # AsgiMiddleware decodes the path as UTF-8 before the app runs
            body = to_builtins(error_body(BadRequest("the request path is not UTF-8 once percent-decoded")))
            return func.HttpResponse(json.dumps(body), status_code=400, mimetype="application/json")
        return response

    async def payments(self, msgs: list[func.ServiceBusMessage]) -> None:
        """Score one batch of queued payments; publish each result once, reject what can never score.

        A message's own fault (too large, unreadable, invalid) is rejected at once and the rest
        is scored. A transient failure (result store down, models not ready, publishing failed)
        fails only its messages, after everything else was kept and published: then this
        raises, the host abandons the whole batch, and the redelivery republishes the kept
        results byte for byte under the same message ids, which duplicate detection drops.
        """
        handled = await self.queue().handle([incoming(m) for m in msgs])
        for verdict in handled:
            if verdict.outcome == "rejected" and verdict.error is not None:
                log_answered(verdict.error, "queue", message_id=verdict.message_id)
        failed = [h for h in handled if h.outcome == "failed"]
        if failed:
            raise BatchIncomplete(
                f"{len(failed)} of {len(handled)} messages failed and the batch is redelivered: {failed[0].reason}"
            )

    async def outcomes(self, msgs: list[func.ServiceBusMessage]) -> None:
        """Keep one batch of queued outcomes (shared/adapters/queue/outcomes.py); what can never be
        kept goes to risk-rejected. The store down past the batch budget, or no prediction log to
        keep them beside: this raises, and the host redelivers the batch (held, never dropped)."""
        from shared.adapters.queue.outcomes import OutcomeQueue
        from shared.core.outcomes import NO_LOG

        desk = self.holder.outcomes()
        if desk is None:
            raise SettingsError(NO_LOG)
        settings = self.holder.settings
        queue = OutcomeQueue(
            desk,
            self.queue().publisher,
            max_message_bytes=settings.max_message_bytes,
            budget=BatchBudget.of(settings.queue_batch_budget_ms),
        )
        for taken in await queue.handle([incoming(m) for m in msgs]):
            if taken.error is not None:
                log_answered(taken.error, "queue", message_id=taken.message_id)

    def queue(self) -> QueueHandler:
        """The queue path's handler, built on first use (its Redis and Service Bus clients lazily)."""
        if self._queue is None:
            settings = self.holder.settings
            if settings.telemetry:  # NOTE: before the first batch opens its spans, not when its service builds
                from shared.telemetry.setup import configure

                configure(settings)
            self._queue = QueueHandler.from_settings(
                settings, self.holder.get, store=self.store, publisher=self.publisher
            )
        return self._queue

    async def aclose(self) -> None:
        """Close the queue path's clients and the service."""
        if self._queue is not None:
            await self._queue.aclose()
            self._queue = None
        await self.holder.aclose()

    async def model_blob(self, blob: func.InputStream) -> None:
        """A new `{name}/{version}/model.onnx` landed: load, validate, warm and swap it in.

        An invalid model (bad name or version, over MAX_MODEL_BYTES, not servable) is
        logged and not retried (retrying cannot fix the file); the serving version stays.
        """
        service = await self.holder.get()
        ref = parse_model_path(blob.name or "", container=service.limits.models_container)
        if ref is None:
            log.warning(
                "ignoring blob %s: not {name}/{version}/model.onnx (see shared/models/repository.py)", blob.name
            )
            return
        try:
            check_size(blob.length or 0, service.limits.max_model_bytes, ref)  # NOTE: before reading it
            await service.admin.install_model(ref, blob.read())
        except ScoringError as exc:
            if exc.retryable:
                raise
            log.error("model %s/%s rejected: %s", ref.name, ref.version, exc.detail)


# The data-plane routes of the route table, as the host hands their URLs.
_SCORING = framed()


def scoring_path(url: str) -> tuple[str, str] | None:
    """(path, query) of a scoring route's URL, else None."""
    match = _SCORING.match(url)
    return None if match is None else (match[1], match[2] or "")


async def call_asgi(app: ASGIApp, req: func.HttpRequest, path: tuple[str, str]) -> func.HttpResponse:
    """One request through `app` with its whole body, the answer collected: an ASGI server's framing."""
    body = req.get_body()
    sent = False
    status, headers, chunks = 500, [], []

    async def receive() -> Message:
        nonlocal sent
        if sent:
            await asyncio.Future()  # nothing more comes: a disconnect is never reported
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], message.get("headers", [])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": path[0],
        "raw_path": path[0].encode(),
        "query_string": path[1].encode("latin-1"),
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in req.headers.items()],
        "client": None,
        "server": None,
    }
    await app(scope, receive, send)
    decoded = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
    return func.HttpResponse(
        b"".join(chunks), status_code=status, headers=decoded, mimetype=decoded.get("content-type")
    )


def quiet_worker_logs(service: ScoringService) -> None:
    """Leave the Python worker's own loggers at WARNING: their INFO lines are one or two per invocation.

    The worker writes "Received FunctionInvocationRequest" / "Function name: ..." at INFO
    for every invocation, each a gRPC message to the host, which files the worker's
    system-category logs in the platform's own store, not the app's Application Insights; the
    host logs each execution itself. Their cost is measured in docs/capacity.md. Their warnings and errors still flow. (No setting: one would have to be
    set on the Container App; the worker's own debug switch is the platform's.)
    """
    for name in WORKER_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def incoming(msg: func.ServiceBusMessage) -> Incoming:
    """The transport-free message: body, ids, delivery count, enqueued time, trace context."""
    return Incoming(
        message_id=msg.message_id or "",
        body=msg.get_body(),
        delivery_count=msg.delivery_count or 1,
        enqueued_time=msg.enqueued_time_utc,
        correlation_id=msg.correlation_id,
        properties=trace_properties(msg.application_properties),
    )


# NOTE: every address: the environment's ingress reaches the gRPC port on the container's interface (internal only)
_ANY = "0.0.0.0"  # noqa: S104
handlers = FunctionHandlers(ServiceHolder(on_built=[grpc_server(_ANY), quiet_worker_logs]))
