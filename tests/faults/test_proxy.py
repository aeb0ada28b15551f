"""The fault proxy does what each mode says, against an echo server (the matrix relies on it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from tests.faults.proxy import Proxy


@pytest.fixture
async def echo() -> AsyncIterator[int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def round_trip(port: int, payload: bytes = b"ping", timeout_s: float = 5.0) -> tuple[bytes, float]:
    """Send `payload` on a new connection; what came back and how long it took."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.read(1024), timeout_s), time.monotonic() - started
    finally:
        writer.close()


async def test_pass_and_delay(echo: int) -> None:
    with Proxy(("127.0.0.1", echo)) as proxy:
        assert (await round_trip(proxy.port))[0] == b"ping"
        proxy.mode("delay", delay_s=0.3)
        answer, took = await round_trip(proxy.port)
        assert answer == b"ping" and took >= 0.3


async def test_stall_holds_the_bytes_until_they_may_flow(echo: int) -> None:
    with Proxy(("127.0.0.1", echo)) as proxy:
        proxy.mode("stall")
        pending = asyncio.ensure_future(round_trip(proxy.port))
        await asyncio.sleep(0.3)
        assert not pending.done()
        proxy.mode("pass")
        assert (await pending)[0] == b"ping"


async def nothing_back(port: int) -> bool:
    """A new connection gets nothing: closed (an empty read) or reset (which a write to a socket
    already closed on the other side turns a close into)."""
    try:
        return (await round_trip(port))[0] == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("mode", ["drop", "reset"])
async def test_drop_and_reset_end_connections(echo: int, mode: str) -> None:
    with Proxy(("127.0.0.1", echo)) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"1")
        assert await reader.read(16) == b"1"
        proxy.mode(mode)  # type: ignore[arg-type]
        try:
            assert await asyncio.wait_for(reader.read(16), 5) == b""  # closed
            assert mode == "drop"
        except ConnectionResetError:
            assert mode == "reset"
        finally:
            writer.close()
        assert await nothing_back(proxy.port)
        proxy.mode("pass")
        assert (await round_trip(proxy.port))[0] == b"ping"


async def test_a_down_server_gives_nothing() -> None:
    from tests.conftest import closed_port

    with Proxy(("127.0.0.1", closed_port())) as proxy:
        assert await nothing_back(proxy.port)
