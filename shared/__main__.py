"""`python -m shared`: serve the ASGI app locally with Granian (what `make run` does).

NOTE: Granian answers these itself, before the app runs, so they cannot be JSON: an empty
body and `connection: close`, with 400 for a request line, header, Content-Length or
Transfer-Encoding it cannot parse, 414 for a request target over ~64 KiB, 431 for more than
100 header fields or a header section over its ~408 KiB buffer. A connection that has not sent
its headers whole within HTTP_HEADER_TIMEOUT_MS is closed unanswered. In Azure the Functions
host owns these edges instead.
"""

from __future__ import annotations

import logging
import sys

from shared.errors import SettingsError
from shared.settings import Settings


def main() -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:  # NOTE: one line naming the setting, no traceback
        print(f"fraud scoring: invalid settings: {exc.detail}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"fraud scoring: serving on http://127.0.0.1:{settings.port}  (try GET /api/health/ready)", flush=True)
    serve(settings)
    return 0


def serve(settings: Settings) -> None:
    """Serve `shared.asgi:app` with Granian, with the connection limits from `settings`.

    NOTE: `backpressure` caps the connections the worker holds at once; past it Granian stops
    accepting, so every stalled connection must end on a deadline: the header read timeout
    here, BODY_TIMEOUT_MS in the app for the body. HTTP/1 only: in auto mode the timer does
    not start until a first byte picks the protocol, and a silent connection is held forever.
    """
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings

    Granian(
        "shared.asgi:app",
        address="127.0.0.1",
        port=settings.port,
        interface=Interfaces.ASGI,
        workers=1,
        http=HTTPModes.http1,
        websockets=False,
        backlog=settings.http_backlog,
        backpressure=settings.http_backpressure,
        http1_settings=HTTP1Settings(header_read_timeout=settings.http_header_timeout_ms),
    ).serve()


if __name__ == "__main__":
    sys.exit(main())
