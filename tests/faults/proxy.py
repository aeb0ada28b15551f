"""A TCP proxy for partial faults: pass, delay, stall, drop or reset the connections to one server.

    with Proxy(("127.0.0.1", 6379)) as proxy:    # listens on proxy.port (loopback, free)
        proxy.mode("delay", delay_s=0.5)         # every answer waits half a second
        proxy.mode("stall")                      # connections stay open, nothing moves
        proxy.mode("drop")                       # connections are closed (new ones at once)
        proxy.mode("reset")                      # connections are reset (RST), new ones too
        proxy.mode("pass")                       # back to normal: held bytes flow again

It runs its own event loop in a thread, so it keeps its pace whatever the test's loop does.
A delay applies to what the server sends (a slow server): each chunk is held `delay_s` from
when it arrived, in order, so answers queue up behind each other as on a slow link.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from contextlib import suppress
from typing import Literal

__all__ = ["Mode", "Proxy"]

Mode = Literal["pass", "delay", "stall", "drop", "reset"]


class Proxy:
    """Forwards loopback connections on `port` to `target`, in the fault mode set."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.connections = 0  # accepted so far
        self._mode: Mode = "pass"
        self._delay_s = 0.0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._open: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> Proxy:
        self._thread.start()
        self._run(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        self._run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def mode(self, mode: Mode, *, delay_s: float = 0.0) -> None:
        """Switch every connection, open or new, to `mode` (`delay_s` for "delay")."""
        self._run(self._switch(mode, delay_s))

    def _run(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._open):
            _close(writer, reset=False)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    async def _switch(self, mode: Mode, delay_s: float) -> None:
        assert self._flowing is not None
        self._mode, self._delay_s = mode, delay_s
        if mode == "stall":
            self._flowing.clear()
        else:
            self._flowing.set()
        if mode in ("drop", "reset"):
            for writer in list(self._open):
                _close(writer, reset=mode == "reset")

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self._mode in ("drop", "reset"):
            _close(writer, reset=self._mode == "reset")
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _close(writer, reset=True)  # NOTE: the server is down: the client sees a refusal-like reset
            return
        self._open.update((writer, up_writer))
        try:
            await asyncio.gather(self._pump(reader, up_writer, delay=False), self._pump(up_reader, writer, delay=True))
        finally:
            for w in (writer, up_writer):
                self._open.discard(w)
                _close(w, reset=False)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delay: bool) -> None:
        """Copy one direction; answers (`delay`) are held `delay_s` each, in order."""
        assert self._flowing is not None
        loop = asyncio.get_running_loop()
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await held.get()
                if not chunk:
                    return
                await asyncio.sleep(max(0.0, due - loop.time()))
                await self._flowing.wait()  # type: ignore[union-attr]
                writer.write(chunk)
                await writer.drain()

        sender = loop.create_task(deliver())
        try:
            while True:
                chunk = await reader.read(65536)
                wait = self._delay_s if delay and self._mode == "delay" else 0.0
                held.put_nowait((loop.time() + wait, chunk))
                if not chunk or sender.done():
                    break
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            sender.cancel()
            with suppress(asyncio.CancelledError, OSError):
                await sender
            _close(writer, reset=False)


def _close(writer: asyncio.StreamWriter, *, reset: bool) -> None:
    """Close; `reset` sends RST (SO_LINGER 0) instead of FIN."""
    sock = writer.get_extra_info("socket")
    if reset and sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(RuntimeError, OSError):
        writer.close()
