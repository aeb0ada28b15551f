"""What the adapters hand to `ServiceHolder(on_built=...)`: the gRPC server as a core job.

Light on purpose (grpc is imported when the job starts, not here): `shared/adapters/functions.py`
and `shared/adapters/http/asgi.py` import this on the Functions and `make run` import paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.core.service import ScoringService

__all__ = ["grpc_server"]


def grpc_server(host: str) -> Callable[[ScoringService], None]:
    """A hook that adds the gRPC server (V2 inference and `fraud.scoring.v1` payment events) on
    `host`:GRPC_PORT to the core's background jobs (nothing when GRPC_PORT is 0). The supervisor starts it with the core, restarts it if it
    fails (a port still held by a previous process), and stops it with the core."""

    def add(service: ScoringService) -> None:
        port = service.limits.grpc_port
        if not port:
            return

        async def serve() -> None:
            from shared.adapters.oip.grpc_server import serve_grpc

            await serve_grpc(service, host, port)

        service.serve("grpc", serve)

    return add
