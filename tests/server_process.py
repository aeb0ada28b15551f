"""`python -m shared` (what `make run` starts) in a subprocess on a free loopback port, and raw HTTP/1.1.

The server is the real one (uvicorn): tests of what happens on the wire (stalled bodies,
slow headers, malformed framing) need its parser and its deadlines, which no in-process
client has. Every read is bounded, and the process always ends.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from shared.setting import declared
from shared.settings import Settings
from tests.conftest import REPO, closed_port

__all__ = ["Reply", "ServerProcess", "read_reply", "running_server"]


@dataclass(frozen=True)
class Reply:
    """One HTTP/1.1 response as it came off the socket."""

    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


def read_reply(sock: socket.socket, timeout_s: float) -> Reply | None:
    """The next response on `sock`, or None when the server closed it first; raises TimeoutError."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = _recv(sock, deadline)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.strip().lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = _recv(sock, deadline)
        if not chunk:
            break
        body += chunk
    return Reply(int(status_line.split()[1]), headers, body[:length])


def _recv(sock: socket.socket, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no complete response in time")
    sock.settimeout(left)
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""


@dataclass
class ServerProcess:
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    def send(self, raw: bytes, timeout_s: float = 5.0) -> Reply | None:
        """Send `raw` on a fresh connection and read one response."""
        with self.connect() as sock:
            sock.sendall(raw)
            return read_reply(sock, timeout_s)

    def get(self, path: str, timeout_s: float = 5.0) -> Reply | None:
        return self.send(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode(), timeout_s)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@contextmanager
def running_server(env: Mapping[str, str], workdir: Path, ready_within_s: float = 30.0) -> Iterator[ServerProcess]:
    """`python -m shared` with `env` as its only app settings, ready to serve; stopped on exit."""
    log = workdir / "server.log"
    port = closed_port()
    with log.open("wb") as out:  # NOTE: a file, not a pipe: a pipe nobody reads would stall the server's logging
        process = subprocess.Popen(
            [sys.executable, "-m", "shared"],
            cwd=REPO,
            env=_environment(env, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = ServerProcess(port, process, log)
    try:
        _wait_ready(server, ready_within_s)
        yield server
    finally:
        _stop(process)


def _environment(settings: Mapping[str, str], port: int) -> dict[str, str]:
    """This process's environment without any app setting (no REDIS_URL from `make test`), plus `settings`."""
    names = {doc.env for doc, _, _ in declared(Settings)}
    inherited = {k: v for k, v in os.environ.items() if k not in names}
    return {**inherited, "PYTHONPATH": str(REPO), "PORT": str(port), **settings}


def _wait_ready(server: ServerProcess, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"the server exited ({server.process.returncode}):\n{server.log_tail()}")
        try:
            reply = server.get("/api/health/ready", timeout_s=1)
            if reply is not None and reply.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"the server was not ready within {within_s} s:\n{server.log_tail()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    finally:
        with suppress(ProcessLookupError):  # NOTE: its own session: a worker left behind goes too
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
