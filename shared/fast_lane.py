"""The fast lane: under the Functions host, HTTP served by the worker process itself.

In Azure every HTTP invocation crosses the Functions host: the host parses the request,
sends it to the Python worker over gRPC, the worker turns it into `func.HttpRequest` and
`AsgiMiddleware` into ASGI, and back. Measured here, the conversion alone costs ~45 µs of
CPU per invocation on top of the app's ~80 µs, and a stand-in host measured ~800 µs for the
worker's share (docs/capacity.md). With FAST_LANE_PORT set, the worker process also serves
the same ASGI app (the same core, caches and batchers) with uvicorn on that port, reached
through a Container Apps additional port mapping that stays inside the environment (auth:
the network, as for the V2 gRPC port; docs/deploy.md).

Light on purpose (uvicorn is imported when the job starts): `shared/triggers.py` imports
this on the Functions import path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from shared.service import ScoringService

__all__ = ["fast_lane"]


def fast_lane(host: str, app: Callable[[], ASGIApp]) -> Callable[[ScoringService], None]:
    """A hook that adds the HTTP server on `host`:FAST_LANE_PORT, serving `app()`, to the core's
    background jobs (nothing when FAST_LANE_PORT is 0): started with the core, restarted if it
    fails, stopped with it."""

    def add(service: ScoringService) -> None:
        port = service.settings.fast_lane_port
        if not port:
            return

        async def serve() -> None:
            await serve_http(app(), host, port, header_timeout_s=service.settings.http_header_timeout_ms / 1000)

        service.background.add("fast_lane", serve)

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
    running: asyncio.Future[Any] = asyncio.ensure_future(server.serve())
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        server.should_exit = True  # NOTE: its main loop sees this within 0.1 s, closes and returns
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, 5)
        raise
    if server.started is False:  # NOTE: e.g. the port is taken: fail, so the supervisor retries
        raise OSError(f"the fast lane could not listen on {host}:{port}")
