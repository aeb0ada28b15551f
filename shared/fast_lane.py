"""The fast lane: under the Functions host, HTTP served by the worker process itself.

In Azure every HTTP invocation crosses the Functions host: the host parses the request,
sends it to the Python worker over gRPC, the worker turns it into `func.HttpRequest` and
`AsgiMiddleware` into ASGI, and back. Measured here, the conversion alone costs ~45 µs of
CPU per invocation on top of the app's ~80 µs, and a stand-in host measured ~800 µs for the
worker's share (docs/capacity.md). With FAST_LANE_PORT set, the worker process also serves
the same ASGI app (the same core, caches and batchers) with uvicorn on that port, reached
through a Container Apps additional port mapping that stays inside the environment (auth:
the network, as for the V2 gRPC port; docs/deploy.md). It serves the data plane only
(scoring, health, V2); the routes that change or reveal state stay behind the host's keys.

Light on purpose (uvicorn is imported when the job starts): `shared/triggers.py` imports
this on the Functions import path.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from shared.service import ScoringService

__all__ = ["fast_lane", "listening_socket", "scoring_routes"]

STOP_S = 1.5  # inside the core's 2 s for its jobs to stop


# The data plane only: scoring, health and the V2 protocol. The routes that change or reveal state
# (pin/rollback, stats, metrics, reviews) stay behind the host's function keys.
_SCORING = re.compile(r"\A/(?:api/(?:score(?:/batch)?|models/[^/]+/score|health/(?:live|ready))|v2(?:/.*)?)/?\Z")
_NOT_HERE = b'{"error":"not_found","detail":"not served on the fast lane: use the keyed route through the host"}'


def scoring_routes(app: ASGIApp) -> ASGIApp:
    """`app` answering only the data-plane routes; any other path is a JSON 404."""

    async def lane(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _SCORING.match(scope["path"]):
            await app(scope, receive, send)
            return
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_NOT_HERE)).encode())]
        await send({"type": "http.response.start", "status": 404, "headers": headers})
        await send({"type": "http.response.body", "body": _NOT_HERE})

    return lane


def fast_lane(host: str, app: Callable[[], ASGIApp]) -> Callable[[ScoringService], None]:
    """A hook that adds the HTTP server on `host`:FAST_LANE_PORT, serving `app()`, to the core's
    background jobs (nothing when FAST_LANE_PORT is 0): started with the core, restarted if it
    fails, stopped with it."""

    def add(service: ScoringService) -> None:
        port = service.settings.fast_lane_port
        if not port:
            return

        async def serve() -> None:
            lane = scoring_routes(app())
            await serve_http(lane, host, port, header_timeout_s=service.settings.http_header_timeout_ms / 1000)

        service.background.add("fast_lane", serve, serving=True)

    return add


async def serve_http(app: ASGIApp, host: str, port: int, *, header_timeout_s: float) -> None:
    """uvicorn on the running loop until cancelled; then it closes its socket and ends."""
    import uvicorn

    from shared.local_server import HeaderDeadline

    class Embedded(uvicorn.Server):
        """NOTE: inside the Functions worker the signals are the worker's, never ours."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="none",
        http=HeaderDeadline,
        ws="none",
        lifespan="off",  # NOTE: the core is already built: this server only serves it
        timeout_keep_alive=header_timeout_s,  # type: ignore[arg-type]
        access_log=False,
        log_level="warning",
        server_header=False,
    )
    server = Embedded(config)
    # NOTE: the socket is ours: uvicorn calls sys.exit when it cannot bind, which would end the
    # Functions worker; an OSError here goes to the supervisor instead, which retries.
    sock = listening_socket(host, port)
    running: asyncio.Future[Any] = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        server.should_exit = True  # NOTE: its main loop sees this within 0.1 s, closes and returns
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, STOP_S)
        raise
    finally:
        sock.close()


def listening_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket whose accepted connections send without delay (TCP_NODELAY).

    NOTE: the Functions worker runs a plain asyncio loop, whose transports set TCP_NODELAY only
    on sockets whose `proto` is IPPROTO_TCP (asyncio.base_events._set_nodelay); a socket from
    `socket.create_server()` has proto 0, and so has every connection accepted from it. Set on
    the listening socket, Linux passes the option to each accepted one. Without it Nagle holds
    every small answer for the peer's delayed ACK (~40 ms). uvloop sets it regardless, so
    `make run` never showed this.
    """
    sock = socket.create_server((host, port), backlog=1024)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
