"""`python -m shared`: serve the ASGI app locally (what `make run` does).

The server (uvicorn) and its edges are in shared/adapters/http/server.py.
"""

from __future__ import annotations

import logging
import socket
import sys

from shared.errors import SettingsError
from shared.settings import Settings


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.from_env()  # NOTE: warns of each variable that looks like a setting and is none
    except SettingsError as exc:  # one line naming the setting, no traceback
        print(f"fraud scoring: invalid settings: {exc.detail}", file=sys.stderr)
        return 2
    logging.getLogger().setLevel(settings.log_level)
    for name, port in (("PORT", settings.port), ("GRPC_PORT", settings.grpc_port)):
        if port and (held := port_in_use(port)) is not None:
            print(
                f"fraud scoring: cannot serve on 127.0.0.1:{port}: the port is in use ({held}); stop what holds it "
                f"(`ss -ltnp 'sport = :{port}'` names it) or choose another: `make run {name}={port + 1}`",
                file=sys.stderr,
            )
            return 2
    where = f"http://127.0.0.1:{settings.port}"
    print(
        f"fraud scoring: serving on {where} with uvicorn, {settings.workers} worker(s)  (try GET /api/health/ready; "
        "Ctrl-C stops it)",
        flush=True,
    )
    from shared.adapters.http.server import serve

    serve(settings)
    return 0


def port_in_use(port: int) -> str | None:
    """Why 127.0.0.1:`port` cannot be bound, as uvicorn binds it (SO_REUSEADDR), or None when it can."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


if __name__ == "__main__":
    sys.exit(main())
