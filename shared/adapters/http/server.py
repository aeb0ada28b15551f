"""The local HTTP server of `make run`: uvicorn (uvloop + httptools), WORKERS processes.

It serves the ASGI app (`shared.adapters.http.asgi:app`); each worker process builds its own
service (warm sessions, L1 cache) on first use. In Azure it does not run: the Functions host
owns HTTP. Its edges (tests/adapters/http/test_server.py):

    a body not whole within BODY_TIMEOUT_MS      JSON 408 (the app's deadline)
    headers not whole within BODY_TIMEOUT_MS     connection closed unanswered (`HeaderDeadline`)
    framing httptools cannot parse               uvicorn's own 400 (see below)

Uvicorn answers framing httptools cannot parse (a bad request line, header line or chunk
size; two Content-Lengths) with its own 400 and the text body "Invalid HTTP request received.",
and has no limit on the number of header fields. It holds every connection (no backpressure:
liveness answers at once under a flood of stalled bodies, which each end in the app's 408). It
has no header-read timeout of its own: `HeaderDeadline` adds one, which is also its idle
keep-alive timeout.
"""

from __future__ import annotations

import asyncio

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from shared.settings import Settings

__all__ = ["HeaderDeadline", "serve"]

APP = "shared.adapters.http.asgi:app"


def serve(settings: Settings) -> None:
    """Serve the app with uvicorn until interrupted."""
    uvicorn.run(
        APP,
        host="127.0.0.1",
        port=settings.port,
        workers=settings.workers,
        loop="uvloop",
        http="shared.adapters.http.server:HeaderDeadline",  # NOTE: by name: WORKERS > 1 start it in new processes
        ws="none",
        lifespan="on",
        timeout_keep_alive=settings.body_timeout_ms / 1000,  # type: ignore[arg-type]
        access_log=False,
        log_level="warning",
        server_header=False,
    )


class HeaderDeadline(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline: from connect (or a request's first
    byte) to the end of its headers within BODY_TIMEOUT_MS, or the connection is closed.

    Uvicorn's own keep-alive timer stops at the first byte of a request, so a client that
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
