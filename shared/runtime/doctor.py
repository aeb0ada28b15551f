"""The platform doctor: problems of the process this app runs in, each listed in readiness with its fix.

Each check below is a problem this project met, and returns one sentence with its fix, or None:

    two_copies            two versions of protobuf or grpcio on sys.path: the first wins, a pin may not run
    stub_problem          a generated protobuf stub that does not load on the loaded protobuf runtime
    worker_info_logging   a worker logger still passing INFO records (one gRPC message to the host each)
    nagle_on_accepted     connections accepted on this process's listeners with TCP_NODELAY off

`PlatformDoctor.problem` is the core's `platform` part (readiness's `degraded`). The first two read
what cannot change once the process runs (sys.path, the installed files) and run once, at start. The
last two read state the app sets after the build and that later code can undo: the worker's log
levels (a handful of loggers) each time readiness is asked; the listeners and their connections at
start and then at most once every RECHECK_S seconds, never once per probe. That check reads every open
file descriptor (a few microseconds each: 55 ms of the event loop with 3,000 sockets open), and the
readiness probe is anonymous while gRPC accepts connections before any key is checked, so a caller
that opens connections would otherwise make each probe dearer (docs/benchmark.md, "Readiness probes").
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import socket
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

__all__ = [
    "PINNED",
    "RECHECK_S",
    "WORKER_LOGGERS",
    "PlatformDoctor",
    "app_stubs",
    "nagle_on_accepted",
    "stub_problem",
    "two_copies",
    "worker_info_logging",
]

# The distributions both the worker's bundle and requirements.txt carry (docs/capacity.md).
PINNED = ("protobuf", "grpcio")
# The 3.11 worker's, the 3.13 worker's, its runtime library's and the azure-functions SDK's loggers.
WORKER_LOGGERS = ("azure_functions_worker", "proxy_worker", "azure_functions_runtime", "azure.functions")
_SHARED = Path(__file__).resolve().parents[1]
_FD_DIR = "/proc/self/fd"
RECHECK_S = 30.0  # the per-descriptor check at most this often: a Nagle problem shows within 30 s of its start


class PlatformDoctor:
    """Every check of this module, as one readiness problem (`platform: a; b`)."""

    def __init__(
        self,
        *,
        path: Sequence[str] | None = None,
        stubs: Iterable[Path] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        fd_dir: str = _FD_DIR,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`path`: sys.path by default; `stubs`: the app's generated stubs (`app_stubs()`); `loop`: the
        running loop, whose kind decides whether Nagle on accepted connections is this app's to fix;
        `recheck_s`: how often at most the descriptors are read again (`clock` tells the time)."""
        stubs = app_stubs() if stubs is None else stubs
        self._at_start = [p for p in (two_copies(path=path), *map(stub_problem, stubs)) if p]
        self._plain_loop = _is_plain_asyncio(loop if loop is not None else _running_loop())
        self._fd_dir, self._recheck_s, self._clock = fd_dir, recheck_s, clock
        self._nagle, self._nagle_at = self._read_nagle(), clock()

    def problem(self) -> str | None:
        """What the platform makes this process do less well than it should, with each fix; None when well.
        O(1) per call but once every `recheck_s`, whatever the number of open descriptors."""
        if self._clock() - self._nagle_at >= self._recheck_s:
            self._nagle, self._nagle_at = self._read_nagle(), self._clock()
        found = [*self._at_start, *(p for p in (worker_info_logging(), self._nagle) if p)]
        return f"platform: {'; '.join(found)}" if found else None

    def _read_nagle(self) -> str | None:
        # NOTE: uvloop sets TCP_NODELAY on every connection: only a plain asyncio loop's are this app's to fix
        return nagle_on_accepted(self._fd_dir) if self._plain_loop else None


def two_copies(names: Iterable[str] = PINNED, path: Sequence[str] | None = None) -> str | None:
    """Distributions of `names` installed at two different versions on `path` (sys.path by default).

    The first copy on the path is the one imported, so the other one's version (often the pin in
    requirements.txt) is not what runs. Two copies at the same version are harmless and not reported.
    """
    searched = list(sys.path if path is None else path)
    found = []
    for name in sorted(names):
        copies = [
            (d.version, str(d.locate_file(""))) for d in importlib.metadata.distributions(name=name, path=searched)
        ]
        if not copies:
            continue
        (version, where), *rest = copies
        others = [(v, w) for v, w in rest if v != version]
        if others:
            shadowed = ", ".join(f"{v} in {w}" for v, w in others)
            found.append(
                f"two copies of {name} on sys.path ({version} imported from {where}; {shadowed}): the first "
                f"wins, so a pin of another version is not what runs; fix: pin {name}=={version} in "
                "requirements.txt (the copy that runs), or install one copy only"
            )
    return "; ".join(found) or None


def app_stubs() -> list[Path]:
    """The app's generated protobuf stubs (`*_pb2.py` under `shared/`)."""
    return sorted(_SHARED.rglob("*_pb2.py"))


def stub_problem(stub: Path) -> str | None:
    """Why the generated stub at `stub` would not import on the loaded protobuf runtime, or None.

    Read, not imported (an import registers its file in the default descriptor pool): every
    `google.protobuf` name it imports must exist, and the gencode version newer protoc records in a
    `ValidateProtobufRuntimeVersion(...)` call must pass the runtime's own validator.
    """
    import google.protobuf

    runtime = google.protobuf.__version__
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    reason = _missing_import(tree) or _refused_gencode(tree)
    if reason is None:
        return None
    return (
        f"the generated stub {_shown(stub)} does not load on protobuf {runtime} ({reason}); fix: regenerate it "
        "at the protobuf 4.25 gencode level (`make stubs`), which loads on 4.25 and newer"
    )


def worker_info_logging(names: Iterable[str] = WORKER_LOGGERS) -> str | None:
    """A worker logger (or one under it) that something made and that passes INFO records to a handler.

    The worker hangs its gRPC log handler on the root logger at INFO and writes an INFO line per
    invocation, each a message to the host (docs/platform.md P76; its cost: docs/capacity.md). Only
    loggers that exist are read: outside a worker nothing made them and there is nothing to report.
    """
    prefixes = tuple(names)
    made = list(logging.Logger.manager.loggerDict.items())  # NOTE: one C-level copy; another thread may add
    for name, logger in sorted(made, key=lambda item: item[0]):
        under = name in prefixes or name.startswith(tuple(p + "." for p in prefixes))
        if under and isinstance(logger, logging.Logger) and logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
            level = logging.getLevelName(logger.getEffectiveLevel())
            return (
                f"the worker's logger {name!r} passes INFO records to a handler (effective level {level}): each "
                "invocation sends its INFO lines to the host as gRPC messages; fix: set it to WARNING after the "
                "worker set its levels (shared.adapters.functions.quiet_worker_logs does, once the service is built)"
            )
    return None


def nagle_on_accepted(fd_dir: str = _FD_DIR) -> str | None:
    """This process's listeners whose accepted connections have TCP_NODELAY off (Linux; None elsewhere).

    Plain asyncio sets TCP_NODELAY on an accepted connection only when the listening socket was made
    with proto IPPROTO_TCP, which `socket.create_server()` sockets are not (docs/platform.md P40);
    gRPC's C-core sets it on its own listeners (P75). The connections are read, not the listener,
    because a listener made with proto IPPROTO_TCP serves with it on although its own flag is off; a
    listener with no connection yet shows up with its first one.
    """
    if not os.path.isdir(fd_dir):
        return None
    listeners: dict[int, str] = {}
    accepted: list[tuple[int, bool]] = []
    for listening, nodelay, local in _tcp_sockets(fd_dir):
        port = int(local[1])
        if listening:
            listeners[port] = f"{local[0]}:{port}"
        else:
            accepted.append((port, nodelay))
    slow = sorted({listeners[port] for port, nodelay in accepted if port in listeners and not nodelay})
    if not slow:
        return None
    return (
        f"connections accepted on {', '.join(slow)} have TCP_NODELAY off on the worker's plain asyncio loop: "
        "small answers wait for the peer's delayed ACK (about 40 ms); fix: set TCP_NODELAY on the listening "
        "socket before serving (accepted connections inherit it)"
    )


def _tcp_sockets(fd_dir: str) -> Iterator[tuple[bool, bool, tuple[str, int]]]:
    """(listening, TCP_NODELAY, local address) of each TCP socket among this process's descriptors."""
    for name in os.listdir(fd_dir):
        try:
            if not os.readlink(os.path.join(fd_dir, name)).startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))  # NOTE: a copy: the owner's socket stays untouched
        except (OSError, ValueError):  # closed (or reused) since it was listed
            continue
        with sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                continue
            try:
                listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
                nodelay = bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                yield listening, nodelay, sock.getsockname()[:2]
            except OSError:
                continue


def _missing_import(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("google.protobuf"):
            for alias in node.names:
                if not _importable(node.module, alias.name):
                    return f"it imports {alias.name} from {node.module}, which this runtime lacks"
    return None


def _importable(module: str, name: str) -> bool:
    try:
        return (
            hasattr(importlib.import_module(module), name) or importlib.util.find_spec(f"{module}.{name}") is not None
        )
    except ImportError:
        return False


def _refused_gencode(tree: ast.Module) -> str | None:
    """The runtime's own verdict on the gencode version the stub records, if it records one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) == "ValidateProtobufRuntimeVersion" and len(node.args) == 6:
            domain, *recorded = node.args
            try:
                from google.protobuf import runtime_version
            except ImportError:
                return "it checks its gencode version with runtime_version, which this runtime lacks"
            try:
                with warnings.catch_warnings():  # a gencode one major older loads, with a warning
                    warnings.simplefilter("ignore")
                    runtime_version.ValidateProtobufRuntimeVersion(
                        getattr(runtime_version.Domain, _called(domain) or "PUBLIC"),
                        *(ast.literal_eval(arg) for arg in recorded),
                    )
            except runtime_version.VersionError as exc:
                return str(exc)
            except (ValueError, TypeError, AttributeError):  # not literals: not what protoc writes, nothing to judge
                return None
    return None


def _called(node: ast.expr) -> str | None:
    """The last name of a call's function or of an attribute: `a.b.C(...)` -> "C"."""
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _is_plain_asyncio(loop: asyncio.AbstractEventLoop | None) -> bool:
    return loop is not None and type(loop).__module__.split(".")[0] == "asyncio"


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(_SHARED.parent))
    except ValueError:
        return str(path)
