"""The HTTP adapter: one Starlette ASGI app, served by `make run` and by Azure Functions.

Routes (the same paths locally and in Azure, where host.json's routePrefix is "api"):

    POST /api/score                 one payment event
    POST /api/models/{name}/score   one event, a named model
    POST /api/score/batch           {"events": [...]}: up to MAX_BATCH_ITEMS, answers in order
    GET  /api/models                loaded models and versions (pin, last rejected version)
    POST /api/models/{name}/activate  {"version": "3"}: pin it on every replica (rollback)
    DELETE /api/models/{name}/activate  release the pin: the newest version serves again
    GET  /api/reviews/{event_id}    the review of an event by Azure OpenAI (done, pending, failed)
    GET  /api/stats                 cache and batch counters
    GET  /api/metrics               every metric, Prometheus text format (shared/telemetry)
    GET  /api/health/live           the process answers
    GET  /api/health/ready          200 only once every model is loaded and warmed
    GET  /api/openapi.json          the OpenAPI 3.1 document of all of these (shared/openapi.py)
    /v2/...                         the Open Inference Protocol (V2) over the same core: shared/oip/rest.py

`POST /api/score` (the hot route) is served straight from ASGI by `score_lane`, ahead of
the framework's router; every other route goes through Starlette. Both give the same
answers, errors and telemetry (tests/test_http.py holds the two to it).

Each path answers the same with a trailing slash (the Functions host routes `score/` as
`score`); nothing redirects. A body must arrive whole within BODY_TIMEOUT_MS (else 408).
Every error is JSON `{"error": code, "detail": message}` with the status its class carries.
Once its body is read, a scoring request takes a slot of the core's admission control
(shared/admission.py), waiting for one up to MAX_QUEUE_WAIT_MS: past that wait, past
MAX_QUEUED waiting, or past REQUEST_TIMEOUT_MS of work, a 503 with Retry-After. (A slot
bounds work, not connections: a slow body holds none.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.answers import Batch, ErrorBody, IndexedError, Liveness, ModelList, encode, error_body
from shared.build import ServiceHolder
from shared.deadlines import Deadlines
from shared.errors import (
    BadRequest,
    BodyTimeout,
    Overloaded,
    PayloadTooLarge,
    ScoringError,
    UnsupportedMediaType,
    retry_after,
)
from shared.events import decode_activation
from shared.oip.rest import v2_routes
from shared.telemetry.asgi import Measured
from shared.telemetry.logs import rejections

if TYPE_CHECKING:
    from shared.service import ScoringService

__all__ = ["CatchAll", "create_app"]

log = logging.getLogger(__name__)


def json_response(body: object, status: int = 200) -> Response:
    return Response(encode(body), status_code=status, media_type="application/json")


async def read_json_body(
    request: Request, cap: int, timeout_s: float, deadlines: Deadlines, *, any_media_type: bool = False
) -> bytes:
    """The body of a JSON request, refusing other media types (unless `any_media_type`), bodies
    over `cap` bytes, and bodies not arrived whole within `timeout_s` (a stalled client must not
    hold a connection)."""
    return await read_body(request.scope, request.receive, cap, timeout_s, deadlines, any_media_type=any_media_type)


async def read_body(
    scope: Scope, receive: Receive, cap: int, timeout_s: float, deadlines: Deadlines, *, any_media_type: bool = False
) -> bytes:
    """`read_json_body` straight from ASGI (the scoring lane has no `Request`)."""
    media_type, declared = "", ""
    for name, value in scope["headers"]:  # NOTE: ASGI header names are lower-case bytes
        if name == b"content-type":
            media_type = value.decode("latin-1").partition(";")[0].strip().lower()
        elif name == b"content-length":
            declared = value.decode("latin-1")
    if not any_media_type and media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(f"expected content-type application/json, got {media_type or 'none'}")
    if declared.isascii() and declared.isdigit() and int(declared) > cap:  # NOTE: "²".isdigit(), int("²") fails
        raise PayloadTooLarge(f"body of {declared} bytes exceeds the {cap}-byte limit")
    task = deadlines.arm(timeout_s)
    chunks: list[bytes] = []
    size = 0
    try:
        while True:  # NOTE: straight from receive(): the per-request path, no async generator
            message = await receive()
            if message["type"] == "http.disconnect":
                # NOTE: Granian sends this for a body it cannot parse (a bad chunk) while the client
                # still waits, so it is the client's fault; to a client that did leave, no one answers.
                raise BadRequest("the request body was cut off or is malformed")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                raise PayloadTooLarge(f"body exceeds the {cap}-byte limit")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except asyncio.CancelledError:
        if deadlines.expired(task):
            raise BodyTimeout(f"the body did not arrive whole within {timeout_s * 1000:.0f} ms") from None
        raise
    finally:
        deadlines.disarm(task)


class CatchAll:
    """Outermost guard: an unexpected error becomes a JSON 500 and goes no further.

    NOTE: Starlette re-raises after its own 500 handler; under Azure Functions that would
    fail the invocation and the host would answer with its own body. Here it ends.
    """

    def __init__(self, app: ASGIApp, routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.routes = list(routes)  # what the app serves (tests hold the OpenAPI document to it)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except ClientDisconnect:
            return  # nobody to answer
        except Exception:
            log.exception("unhandled error on %s %s", scope.get("method"), scope.get("path"))
            if scope["type"] == "http" and not started:
                await json_response(ErrorBody("internal", "internal error"), 500)(scope, receive, send)


def create_app(holder: ServiceHolder, *, hosted: bool = False) -> ASGIApp:
    """The ASGI app over the service that `holder` builds (lazily, once).

    Nothing is read or built here: settings and the service come on first use, so a bad
    setting shows on /api/health/ready instead of breaking the Functions import.
    `hosted`: served by the Functions host, which records each request itself.
    """
    deadlines = Deadlines()  # NOTE: its sweeper task starts inside the running loop, on first use

    async def service() -> ScoringService:
        return await holder.get()

    async def score(request: Request) -> Response:
        started = time.perf_counter()
        settings = holder.settings
        body = await read_json_body(request, settings.max_body_bytes, settings.body_timeout_ms / 1000, deadlines)
        core = await service()
        async with core.admission.admitted():
            scored = await core.score_json(body, request.path_params.get("name"), started=started)
        request.scope["scoring"] = scored  # NOTE: the telemetry middleware reads its source and stage timings
        return json_response(scored)

    async def score_batch(request: Request) -> Response:
        settings = holder.settings
        body = await read_json_body(request, settings.max_body_bytes * 16, settings.body_timeout_ms / 1000, deadlines)
        core = await service()
        async with core.admission.admitted():
            results = await core.score_batch_json(body)
        return json_response(
            Batch(
                [
                    r if not isinstance(r, ScoringError) else IndexedError(i, r.code, r.detail)
                    for i, r in enumerate(results)
                ]
            )
        )

    async def activate(request: Request) -> Response:
        core = await service()
        name = request.path_params["name"]
        if request.method == "DELETE":
            return json_response(await core.unpin(name))
        body = await read_json_body(request, 1024, holder.settings.body_timeout_ms / 1000, deadlines)
        return json_response(await core.pin(name, decode_activation(body).version))

    async def models(request: Request) -> Response:
        return json_response(ModelList((await service()).models()))

    async def stats(request: Request) -> Response:
        return json_response((await service()).stats())

    async def review(request: Request) -> Response:
        return json_response(await (await service()).review(request.path_params["event_id"]))

    async def metrics(request: Request) -> Response:
        from shared.telemetry.setup import configure

        telemetry = configure(holder.settings) if holder.settings.telemetry else None
        if telemetry is None:
            return json_response(ErrorBody("not_found", "telemetry is off (TELEMETRY=false)"), 404)
        return Response(telemetry.prometheus_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def live(request: Request) -> Response:
        return json_response(Liveness("live"))

    async def ready(request: Request) -> Response:
        readiness = holder.readiness()
        return json_response(readiness, 200 if readiness.ready else 503)

    described: list[bytes] = []

    async def openapi(request: Request) -> Response:
        if not described:  # NOTE: built on the first request for it, never on an import path
            from shared.openapi import document_bytes

            described.append(document_bytes(holder.settings.max_batch_items))
        return Response(described[0], media_type="application/json")

    async def v2_body(request: Request) -> bytes:
        settings = holder.settings  # NOTE: a V2 request carries up to MAX_BATCH_ITEMS rows, like a batch
        cap, timeout_s = settings.max_body_bytes * 16, settings.body_timeout_ms / 1000
        return await read_json_body(request, cap, timeout_s, deadlines, any_media_type=True)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await holder.get()
        except ScoringError as exc:  # NOTE: stay up; readiness says why and the next request retries
            log.error("service failed to start: %s", exc.detail)
        yield
        await holder.aclose()

    v2 = v2_routes(service, v2_body)
    routes = [
        Route("/api/score", score, methods=["POST"]),
        *v2[:2],  # NOTE: V2 infer next: Starlette tries routes in order, on every request
        Route("/api/score/batch", score_batch, methods=["POST"]),
        Route("/api/models/{name}/score", score, methods=["POST"]),
        Route("/api/models", models, methods=["GET"]),
        Route("/api/models/{name}/activate", activate, methods=["POST", "DELETE"]),
        Route("/api/reviews/{event_id}", review, methods=["GET"]),
        Route("/api/stats", stats, methods=["GET"]),
        Route("/api/metrics", metrics, methods=["GET"]),
        Route("/api/health/live", live, methods=["GET"]),
        Route("/api/health/ready", ready, methods=["GET"]),
        *v2[2:],
        Route("/api/openapi.json", openapi, methods=["GET"]),
    ]
    app = Starlette(
        routes=routes + [_slashed(route) for route in routes],  # NOTE: after the originals: the hot path matches first
        exception_handlers={ScoringError: _scoring_error, HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False  # NOTE: its 307 builds Location from the client's Host header
    score_route = routes[0]

    async def score_lane(scope: Scope, receive: Receive, send: Send) -> int:
        """POST /api/score straight from ASGI: the same answer as the framework's route, less
        per-request work (no Request, no router scan, no Response object); returns the status."""
        started = time.perf_counter()
        scope["route"] = score_route  # NOTE: the telemetry reads the route template here
        wait: str | None = None
        try:
            settings = holder.settings  # NOTE: a bad setting is a 503 naming it, like on every route
            body = await read_body(scope, receive, settings.max_body_bytes, settings.body_timeout_ms / 1000, deadlines)
            core = holder.peek() or await holder.get()
            async with core.admission.admitted():
                scored = await core.score_json(body, None, started=started)
            scope["scoring"] = scored
            payload, status = encode(scored), 200
        except ScoringError as exc:
            _log_error(exc, scope["method"], scope["path"], score_route.path)
            payload, status, wait = encode(error_body(exc)), exc.status, retry_after(exc)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        if wait is not None:
            headers.append((b"retry-after", wait.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        return status

    measured = Measured(app, lambda: holder.settings.telemetry, hosted=hosted)

    async def lanes(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in SCORE_PATHS or scope["method"] != "POST":
            await measured(scope, receive, send)
        elif (core := holder.peek()) is not None and core.admission.refuses():
            # NOTE: shed before any work, with bytes built once: under overload a refusal must cost
            # next to nothing, or refusing alone fills the loop (counted in scoring.requests.shed)
            await send(SHED_START)
            await send(SHED_BODY)
        elif not measured.on:
            await score_lane(scope, receive, send)
        else:  # NOTE: measured here, without the middleware's `send` wrapper: the lane knows its status
            started, span = measured.begin(scope)
            status = 500
            try:
                status = await score_lane(scope, receive, send)
            finally:
                measured.end(scope, status, started, span)

    return CatchAll(lanes, routes)


SCORE_PATHS = frozenset(("/api/score", "/api/score/"))
_SHED = encode(
    error_body(Overloaded("the service is at capacity (MAX_INFLIGHT busy, MAX_QUEUED waiting): try again shortly"))
)
SHED_START: Message = {
    "type": "http.response.start",
    "status": Overloaded.status,
    "headers": [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_SHED)).encode()),
        (b"retry-after", b"1"),
    ],
}
SHED_BODY: Message = {"type": "http.response.body", "body": _SHED}


def _log_error(exc: ScoringError, method: str, path: str, route: str) -> None:
    if isinstance(exc, Overloaded):
        return  # NOTE: a line per refusal would cost what shedding saves: scoring.requests.shed counts them
    if exc.status >= 500:
        log.warning("%s %s -> %s: %s", method, path, exc.status, exc.detail)
    else:
        rejections.rejected("http", exc.code, exc.detail, status=exc.status, route=route.rstrip("/"))


def _slashed(route: Route) -> Route:
    """The same endpoint at `path/`: the Functions host routes `score/` as `score`."""
    return Route(route.path + "/", route.endpoint, methods=route.methods)


async def _scoring_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ScoringError)  # noqa: S101 narrows the type: Starlette routes only ScoringError here
    _log_error(exc, request.method, request.url.path, _route(request))
    response = json_response(error_body(exc), exc.status)
    if (wait := retry_after(exc)) is not None:
        response.headers["retry-after"] = wait
    return response


def _route(request: Request) -> str:
    return str(getattr(request.scope.get("route"), "path", ""))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # noqa: S101 narrows the type: Starlette routes only HTTPException here
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return json_response(ErrorBody(code, exc.detail), exc.status_code)


async def _internal_error(request: Request, exc: Exception) -> Response:
    # NOTE: Starlette sends this, then re-raises; CatchAll logs the error once and ends it there.
    return json_response(ErrorBody("internal", "internal error"), 500)
