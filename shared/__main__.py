"""`python -m shared`: serve the ASGI app locally (what `make run` does).

The server (uvicorn) and its edges are in shared/adapters/http/server.py.
"""

from __future__ import annotations

import logging
import sys

from shared.errors import SettingsError
from shared.settings import Settings


def main() -> int:
    try:
        settings = Settings.from_env()
    except SettingsError as exc:  # one line naming the setting, no traceback
        print(f"fraud scoring: invalid settings: {exc.detail}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    where = f"http://127.0.0.1:{settings.port}"
    print(
        f"fraud scoring: serving on {where} with uvicorn, {settings.workers} worker(s)  (try GET /api/health/ready)",
        flush=True,
    )
    from shared.adapters.http.server import serve

    serve(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
