"""The local HTTP server of `make run`: Granian or uvicorn (HTTP_SERVER), WORKERS processes.

Both serve the same ASGI app (`shared.adapters.http.asgi:app`); each worker process builds its own
service (warm sessions, L1 cache) on first use. In Azure neither runs: the Functions host
owns HTTP. Each server is held to the same edges (tests/adapters/http/test_server.py runs on both):

    a body not whole within BODY_TIMEOUT_MS    JSON 408 (the app's deadline, any server)
    headers not whole within HTTP_HEADER_TIMEOUT_MS   connection closed unanswered
    framing the server cannot parse            the server's own 400/414/431 (see below)

NOTE (Granian): it answers these itself, before the app runs, so they cannot be JSON: an
empty body and `connection: close`, with 400 for a request line, header, Content-Length or
Transfer-Encoding it cannot parse, 414 for a request target over ~64 KiB, 431 for more than
100 header fields or a header section over its ~408 KiB buffer. `backpressure` caps the
connections a worker holds at once; past it Granian stops accepting. HTTP/1 only: in auto
mode the header timer does not start until a first byte picks the protocol.

NOTE (uvicorn, uvloop + httptools): it answers framing httptools cannot parse (a bad request
line, header line or chunk size; two Content-Lengths) with its own 400 and the text body
"Invalid HTTP request received.", and has no limit on the number of header fields. It holds
every connection (no backpressure: liveness answers at once under a flood of stalled bodies,
which each end in the app's 408). It has no header-read timeout of its own: `HeaderDeadline`
adds one, and HTTP_HEADER_TIMEOUT_MS is also its idle keep-alive timeout.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from shared.settings import Settings

__all__ = ["HeaderDeadline", "serve"]

APP = "shared.adapters.http.asgi:app"


def serve(settings: Settings) -> None:
    """Serve the app with the configured server until interrupted."""
    if settings.http_server == "uvicorn":
        _uvicorn(settings)
    else:
        _granian(settings)


def _granian(settings: Settings) -> None:
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    Granian(
        APP,
        address="127.0.0.1",
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=settings.workers,
        http=HTTPModes.http1,
        websockets=False,
        backlog=settings.http_backlog,
        backpressure=settings.http_backpressure,
        http1_settings=HTTP1Settings(header_read_timeout=settings.http_header_timeout_ms),
    ).serve()


def _uvicorn(settings: Settings) -> None:
    import uvicorn

    uvicorn.run(
        APP,
        host="127.0.0.1",
        port=settings.port,
        workers=settings.workers,
        loop="uvloop",
        http="shared.adapters.http.server:HeaderDeadline",  # NOTE: by name: WORKERS > 1 start it in new processes
        ws="none",
        lifespan="on",
        backlog=settings.http_backlog,
        timeout_keep_alive=settings.http_header_timeout_ms / 1000,  # type: ignore[arg-type]
        access_log=False,
        log_level="warning",
        server_header=False,
    )


class HeaderDeadline(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline: from connect (or a request's first
    byte) to the end of its headers within HTTP_HEADER_TIMEOUT_MS, or the connection is closed.

    NOTE: uvicorn's own keep-alive timer stops at the first byte of a request, so a client that
    trickles its headers would hold the connection forever; this timer runs until they end.
    """

    _header_timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)
