"""The ASGI entry point for `make run`: `shared.asgi:app` (settings from the environment)."""

from shared.build import ServiceHolder
from shared.http import create_app
from shared.oip.jobs import grpc_server

__all__ = ["app", "holder"]

holder = ServiceHolder(on_built=[grpc_server("127.0.0.1")])  # NOTE: loopback, as `make run` binds
app = create_app(holder)
