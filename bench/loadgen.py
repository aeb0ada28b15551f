"""An open-loop load generator: requests are sent on a fixed schedule, whatever the server does.

wrk (closed loop) finds the throughput at a fixed concurrency; this finds latency at a fixed
offered rate. Latency is measured from each request's *scheduled* send time, so a stalled
server is charged for the requests queued behind the stall (no coordinated omission).
It speaks raw HTTP/1.1 keep-alive over asyncio streams to stay cheap on a 2-core machine,
and keeps the `timings_ms` of every response for the per-stage budget.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import orjson

from bench.verdicts import http_verdict

STAGES = ("parse", "features", "cache", "queue", "inference", "total")


@dataclass
class OpenLoopResult:
    rate: float
    sent: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    stages: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STAGES})
    verdicts: Counter[str] = field(default_factory=Counter)  # bench.verdicts: completed, rejected:<code>, shed:<code>
    late_ms: list[float] = field(default_factory=list)  # how late the generator handed each request over

    @property
    def achieved(self) -> float:
        return len(self.latencies_ms) / self.duration_s if self.duration_s else 0.0

    duration_s: float = 0.0


def now_stamp(age_s: float = 0.0) -> str:
    """The current UTC time, less `age_s` seconds, as an event's `timestamp` (whole seconds)."""
    return datetime.fromtimestamp(time.time() - age_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(n: int, users: int = 2000, *, timestamp: str | None = None) -> bytes:
    """The n-th synthetic payment, dated now unless `timestamp` says otherwise: an event a bench
    sends must be inside the queue path's idempotency window (EVENT_MAX_AGE_S), or it times the
    `event_expired` rejection instead of scoring (bench/verdicts.py)."""
    cents = n % 500_000
    return orjson.dumps(
        {
            "event_id": f"ol-{n}",
            "user_id": f"u{n % users:05d}",
            "amount": 1 + cents / 100,
            "currency": "USD",
            "merchant_id": f"m-{n % 97}",
            "merchant_category": "5411",
            "country": "US",
            "channel": "app",
            "timestamp": timestamp or now_stamp(),
        }
    )


def _request(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def open_loop(
    port: int,
    rate: float,
    duration_s: float,
    *,
    connections: int = 16,
    offset: int = 0,
    path: str = "/api/score",
    body: Callable[[int], bytes] = event_body,
) -> OpenLoopResult:
    """Offer `rate` requests/s of unique events (`body(n)`) for `duration_s` seconds."""
    total = int(rate * duration_s)
    result = OpenLoopResult(rate=rate, sent=total)
    queue: asyncio.Queue[tuple[float, int] | None] = asyncio.Queue()

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while (job := await queue.get()) is not None:
                scheduled, n = job
                writer.write(_request(path, body(offset + n)))
                try:
                    status, answer = await _read_response(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    result.errors += 1
                    result.verdicts["connection_lost"] += 1
                    return
                result.verdicts[http_verdict(status, answer)] += 1
                if status != 200:
                    result.errors += 1
                    continue
                result.latencies_ms.append((time.perf_counter() - scheduled) * 1000)
                timings = orjson.loads(answer).get("timings_ms", {})
                for stage in STAGES:
                    if stage in timings:
                        result.stages[stage].append(timings[stage])
        finally:
            writer.close()

    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    start = time.perf_counter()
    for n in range(total):
        scheduled = start + n / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        result.late_ms.append((time.perf_counter() - scheduled) * 1000)
        queue.put_nowait((scheduled, n))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    result.duration_s = time.perf_counter() - start
    return result
