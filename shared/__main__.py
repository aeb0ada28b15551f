"""`python -m shared`: serve the ASGI app locally with Granian (what `make run` does)."""

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
    from granian import Granian
    from granian.constants import Interfaces

    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print(f"fraud scoring: serving on http://127.0.0.1:{settings.port}  (try GET /api/health/ready)", flush=True)
    Granian("shared.asgi:app", address="127.0.0.1", port=settings.port, interface=Interfaces.ASGI, workers=1).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
