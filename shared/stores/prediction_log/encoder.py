"""The prediction log's encoder process: records packed on the serving loop, their lines made in another process.

    serving process (the writer)    pack: each record's fields one tuple (one C call), a run's rows one
                                    float32 buffer, the chunk one msgpack frame (~1 µs a record)
    encoder process                 unpack into the same `DecisionRecord`s, `encode_records` them: the
                                    JSON lines, one frame back (the ~5 µs a record that leave the loop)

Encoding was most of what the log cost the serving loop (docs/benchmark.md, "2026-12-02,
morning"): the hash, the row's struct and the JSON of 25 floats a record. Packing costs a fifth
of it; the rest runs on another core, while the loop serves requests. The lines are byte for
byte what `encode_records` writes in process (tests/stores/prediction_log/test_encoder.py).

One child per log, `python -m shared.stores.prediction_log.encoder <fd> <offset>`, started on
first use, at nice 10. Requests and replies travel through a memfd both processes map (a
request from its start, its reply from `offset`); the pipes carry only their sizes, a 4-byte
little-endian length each way, one request at a time. The first thing on its stdin is the hash
key (a secret: never in argv or the environment). It exits at the end of its stdin, so it never
outlives the serving process.

The writer never waits on it long and never loses a record to it: the records stay the writer's
until their lines come back. A child that does not answer within REPLY_S (STARTUP_S for its
first), exits, or answers what is no reply, is stopped; `encode` then answers None and the writer
encodes in process, as with PREDICTION_LOG_ENCODER=inline, until a new child is started
RESTART_S later. A request or a reply too big for the shared memory, and a group the child could
not encode (one bad record), are encoded in process too, where a record that fails is counted on
its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import mmap
import os
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec

from shared.domain.answers import ReasonCode, Review
from shared.domain.records import Arm, DecisionRecord, Shadowed, Via, encode_records, plain_defaulted

__all__ = ["REPLY_S", "RESTART_S", "STARTUP_S", "ProcessEncoder", "cpus", "encode_packed", "pack", "wanted"]

log = logging.getLogger(__name__)
REPLY_S = 5.0  # a chunk's answer: ~1 ms of the child's CPU; past this it is stuck
STARTUP_S = 30.0  # the first answer also waits for the child's interpreter and imports (~0.2 s)
RESTART_S = 30.0  # after a failure: encoded in process this long, then a new child
ROOT = Path(__file__).resolve().parents[3]
_HEADER = struct.Struct("<I")
# NOTE: the memory both processes map: a request (~90 KB for CHUNK_ELSEWHERE records) from its
# start, its reply (~260 KB) from REQUEST_BYTES; virtual size, resident only as far as written
REQUEST_BYTES = 4 << 20
SHARED_BYTES = 32 << 20
# NOTE: the child yields a shared core to the serving process: it needs ~4% of one at capacity,
# and a reply may wait (REPLY_S), where a request may not
NICE = 10
GC_GEN0 = 100_000  # the child's generation-0 threshold (the serving process's is GC_GEN0_THRESHOLD)
TOO_BIG = 0xFFFF_FFFF  # the reply's size when it does not fit: the writer encodes that chunk itself
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def wanted(choice: str) -> bool:
    """PREDICTION_LOG_ENCODER: `process`, `inline`, or `auto`: a process where there is a second CPU
    for it (on one, packing and the child's work together cost more than encoding on the loop)."""
    if not hasattr(os, "memfd_create"):
        return False  # NOTE: not Linux: no shared memory by file descriptor
    return choice == "process" or (choice == "auto" and cpus() > 1)


def cpus() -> float:
    """The CPUs this process may use: those it may run on, capped by its cgroup's quota (a
    Container Apps replica's `cpu`, which the host's core count does not show)."""
    count = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    try:
        quota, period = CPU_MAX.read_text().split()[:2]
    except (OSError, ValueError):
        return count
    return count if quota == "max" else min(count, int(quota) / int(period))


# NOTE: what a record's line is made of, in the order `_Fields` decodes it (not what a run of
# records shares: `columns`, `model`, `version`, `fingerprint`, nor `row`: a run's rows are one
# buffer; not `defaulted`: a list of its own, a dict where the record holds a read-only view;
# not `thresholds`, `logged`: no line holds them)
_fields = attrgetter(
    "at", "via", "event_id", "score", "decision", "reason", "timings", "review", "arm", "shadow", "reasons"
)
_shared = attrgetter("columns", "model", "version", "fingerprint")  # NOTE: a run: consecutive records sharing these
_defaulted = attrgetter("defaulted")
_Fields = tuple[
    Any, Via, str, Any, str, str, dict[str, Any], Review | None, Arm | None, Shadowed | None, list[ReasonCode] | None
]  # fmt: skip
_Shared = tuple[list[str], str, str, str]  # columns, model, version, fingerprint
_Run = tuple[_Shared, bytes, list[_Fields], list[dict[str, str]]]  # shared, rows (float32), fields, defaulted
_Request = list[list[_Run] | None]  # a group per partition; None: one this side could not pack
_Reply = list[bytes | None]
_encode_frame = msgspec.msgpack.Encoder().encode


_UNPACKABLE = (TypeError, UnicodeEncodeError, OverflowError)


def pack(groups: Sequence[Sequence[DecisionRecord]]) -> bytes:
    """The groups as one request frame's body (a group that cannot be packed goes as None)."""
    request = [_runs(group) for group in groups]
    try:
        return _encode_frame(request)
    except _UNPACKABLE:  # NOTE: rare: find the groups that will not pack, send the others
        return _encode_frame([runs if _packs(runs) else None for runs in request])


def _runs(group: Sequence[DecisionRecord]) -> list[tuple[Any, bytes, list[Any], list[Any]]] | None:
    """A group's consecutive runs of records sharing their columns, model, version and fingerprint (the lines keep their order)."""
    runs = []
    for shared, run in groupby(group, _shared):
        records = list(run)
        rows = b"".join([r.row.tobytes() for r in records])
        if len(rows) != 4 * len(shared[0]) * len(records):  # NOTE: not one float32 per column: encoded here
            return None
        defaulted = list(map(plain_defaulted, map(_defaulted, records)))
        runs.append((shared, rows, list(map(_fields, records)), defaulted))
    return runs


def _packs(runs: Any) -> bool:
    try:
        _encode_frame(runs)
    except _UNPACKABLE:
        return False
    return True


_decode_request = msgspec.msgpack.Decoder(_Request).decode
_decode_reply = msgspec.msgpack.Decoder(_Reply).decode


_COLUMNS: dict[tuple[str, ...], tuple[str, ...]] = {}  # the child's one tuple per column list


def _interned(columns: tuple[str, ...]) -> tuple[str, ...]:
    """One tuple per column list for the child's life. NOTE: `_row_type` knows a row struct by its
    tuple; a new tuple per request made a new struct class per request, and the classes (cyclic,
    in a process whose collector rarely runs) grew the child by ~10 MiB a minute under load."""
    if len(_COLUMNS) > 256:  # NOTE: a few versions live at a time
        _COLUMNS.clear()
    return _COLUMNS.setdefault(columns, columns)


def encode_packed(body: bytes, key: bytes) -> bytes:
    """The child's work: a request frame's body in, its reply's body out (each group's lines, or None)."""
    reply: list[bytes | None] = []
    for group in _decode_request(body):
        if group is None:
            reply.append(None)
            continue
        records = []
        for (names, model, version, fingerprint), rows, fields, defaulted in group:
            columns, width = _interned(tuple(names)), len(names)
            floats = memoryview(rows).cast("f")  # NOTE: a slice's tolist() is numpy's: float32 → float
            for i, ((at, via, event, score, decision, reason, timings, review, arm, shadow, reasons), why) in enumerate(
                zip(fields, defaulted, strict=True)
            ):
                # NOTE: a memoryview where the record holds an array: all the encoder asks of it is tolist()
                row: Any = floats[i * width : (i + 1) * width]
                records.append(DecisionRecord(
                    at, via, event, model, version, fingerprint, columns, row, why,
                    score, decision, reason, timings, review, arm, None, True, shadow, reasons,
                ))  # fmt: skip
        try:
            reply.append(encode_records(records, key))
        except Exception:  # NOTE: a record that cannot be encoded: the writer encodes the group, counting it
            reply.append(None)
    return _encode_frame(reply)


class ProcessEncoder:
    """The writer's side: one child, one request at a time (the log's lock orders its calls).

    NOTE: the frames travel through shared memory (a memfd both map), and the pipes carry only
    their lengths: a pipe took ~110 µs of the loop to pass a 90 KB frame to the child and ~260
    µs with its 260 KB answer (this 2-core VM), a copy out of shared memory takes ~5 µs."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._child: _Child | None = None
        self._answered = False  # the child has answered once (STARTUP_S until it has)
        self._down_until = 0.0
        self.failure: str | None = None  # why the last child was stopped

    @property
    def state(self) -> str:
        """`process`, or `inline` and why, while the child is down."""
        if time.monotonic() < self._down_until:
            return f"inline for now ({self.failure})"
        return "process"

    async def encode(self, groups: Sequence[Sequence[DecisionRecord]]) -> list[bytes | None] | None:
        """Each group's lines (None: that group to encode in process), or None: encode all in process."""
        if time.monotonic() < self._down_until:
            return None
        try:
            body = pack(groups)
            if self._child is None:
                self._child, self._answered = _Child(self._key), False
            child = self._child
            if len(body) > child.replies:
                return None  # NOTE: records far past a line's usual size: encoded here, the child stays
            child.shared[: len(body)] = body
            async with asyncio.timeout(REPLY_S if self._answered else STARTUP_S):
                size = await child.ask(len(body))
            if size == TOO_BIG:
                return None
            with memoryview(child.shared) as shared, shared[child.replies : child.replies + size] as frame:
                reply = _decode_reply(frame)  # NOTE: read in place: a slice of the mmap was one more copy
        except asyncio.CancelledError:
            self._stop()  # NOTE: a request left half-answered: a new child, so no reply is read out of turn
            raise
        except Exception as exc:  # NOTE: whatever it was, the records are encoded in process
            self._failed(exc)
            return None
        if len(reply) != len(groups):
            self._failed(ValueError(f"{len(reply)} answers to {len(groups)} groups"))
            return None
        self._answered = True
        return reply

    def _failed(self, exc: BaseException) -> None:
        self.failure = f"the encoder process failed: {type(exc).__name__}: {exc}".rstrip(": ")
        log.warning("prediction log: %s; encoding in process for %.0f s", self.failure, RESTART_S)
        self._down_until = time.monotonic() + RESTART_S
        self._stop()

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.kill()

    async def aclose(self) -> None:
        """End the child: its stdin closed, it exits (killed past a second)."""
        child, self._child = self._child, None
        if child is not None:
            await child.aclose()


class _Child:
    """The encoder process, its pipes (non-blocking on this side) and the memory both map."""

    def __init__(self, key: bytes) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # NOTE: the same imports
        self.replies = REQUEST_BYTES  # where a reply starts in the shared memory (a request ends before)
        fd = os.memfd_create("prediction-log-encoder")
        try:
            os.ftruncate(fd, SHARED_BYTES)  # NOTE: pages are taken as they are written (~350 KB a chunk)
            self.shared = mmap.mmap(fd, SHARED_BYTES)
            self.process = subprocess.Popen(  # noqa: S603 this interpreter and this module: a fixed argv, no shell
                [sys.executable, "-m", __name__, str(fd), str(self.replies)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(fd,), cwd=ROOT, env=env,
            )  # fmt: skip
        finally:
            os.close(fd)
        stdin, stdout = self.process.stdin, self.process.stdout
        if stdin is None or stdout is None:  # NOTE: never: both are piped above (this narrows them)
            raise OSError("the encoder process has no pipes")
        self._stdin, self._stdout = stdin, stdout
        stdin.write(_HEADER.pack(len(key)) + key)  # NOTE: ≤ 68 bytes into an empty pipe: never a short write
        stdin.flush()
        os.set_blocking(stdin.fileno(), False)
        os.set_blocking(stdout.fileno(), False)

    async def ask(self, size: int) -> int:
        """Tell the child a request of `size` bytes waits in shared memory; its reply's size."""
        loop = asyncio.get_running_loop()
        outfd = self._stdout.fileno()
        done: asyncio.Future[int] = loop.create_future()
        got = bytearray()

        def readable() -> None:
            try:
                data = os.read(outfd, _HEADER.size - len(got))
            except BlockingIOError:
                return
            except OSError as exc:
                done.set_exception(exc)
                return
            if not data:
                done.set_exception(EOFError("the encoder process exited"))
                return
            got.extend(data)
            if len(got) == _HEADER.size:
                done.set_result(_HEADER.unpack(got)[0])

        os.write(self._stdin.fileno(), _HEADER.pack(size))  # NOTE: 4 bytes into an empty pipe: whole, or an OSError
        loop.add_reader(outfd, readable)
        try:
            return await done
        finally:
            loop.remove_reader(outfd)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self._release()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(0.1)  # NOTE: killed, it is gone within microseconds

    async def aclose(self) -> None:
        self._release()  # NOTE: its stdin ends: it exits
        for _ in range(100):
            if self.process.poll() is not None:
                return
            await asyncio.sleep(0.01)
        self.process.kill()
        self.process.wait()

    def _release(self) -> None:
        for pipe in (self._stdin, self._stdout):
            with contextlib.suppress(OSError):
                pipe.close()
        self.shared.close()


def main() -> None:
    """The child: a request's size on stdin, its body in shared memory; the reply the same way back."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
    # NOTE: what it makes lives for one request and holds no cycles: Python's default thresholds
    # ran ~18 collections a second at capacity, ~0.7 µs of CPU a record
    gc.freeze()
    gc.set_threshold(GC_GEN0, 50, 100)
    fd, replies = int(sys.argv[1]), int(sys.argv[2])  # NOTE: the memory the writer made, and where replies start
    shared = mmap.mmap(fd, os.fstat(fd).st_size)
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    sys.stdout = sys.stderr  # NOTE: a stray print must not become an answer
    header = inp.read(_HEADER.size)
    key = inp.read(_HEADER.unpack(header)[0]) if len(header) == _HEADER.size else None
    while key is not None:
        header = inp.read(_HEADER.size)
        if len(header) != _HEADER.size:
            return
        size = _HEADER.unpack(header)[0]
        try:
            reply = encode_packed(shared[:size], key)
        except Exception:  # NOTE: a request it cannot read: an empty answer, which the writer takes as a failure
            reply = _encode_frame([])
        if len(reply) > len(shared) - replies:
            out.write(_HEADER.pack(TOO_BIG))
        else:
            shared[replies : replies + len(reply)] = reply
            out.write(_HEADER.pack(len(reply)))
        out.flush()


if __name__ == "__main__":
    main()
