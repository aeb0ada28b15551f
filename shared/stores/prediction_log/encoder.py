"""The prediction log's encoder process: records packed on the serving loop, their lines made in another process.

    serving process (the writer)    pack: each record's fields one tuple (one C call), a run's rows one
                                    float32 buffer, the chunk one msgpack frame (~1 µs a record)
    encoder process                 unpack into the same `DecisionRecord`s, `encode_records` them: the
                                    JSON lines, one frame back (the ~5 µs a record that leave the loop)

Encoding was most of what the log cost the serving loop (docs/benchmark.md, "The prediction
log's encoder process"): the hash, the row's struct and the JSON of 25 floats a record. Packing
costs a fifth of it; the rest runs on another core, while the loop serves requests. The lines
are byte for byte what `encode_records` writes in process (tests/stores/prediction_log/test_encoder.py).

One child per log, `python -m shared.stores.prediction_log.encoder`, started on first use; it
reads frames on stdin and answers each on stdout, in order, one at a time. Frames are a 4-byte
little-endian length and msgpack; the first is the hash key (a secret: never in argv or the
environment). It exits at the end of its stdin, so it never outlives the serving process.

The writer never waits on it long and never loses a record to it: the records stay the writer's
until their lines come back. A child that does not answer within REPLY_S (STARTUP_S for its
first), exits, or answers what is no reply, is stopped; `encode` then answers None and the writer
encodes in process, as with PREDICTION_LOG_ENCODER=inline, until a new child is started
RESTART_S later. A group the child could not encode (one bad record) comes back None: the writer
encodes that group in process, where the record that fails is counted on its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import sys
import time
from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec

from shared.domain.answers import ReasonCode, Review
from shared.domain.records import DecisionRecord, Shadowed, encode_records

__all__ = ["REPLY_S", "RESTART_S", "STARTUP_S", "ProcessEncoder", "cpus", "encode_packed", "pack", "wanted"]

log = logging.getLogger(__name__)
REPLY_S = 5.0  # a chunk's answer: ~1 ms of the child's CPU; past this it is stuck
STARTUP_S = 30.0  # the first answer also waits for the child's interpreter and imports (~0.2 s)
RESTART_S = 30.0  # after a failure: encoded in process this long, then a new child
ROOT = Path(__file__).resolve().parents[3]
_HEADER = struct.Struct("<I")
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def wanted(choice: str) -> bool:
    """PREDICTION_LOG_ENCODER: `process`, `inline`, or `auto`: a process where there is a second CPU
    for it (on one, packing and the child's work together cost more than encoding on the loop)."""
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

# NOTE: what a record's line is made of, in the order `_Fields` decodes it (not `columns`, `row`:
# once a run; not `thresholds`, `logged`: no line holds them)
_fields = attrgetter(
    "at", "via", "event_id", "model", "version", "fingerprint", "defaulted",
    "score", "decision", "reason", "timings", "review", "arm", "shadow", "reasons",
)  # fmt: skip
_columns = attrgetter("columns")
_Fields = tuple[
    Any, str, str, str, str, str, dict[str, str], Any, str, str, dict[str, Any],
    Review | None, str | None, Shadowed | None, list[ReasonCode] | None,
]  # fmt: skip
_Run = tuple[list[str], bytes, list[_Fields]]  # columns, their rows as float32, each record's fields
_Request = list[list[_Run] | None]  # a group per partition; None: one this side could not pack
_Reply = list[bytes | None]


def _plain(obj: Any) -> Any:
    """The encoder's hook: a record's read-only defaulted reasons (a mappingproxy) as a dict."""
    if hasattr(obj, "keys"):
        return dict(obj)
    raise NotImplementedError(f"cannot pack {type(obj).__name__}")


_encode_frame = msgspec.msgpack.Encoder(enc_hook=_plain).encode


_UNPACKABLE = (TypeError, NotImplementedError, UnicodeEncodeError, OverflowError)


def pack(groups: Sequence[Sequence[DecisionRecord]]) -> bytes:
    """The groups as one request frame's body (a group that cannot be packed goes as None)."""
    request = [_runs(group) for group in groups]
    try:
        return _encode_frame(request)
    except _UNPACKABLE:  # NOTE: rare: find the groups that will not pack, send the others
        return _encode_frame([runs if _packs(runs) else None for runs in request])


def _runs(group: Sequence[DecisionRecord]) -> list[tuple[Sequence[str], bytes, list[Any]]] | None:
    """A group's consecutive runs of records sharing their columns (the lines keep their order)."""
    runs = []
    for columns, run in groupby(group, _columns):
        records = list(run)
        rows = b"".join([r.row.tobytes() for r in records])
        if len(rows) != 4 * len(columns) * len(records):  # NOTE: not one float32 per column: encoded here
            return None
        runs.append((columns, rows, [_fields(r) for r in records]))
    return runs


def _packs(runs: Any) -> bool:
    try:
        _encode_frame(runs)
    except _UNPACKABLE:
        return False
    return True


_decode_request = msgspec.msgpack.Decoder(_Request).decode
_decode_reply = msgspec.msgpack.Decoder(_Reply).decode


def encode_packed(body: bytes, key: bytes) -> bytes:
    """The child's work: a request frame's body in, its reply's body out (each group's lines, or None)."""
    reply: list[bytes | None] = []
    for group in _decode_request(body):
        if group is None:
            reply.append(None)
            continue
        records = []
        for names, rows, fields in group:
            columns, width = tuple(names), len(names)
            floats = memoryview(rows).cast("f")  # NOTE: a slice's tolist() is numpy's: float32 → float
            for i, f in enumerate(fields):
                row = floats[i * width : (i + 1) * width]
                records.append(
                    DecisionRecord(f[0], f[1], f[2], f[3], f[4], f[5], columns, row, f[6], f[7], f[8], f[9],  # type: ignore[arg-type]
                                   f[10], f[11], f[12], None, True, f[13], f[14])  # fmt: skip
                )
        try:
            reply.append(encode_records(records, key))
        except Exception:  # NOTE: a record that cannot be encoded: the writer encodes the group, counting it
            reply.append(None)
    return _encode_frame(reply)


class ProcessEncoder:
    """The writer's side: one child, one request at a time (the log's lock orders its calls)."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._child: asyncio.subprocess.Process | None = None
        self._answered = False  # the child has answered once (STARTUP_S until it has)
        self._down_until = 0.0
        self.failure: str | None = None  # why the last child was stopped (readiness does not degrade on it)

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
            child = self._child if self._child is not None else await self._start()
            assert child.stdin is not None and child.stdout is not None  # noqa: S101 piped by _start
            child.stdin.write(_HEADER.pack(len(body)) + body)
            async with asyncio.timeout(REPLY_S if self._answered else STARTUP_S):
                await child.stdin.drain()
                size = _HEADER.unpack(await child.stdout.readexactly(_HEADER.size))[0]
                reply = _decode_reply(await child.stdout.readexactly(size))
        except asyncio.CancelledError:
            self._stop()  # NOTE: a request left half-answered: a new child, so no reply is read out of turn
            raise
        except Exception as exc:  # noqa: BLE001 whatever it was, the records are encoded in process
            self._failed(exc)
            return None
        if len(reply) != len(groups):
            self._failed(ValueError(f"{len(reply)} answers to {len(groups)} groups"))
            return None
        self._answered = True
        return reply

    async def _start(self) -> asyncio.subprocess.Process:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # NOTE: the same imports
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", __name__, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            cwd=ROOT, env=env,
        )  # fmt: skip
        assert child.stdin is not None  # noqa: S101 piped above
        child.stdin.write(_HEADER.pack(len(self._key)) + self._key)
        self._child, self._answered = child, False
        return child

    def _failed(self, exc: BaseException) -> None:
        self.failure = f"the encoder process failed: {type(exc).__name__}: {exc}".rstrip(": ")
        log.warning("prediction log: %s; encoding in process for %.0f s", self.failure, RESTART_S)
        self._down_until = time.monotonic() + RESTART_S
        self._stop()

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None and child.returncode is None:
            child.kill()

    async def aclose(self) -> None:
        """End the child: its stdin closed, it exits (killed past a second)."""
        child, self._child = self._child, None
        if child is None or child.returncode is not None:
            return
        assert child.stdin is not None  # noqa: S101 piped by _start
        child.stdin.close()
        try:
            async with asyncio.timeout(1.0):
                await child.wait()
        except TimeoutError:
            child.kill()
            await child.wait()


def _read(stream: Any, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def main() -> None:
    """The child: frames in on stdin, answers out on stdout, until stdin ends."""
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    sys.stdout = sys.stderr  # NOTE: a stray print must not become a frame
    header = _read(inp, _HEADER.size)
    key = _read(inp, _HEADER.unpack(header)[0]) if header is not None else None
    while key is not None:
        header = _read(inp, _HEADER.size)
        body = _read(inp, _HEADER.unpack(header)[0]) if header is not None else None
        if body is None:
            return
        try:
            reply = encode_packed(body, key)
        except Exception:  # NOTE: a frame it cannot read: an empty answer, which the writer takes as a failure
            reply = _encode_frame([])
        out.write(_HEADER.pack(len(reply)) + reply)
        out.flush()


if __name__ == "__main__":
    main()
