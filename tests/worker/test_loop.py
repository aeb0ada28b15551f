"""The worker's plain asyncio loop and server sockets: Nagle stays on unless the code turns it off.

The Python worker runs its own asyncio loop, not uvloop. asyncio sets TCP_NODELAY on a
connection only when the socket's `proto` is IPPROTO_TCP (asyncio.base_events._set_nodelay);
`socket.create_server()` makes sockets with proto 0, so a server built on one answers small
requests after the peer's delayed ACK (~40 ms: issue 22 measured the former fast lane at 363
req/s). So any listening socket the app makes must set TCP_NODELAY itself.
"""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared"


async def nodelay_of_an_accepted_connection(listener: socket.socket) -> int:
    accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(on_client, sock=listener)
    _, writer = await asyncio.open_connection(*listener.getsockname())
    try:
        return await asyncio.wait_for(accepted, 5)
    finally:
        writer.close()
        server.close()
        await server.wait_closed()


def test_a_plain_loop_leaves_nagle_on_for_a_create_server_socket_unless_told() -> None:
    loop = asyncio.new_event_loop()  # NOTE: plain asyncio, as the worker runs it
    try:
        plain = socket.create_server(("127.0.0.1", 0))
        assert loop.run_until_complete(nodelay_of_an_accepted_connection(plain)) == 0
        told = socket.create_server(("127.0.0.1", 0))
        told.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # NOTE: accepted sockets inherit it (Linux)
        assert loop.run_until_complete(nodelay_of_an_accepted_connection(told)) == 1
    finally:
        loop.close()


def test_every_listening_socket_the_app_makes_sets_tcp_nodelay() -> None:
    for module in SHARED.rglob("*.py"):
        source = module.read_text()
        if re.search(r"\bcreate_server\(", source):
            assert "TCP_NODELAY" in source, (
                f"{module.relative_to(SHARED.parent)} makes a server socket without TCP_NODELAY"
            )
