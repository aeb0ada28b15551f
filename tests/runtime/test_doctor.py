"""The platform doctor names each problem this project met, with its fix, and is quiet when all is well.

Each check meets the real bad condition (two dist-info copies on a path, a stub the runtime refuses, a
worker logger at INFO with a handler, a create_server() listener serving with Nagle on) and the good
one beside it; a check whose guard is removed fails the first or the second.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import runtime_version

from shared.core.service import ScoringService
from shared.runtime.doctor import (
    PlatformDoctor,
    app_stubs,
    nagle_on_accepted,
    stub_problem,
    two_copies,
    worker_info_logging,
)

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / ".venv-worker311"  # the 3.11 worker's bundled protobuf, grpcio, azure-functions (make worker-venvs)
PROTO = REPO / "shared" / "adapters" / "oip" / "proto" / "grpc_predict_v2.proto"
LINUX = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="the listener check reads /proc/self/fd")


def installed(folder: Path, name: str, version: str) -> Path:
    """A copy of `name` at `version` in `folder`, as importlib.metadata sees one: its dist-info."""
    info = folder / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return folder


# -- two copies of a pinned distribution -------------------------------------------------------


def test_two_versions_of_protobuf_on_the_path_name_the_one_that_runs_and_the_fix(tmp_path: Path) -> None:
    first = installed(tmp_path / "worker", "protobuf", "4.25.9")
    second = installed(tmp_path / "site-packages", "protobuf", "6.33.6")
    found = two_copies(path=[str(first), str(second)])
    assert found is not None
    assert f"two copies of protobuf on sys.path (4.25.9 imported from {first}; 6.33.6 in {second})" in found
    assert "fix: pin protobuf==4.25.9 in requirements.txt" in found


def test_one_copy_or_two_at_one_version_is_not_reported(tmp_path: Path) -> None:
    one = installed(tmp_path / "a", "grpcio", "1.85.1")
    assert two_copies(path=[str(one)]) is None
    same = installed(tmp_path / "b", "grpcio", "1.85.1")
    assert two_copies(path=[str(one), str(same)]) is None
    assert two_copies() is None  # this suite's own path: the pins, once


@pytest.mark.skipif(not (BUNDLE / ".installed").exists(), reason="the 3.11 worker's bundle: make worker-venvs")
def test_the_worker_bundle_first_on_the_path_shadows_both_pins() -> None:
    """The production path (docs/capacity.md): the bundle's real dist-info before the app's site-packages."""
    found = PlatformDoctor(path=[str(BUNDLE), *sys.path], stubs=[]).problem()
    assert found is not None and found.startswith("platform: two copies of grpcio on sys.path (1.59.5 imported")
    assert "two copies of protobuf on sys.path (4.25.9 imported from" in found


# -- generated stubs against the loaded runtime -----------------------------------------------


def test_the_apps_stubs_load_on_the_loaded_runtime() -> None:
    stubs = app_stubs()
    assert {s.name for s in stubs} == {"grpc_predict_v2_pb2.py", "onnx_ml_pb2.py", "scoring_pb2.py"}
    assert [stub_problem(s) for s in stubs] == [None, None, None]


def test_a_stub_whose_gencode_is_newer_than_the_runtime_is_reported(tmp_path: Path) -> None:
    stub = tmp_path / "future_pb2.py"
    stub.write_text(
        "from google.protobuf import runtime_version as _runtime_version\n"
        "_runtime_version.ValidateProtobufRuntimeVersion(_runtime_version.Domain.PUBLIC, 99, 0, 0, '', 'f.proto')\n"
    )
    spec = importlib.util.spec_from_file_location("future_pb2", stub)
    assert spec is not None and spec.loader is not None
    with pytest.raises(runtime_version.VersionError, match=r"gencode 99\.0\.0"):  # what importing it really does
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    found = stub_problem(stub)
    assert found is not None and "does not load on protobuf" in found and "gencode 99.0.0" in found
    assert "fix: regenerate it at the protobuf 4.25 gencode level (`make stubs`)" in found


def test_a_stub_importing_what_the_runtime_lacks_is_reported(tmp_path: Path) -> None:
    stub = tmp_path / "odd_pb2.py"
    stub.write_text("from google.protobuf.internal import builder as _builder\nfrom google.protobuf import nothing\n")
    found = stub_problem(stub)
    assert found is not None and "it imports nothing from google.protobuf, which this runtime lacks" in found


def stub_of_the_dev_protoc(tmp_path: Path) -> Path:
    """The V2 stub as the dev venv's grpcio-tools generates it (a gencode level that records itself)."""
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={tmp_path}", str(PROTO)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    stub = tmp_path / "grpc_predict_v2_pb2.py"
    assert "ValidateProtobufRuntimeVersion" in stub.read_text()
    return stub


@pytest.mark.skipif(not (BUNDLE / ".installed").exists(), reason="the 3.11 worker's bundle: make worker-venvs")
def test_newer_gencode_is_quiet_on_the_pins_and_reported_under_the_worker_bundle(tmp_path: Path) -> None:
    stub = stub_of_the_dev_protoc(tmp_path)
    assert stub_problem(stub) is None  # protobuf 6.33.6 (the pin) loads what its own protoc wrote
    code = "import sys; from pathlib import Path; from shared.runtime.doctor import stub_problem; "
    code += "print(stub_problem(Path(sys.argv[1])))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BUNDLE), str(REPO)])}
    done = subprocess.run(
        [sys.executable, "-c", code, str(stub)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "does not load on protobuf 4.25.9 (it imports runtime_version from google.protobuf" in done.stdout


# -- the worker's INFO lines ---------------------------------------------------------------------


# NOTE: only the fixture's logger is read: loggers other tests made (azure.functions.*) stay as they left them
ONLY = ("azure_functions_worker",)


@pytest.fixture
def worker_logger() -> Iterator[logging.Logger]:
    """The 3.11 worker's logger, put back as it was (level, handlers) after the test; the root too."""
    logger, root = logging.getLogger("azure_functions_worker"), logging.getLogger()
    saved = [(lg, lg.level, list(lg.handlers), lg.propagate) for lg in (logger, root)]
    yield logger
    for lg, level, handlers, propagate in saved:
        lg.setLevel(level)
        lg.handlers[:] = handlers
        lg.propagate = propagate


def test_a_worker_logger_at_info_with_a_handler_is_reported(worker_logger: logging.Logger) -> None:
    worker_logger.setLevel(logging.INFO)
    worker_logger.propagate = False
    assert worker_info_logging(ONLY) is None  # no handler to pass them to: nothing is sent
    worker_logger.addHandler(logging.NullHandler())
    found = worker_info_logging(ONLY)
    assert found is not None and found.startswith("the worker's logger 'azure_functions_worker' passes INFO")
    assert "fix: set it to WARNING" in found
    worker_logger.setLevel(logging.WARNING)  # what quiet_worker_logs does
    assert worker_info_logging(ONLY) is None


def test_the_root_at_info_with_the_workers_handler_reaches_a_worker_logger_left_unset(
    worker_logger: logging.Logger,
) -> None:
    """As the worker runs before the app quiets it: its handler on the root, the root at INFO."""
    worker_logger.setLevel(logging.NOTSET)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(logging.NullHandler())
    assert "(effective level INFO)" in (worker_info_logging(ONLY) or "")
    assert worker_info_logging(names=("never_made_by_anyone",)) is None  # outside a worker: nothing to report
    worker_logger.setLevel(logging.WARNING)
    assert worker_info_logging(ONLY) is None


# -- Nagle on the app's own listeners ------------------------------------------------------------


class Serving:
    """asyncio servers each with one accepted connection; everything closed after the test."""

    def __init__(self) -> None:
        self.servers: list[asyncio.Server] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def connected(self, listener: socket.socket | None) -> str:
        """A server on `listener` (None: asyncio makes its own on 127.0.0.1) and one connection it
        accepted; the listener's `host:port` as the doctor names it."""
        accepted = asyncio.Event()

        def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.writers.append(writer)
            accepted.set()

        if listener is None:
            server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        else:
            server = await asyncio.start_server(on_client, sock=listener)
        self.servers.append(server)
        host, port = server.sockets[0].getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        self.writers.append(writer)
        await asyncio.wait_for(accepted.wait(), 5)
        return f"{host}:{port}"

    async def aclose(self) -> None:
        for writer in self.writers:
            writer.close()
        for server in self.servers:
            server.close()
            await server.wait_closed()


@pytest.fixture
async def serving() -> AsyncIterator[Serving]:
    servers = Serving()
    yield servers
    await servers.aclose()


def reported(where: str, found: str | None) -> bool:
    """Whether the doctor's finding names the listener at `where` (`host:port`)."""
    return where in re.findall(r"[\w.:\[\]]+:\d+", found or "")


@LINUX
async def test_a_create_server_listener_serving_with_nagle_on_is_reported(serving: Serving) -> None:
    where = await serving.connected(socket.create_server(("127.0.0.1", 0)))
    found = nagle_on_accepted()
    assert reported(where, found) and found is not None and " have TCP_NODELAY off on the worker's plain" in found
    assert "fix: set TCP_NODELAY on the listening socket" in found


@LINUX
async def test_a_listener_with_tcp_nodelay_set_is_not_reported(serving: Serving) -> None:
    told = socket.create_server(("127.0.0.1", 0))
    told.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    where = await serving.connected(told)
    assert not reported(where, nagle_on_accepted())


@LINUX
async def test_an_asyncio_listener_made_with_proto_tcp_is_not_reported_though_its_own_flag_is_off(
    serving: Serving,
) -> None:
    """asyncio.start_server(host, port) makes its socket with IPPROTO_TCP: each connection gets TCP_NODELAY."""
    where = await serving.connected(None)
    listener = serving.servers[0].sockets[0]
    assert listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
    assert not reported(where, nagle_on_accepted())


@LINUX
async def test_grpc_sets_tcp_nodelay_on_its_own_listener_and_connections() -> None:
    """The V2 gRPC lane's listener: C-core sets TCP_NODELAY itself (docs/platform.md P75), so it is not reported."""
    server = grpc.aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)  # C-core accepts on its own threads
        assert not any(w.endswith(f":{port}") for w in re.findall(r"\S+:\d+", nagle_on_accepted() or ""))
        flags = nodelay_by_role(port)
        assert flags["listening"] == [1] and flags["accepted"] == [1]
        writer.close()
        await writer.wait_closed()
    finally:
        await server.stop(None)


def nodelay_by_role(port: int) -> dict[str, list[int]]:
    """TCP_NODELAY of this process's sockets bound to `port`: the listener's and each accepted one's."""
    found: dict[str, list[int]] = {"listening": [], "accepted": []}
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            with socket.socket(fileno=os.dup(int(name))) as sock:
                if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.getsockname()[1] == port:
                    role = "listening" if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) else "accepted"
                    found[role].append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        except OSError:
            continue
    return found


@LINUX
async def test_only_a_plain_asyncio_loop_is_checked(serving: Serving) -> None:
    """uvloop sets TCP_NODELAY on every TCP connection; the worker's loop is plain asyncio (P40)."""
    import uvloop

    where = await serving.connected(socket.create_server(("127.0.0.1", 0)))
    assert reported(where, PlatformDoctor(stubs=[]).problem())  # this test's loop: plain asyncio
    other = uvloop.new_event_loop()
    try:
        assert not reported(where, PlatformDoctor(stubs=[], loop=other).problem())
    finally:
        other.close()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@LINUX
async def test_the_descriptor_check_runs_at_start_and_at_most_once_every_recheck_s(serving: Serving) -> None:
    """A probe reads no descriptor: a Nagle-on listener that appears after the start is named once
    `recheck_s` has passed, not by the probes before it (each would cost a read of every open socket)."""
    clock = Clock()
    doctor = PlatformDoctor(stubs=[], recheck_s=30.0, clock=clock)
    where = await serving.connected(socket.create_server(("127.0.0.1", 0)))
    for clock.now in (0.0, 1.0, 29.9):
        assert not reported(where, doctor.problem())
    clock.now = 30.0
    assert reported(where, doctor.problem())
    assert reported(where, PlatformDoctor(stubs=[], clock=clock).problem())  # at start, at once


def test_without_proc_the_listener_check_says_nothing(tmp_path: Path) -> None:
    assert nagle_on_accepted(str(tmp_path / "no-proc")) is None


# -- through readiness -------------------------------------------------------------------------


async def test_readiness_lists_the_platform_problem_as_degraded(
    service: ScoringService, worker_logger: logging.Logger
) -> None:
    assert not any(r.startswith("platform: ") for r in service.readiness().degraded)
    worker_logger.setLevel(logging.INFO)
    worker_logger.addHandler(logging.NullHandler())
    readiness = service.readiness()
    assert readiness.ready
    assert any(r.startswith("platform: the worker's logger 'azure_functions_worker'") for r in readiness.degraded)
