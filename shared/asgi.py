"""The ASGI entry point for `make run`: `shared.asgi:app` (settings from the environment)."""

from shared.build import ServiceHolder
from shared.http import create_app

__all__ = ["app", "holder"]

holder = ServiceHolder()
app = create_app(holder)
