"""The HTTP adapter: one Starlette ASGI app, served by `make run` and by Azure Functions.

Its routes are the route table's (shared/adapters/http/routes.py: the same paths locally and
in Azure, where host.json's routePrefix is ""); `/v2/...` is the Open Inference Protocol over
the same core (shared/adapters/oip/rest.py). Each endpoint decodes, calls one core method and
encodes the answer; admission, deadlines and the error-logging policy are the core's and the
error tree's (shared/runtime/admission.py, shared/errors.py).

The two single-event scoring routes (`POST /api/score`, `POST /api/models/{name}/score`) are
also served straight from ASGI by `FastPath`, ahead of the router: framing (no Request, no
router scan, no Response object) around the same `score_answer` the framework route calls.

Each path answers the same with a trailing slash (the Functions host routes `score/` as
`score`); nothing redirects. A body must arrive whole within BODY_TIMEOUT_MS (else 408).
Every error is JSON `{"error": code, "detail": message}` with the status its class carries.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.adapters.answered import log_answered
from shared.adapters.http.body import read_body, read_json_body
from shared.adapters.http.routes import ROUTES
from shared.adapters.oip.rest import V2Endpoints
from shared.core.holder import ServiceHolder
from shared.domain.answers import (
    Batch,
    ErrorBody,
    IndexedError,
    Liveness,
    ModelList,
    Readiness,
    V2Error,
    encode,
    error_body,
)
from shared.domain.control import decode_note
from shared.domain.events import decode_activation, decode_canary
from shared.errors import Overloaded, ScoringError, retry_after
from shared.runtime.deadlines import Deadlines
from shared.stores.control import Actor
from shared.telemetry.asgi import Measured

if TYPE_CHECKING:
    from shared.core.service import ScoringService

__all__ = ["CatchAll", "Endpoints", "FastPath", "create_app"]

log = logging.getLogger(__name__)

JSON = "application/json"
PRINCIPAL = "x-ms-client-principal-name"  # Container Apps authentication (Easy Auth)


def json_response(body: object, status: int = 200) -> Response:
    return Response(encode(body), status_code=status, media_type=JSON)


class Endpoints:
    """The `/api` endpoints over the service `holder` builds; each method is the route of its name."""

    def __init__(self, holder: ServiceHolder, *, hosted: bool = False) -> None:
        self.holder = holder
        self.hosted = hosted
        self.deadlines = Deadlines()  # its sweeper task starts inside the running loop, on first use
        self._openapi: bytes | None = None

    async def core(self) -> ScoringService:
        return self.holder.peek() or await self.holder.get()

    async def body(self, request: Request, cap: int, *, any_media_type: bool = False) -> bytes:
        timeout_s = self.holder.settings.body_timeout_ms / 1000
        return await read_json_body(request, cap, timeout_s, self.deadlines, any_media_type=any_media_type)

    # -- the data plane ------------------------------------------------------------

    async def score_answer(self, scope: Scope, receive: Receive, model: str | None) -> bytes:
        """One event scored, encoded: the one score function (the route below and `FastPath`)."""
        started = time.perf_counter()
        settings = self.holder.settings  # a bad setting is a 503 naming it, like on every route
        timeout_s = settings.body_timeout_ms / 1000
        body = await read_body(scope, receive, settings.max_body_bytes, timeout_s, self.deadlines)
        query: bytes = scope.get("query_string", b"")
        explain = bool(query) and _explains(query)
        scored = await (await self.core()).score_json(body, model, started=started, explain=explain)
        scope["scoring"] = scored  # the telemetry reads its source and stage timings
        return encode(scored)

    async def score(self, request: Request) -> Response:
        return Response(await self.score_answer(request.scope, request.receive, None), media_type=JSON)

    async def model_score(self, request: Request) -> Response:
        name = request.path_params["name"]
        return Response(await self.score_answer(request.scope, request.receive, name), media_type=JSON)

    async def score_batch(self, request: Request) -> Response:
        body = await self.body(request, self.holder.settings.max_body_bytes * 16)
        results = await (await self.core()).score_batch_json(body)
        return json_response(
            Batch(
                [
                    r if not isinstance(r, ScoringError) else IndexedError(i, r.code, r.detail)
                    for i, r in enumerate(results)
                ]
            )
        )

    async def v2_body(self, request: Request) -> bytes:
        """A V2 request carries up to MAX_BATCH_ITEMS rows, like a batch, in any media type."""
        return await self.body(request, self.holder.settings.max_body_bytes * 16, any_media_type=True)

    # -- the admin plane -----------------------------------------------------------

    async def outcomes(self, request: Request) -> Response:
        desk = self.holder.outcomes()
        if desk is None:
            from shared.core.outcomes import NO_LOG

            return json_response(ErrorBody("not_found", NO_LOG), 404)
        body = await self.body(request, self.holder.settings.max_body_bytes * 16)
        return json_response(await desk.take_json(body))

    async def models(self, request: Request) -> Response:
        return json_response(ModelList((await self.core()).models()))

    # the control routes below take the master key under the host (the route table's "admin"
    # auth); each passes who called and why (`Actor`) to the core, which audits the action.

    async def model_activate(self, request: Request) -> Response:
        core, name = await self.core(), request.path_params["name"]
        body, by = await self.control_body(request)
        if request.method == "DELETE":
            return json_response(await core.admin.unpin(name, by=by))
        activation = decode_activation(body)
        pinned = core.admin.pin(name, activation.version, by=by, allow_never_decline=activation.allow_never_decline)
        return json_response(await pinned)

    async def model_rollout(self, request: Request) -> Response:
        core, name = await self.core(), request.path_params["name"]
        view = core.admin.rollout(name)
        return json_response(msgspec.structs.replace(view, actions=await core.admin.control_actions(name)))

    async def model_shadow(self, request: Request) -> Response:
        core, name = await self.core(), request.path_params["name"]
        body, by = await self.control_body(request)
        if request.method == "DELETE":
            return json_response(await core.admin.set_shadow(name, None, by=by))
        return json_response(await core.admin.set_shadow(name, decode_activation(body).version, by=by))

    async def model_canary(self, request: Request) -> Response:
        core, name = await self.core(), request.path_params["name"]
        body, by = await self.control_body(request)
        if request.method == "DELETE":
            return json_response(await core.admin.abort_canary(name, by=by))
        split = decode_canary(body)
        return json_response(await core.admin.set_canary(name, split.version, split.weight, by=by))

    async def model_promote(self, request: Request) -> Response:
        _, by = await self.control_body(request)
        return json_response(await (await self.core()).admin.promote_canary(request.path_params["name"], by=by))

    async def control_body(self, request: Request) -> tuple[bytes, Actor]:
        """A control call's body (at most 1 KiB of JSON; DELETE and promote may send none) and its actor."""
        bodiless = request.method == "DELETE" or request.url.path.rstrip("/").endswith("/promote")
        body = await self.body(request, 1024, any_media_type=bodiless and not request.headers.get("content-type"))
        return body, Actor(self.caller(request), decode_note(body).reason)

    def caller(self, request: Request) -> str:
        """Who made a control call: the Entra principal that Container Apps authentication vouches
        for (it sets this header and drops a client's own), else the key the host required."""
        principal = request.headers.get(PRINCIPAL)
        if principal:
            return f"principal {principal}"
        if self.hosted:
            return "admin key"  # AuthLevel.ADMIN: the host let only the master key through
        client = request.client.host if request.client is not None else "?"
        return f"local {client}"

    async def reviews(self, request: Request) -> Response:
        return json_response(await (await self.core()).admin.review(request.path_params["event_id"]))

    async def stats(self, request: Request) -> Response:
        stats = (await self.core()).stats()
        return json_response(msgspec.structs.replace(stats, readiness=self.holder.readiness()))

    async def metrics(self, request: Request) -> Response:
        from shared.telemetry.setup import configure

        telemetry = configure(self.holder.settings) if self.holder.settings.telemetry else None
        if telemetry is None:
            return json_response(ErrorBody("not_found", "telemetry is off (TELEMETRY=false)"), 404)
        return Response(telemetry.prometheus_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def health(self, request: Request) -> Response:
        probe = request.path_params["probe"]
        if probe == "live":
            return json_response(Liveness("live"))
        if probe != "ready":
            raise HTTPException(404)
        readiness = self.holder.readiness()
        if self.hosted:  # NOTE: anonymous under the host: ready or not, no more; the why is keyed (/api/stats)
            readiness = Readiness(status=readiness.status, models=[])
        return json_response(readiness, 200 if readiness.ready else 503)

    async def openapi(self, request: Request) -> Response:
        if self._openapi is None:  # NOTE: built on the first request for it, never on an import path
            from shared.adapters.http.openapi import document_bytes

            self._openapi = document_bytes(self.holder.settings.max_batch_items)
        return Response(self._openapi, media_type=JSON)


def create_app(holder: ServiceHolder, *, hosted: bool = False) -> ASGIApp:
    """The ASGI app over the service that `holder` builds (lazily, once).

    Nothing is read or built here: settings and the service come on first use, so a bad
    setting shows on /api/health/ready instead of breaking the Functions import.
    `hosted`: served by the Functions host, which records each request itself.
    """
    api = Endpoints(holder, hosted=hosted)
    v2 = V2Endpoints(api.core, api.v2_body)
    routes = [Route(spec.path, getattr(api, spec.name, None) or v2.endpoint(spec.name), methods=list(spec.methods))
              for spec in ROUTES]  # fmt: skip

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            await holder.get()
        except ScoringError as exc:  # stay up; readiness says why and the next request retries
            log.error("service failed to start: %s", exc.detail)
        yield
        await holder.aclose()

    framework = Starlette(
        routes=routes + [_slashed(route) for route in routes],  # NOTE: after the originals: the hot path matches first
        exception_handlers={ScoringError: _scoring_error, HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    framework.router.redirect_slashes = False  # NOTE: its 307 builds Location from the client's Host header
    measured = Measured(framework, lambda: holder.settings.telemetry, hosted=hosted)
    return CatchAll(FastPath(api, measured, {r.name: r for r in routes if isinstance(r, Route)}), routes)


class FastPath:
    """The single-event scoring routes straight from ASGI, ahead of the router; the rest to `app`.

    Framing around `Endpoints.score_answer`, the function the framework route calls: the same
    answers, errors and telemetry, less per-request work. Under overload a refusal of the hot
    route is sent before any work, with bytes built once: refusing must cost next to nothing,
    or refusing alone fills the loop (counted in scoring.requests.shed). Other entries are
    refused by the core's admission, whose answer says how busy it is.
    """

    def __init__(self, api: Endpoints, app: Measured, routes: dict[str, Route]) -> None:
        self.api, self.app = api, app
        self.score_route, self.model_route = routes["score"], routes["model_score"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in SCORE_PATHS:
            route, model = self.score_route, None
        elif (named := NAMED_SCORE.match(path)) is not None:
            route, model = self.model_route, named[1]
        else:
            await self.app(scope, receive, send)
            return
        scope["route"] = route  # the telemetry reads the route template here
        if model is None and (core := self.api.holder.peek()) is not None and core.refuses():
            await send(SHED_START)
            await send(SHED_BODY)
        elif not self.app.on:
            await self.answer(scope, receive, send, model)
        else:  # measured here, without the middleware's `send` wrapper: the path knows its status
            started, span = self.app.begin(scope)
            status = 500
            try:
                status = await self.answer(scope, receive, send, model)
            finally:
                self.app.end(scope, status, started, span)

    async def answer(self, scope: Scope, receive: Receive, send: Send, model: str | None) -> int:
        """Send the answer (or the error) for one event; return its status."""
        wait: str | None = None
        try:
            payload, status = await self.api.score_answer(scope, receive, model), 200
        except ScoringError as exc:
            log_answered(exc, "http", route=scope["route"].path)
            payload, status, wait = encode(error_body(exc)), exc.status, retry_after(exc)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        if wait is not None:
            headers.append((b"retry-after", wait.encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        return status


class CatchAll:
    """Outermost guard: an unexpected error becomes a JSON 500 and goes no further.

    Starlette re-raises after its own 500 handler; under Azure Functions that would
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


SCORE_PATHS = frozenset(("/api/score", "/api/score/"))
NAMED_SCORE = re.compile(r"/api/models/([^/]+)/score/?\Z")  # Starlette's `{name}`: one path segment
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


def _explains(query: bytes) -> bool:
    """Whether the query asks for reason codes: `explain=1` (or `true`) among its parameters."""
    from urllib.parse import parse_qsl

    return any(k == "explain" and v.lower() in ("1", "true") for k, v in parse_qsl(query.decode("latin-1")))


def _slashed(route: Route) -> Route:
    """The same endpoint at `path/`: the Functions host routes `score/` as `score`."""
    return Route(route.path + "/", route.endpoint, methods=route.methods)


async def _scoring_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ScoringError)  # noqa: S101 narrows the type: Starlette routes only ScoringError here
    log_answered(exc, "http", route=_route(request))
    response = json_response(error_body(exc), exc.status)
    if (wait := retry_after(exc)) is not None:
        response.headers["retry-after"] = wait
    return response


def _route(request: Request) -> str:
    return str(getattr(request.scope.get("route"), "path", "")).rstrip("/")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # noqa: S101 narrows the type: Starlette routes only HTTPException here
    if request.url.path.startswith("/v2/") or request.url.path == "/v2":  # V2 clients read `{"error": message}`
        why = V2_UNSERVED if exc.status_code == 404 else exc.detail  # 405: the path is served, not that method
        return json_response(V2Error(f"{request.method} {request.url.path}: {why}"), exc.status_code)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return json_response(ErrorBody(code, exc.detail), exc.status_code)


# NOTE: what a Triton or KServe client asks of the extensions this server does not declare (GET /v2: extensions)
V2_UNSERVED = (
    "not served here: this server speaks the V2 core protocol (health, server and model metadata, model "
    "ready, infer, the binary tensor data extension); no model repository, statistics or configuration "
    "extension (/v2/repository/index, /v2/models/{name}/stats, /v2/models/{name}/config)"
)


async def _internal_error(request: Request, exc: Exception) -> Response:
    # Starlette sends this, then re-raises; CatchAll logs the error once and ends it there.
    return json_response(ErrorBody("internal", "internal error"), 500)
