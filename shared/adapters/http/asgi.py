"""The ASGI entry point for `make run`: `shared.adapters.http.asgi:app` (settings from the environment)."""

from shared.adapters.http.app import create_app
from shared.adapters.oip.jobs import grpc_server
from shared.core.holder import ServiceHolder

__all__ = ["app", "holder"]

holder = ServiceHolder(on_built=[grpc_server("127.0.0.1")])  # loopback, as `make run` binds
app = create_app(holder)
