"""Servers of a fault test's own: a redis-server and an Azurite, each on a free loopback port.

A fault test stops, restarts, flushes and squeezes these, never the shared Redis at REDIS_URL
(other tests use it at the same time). Each keeps its port and data directory across a restart,
so the service under test reconnects to the same address, as to a restarted Azure service.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import suppress
from pathlib import Path

from tests.conftest import AZURITE_ACCOUNT, AZURITE_KEY, REPO, _unavailable, closed_port

__all__ = ["AzuriteServer", "RedisServer"]


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


class _Process:
    """A server process on a fixed port, started and stopped on demand (always stopped at the end)."""

    name = "server"

    def __init__(self, workdir: Path) -> None:
        self.port = closed_port()
        self.workdir = workdir
        self.log = workdir / f"{self.name}-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        return _answers(self.port)

    def start(self) -> None:
        assert self._process is None, "already running"
        with self.log.open("ab") as out:
            self._process = subprocess.Popen(
                self.command(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 30
        while not self.ready():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.name} did not start:\n{self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """Stop at once (SIGKILL: no goodbye to the clients, nothing saved)."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """Stop as an operator would (SIGTERM: the server saves what it keeps, then exits)."""
        self._signal(signal.SIGTERM)

    def _signal(self, sig: signal.Signals) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(10)
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    @property
    def running(self) -> bool:
        return self._process is not None


class RedisServer(_Process):
    """redis-server with no persistence; `args` add to its configuration (e.g. maxmemory)."""

    name = "redis"

    def __init__(self, workdir: Path, *args: str) -> None:
        if shutil.which("redis-server") is None:
            _unavailable("redis-server")
        super().__init__(workdir)
        self.args = args

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        return [
            "redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self.workdir), *self.args,
        ]  # fmt: skip

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False


class AzuriteServer(_Process):
    """Azurite's Blob service (node_modules/.bin/azurite-blob), its data kept in one folder."""

    name = "azurite"

    def __init__(self, workdir: Path) -> None:
        if not (REPO / "node_modules" / ".bin" / "azurite-blob").exists():
            _unavailable("Azurite (node_modules/.bin/azurite-blob)")
        super().__init__(workdir)
        self.location = workdir / f"azurite-{self.port}"
        self.location.mkdir()

    @property
    def connection_string(self) -> str:
        endpoint = f"http://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"
        return f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"

    def command(self) -> list[str]:
        return [
            str(REPO / "node_modules" / ".bin" / "azurite-blob"), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
            "--location", str(self.location), "--skipApiVersionCheck", "--loose", "--disableTelemetry", "--silent",
        ]  # fmt: skip
