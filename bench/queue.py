"""The queue path's throughput beside `/api/score/batch`, in one process, on the same service.

    .venv/bin/python -m bench.queue --events 10000 [--write events.jsonl]

(1) the Service Bus batch handler as `make replay` drives it (batches of 64, 4 in flight,
idempotency in Redis when REDIS_URL is set, else in-process); (2) the ASGI app called
in-process with `/api/score/batch` bodies of 256 events, 4 in flight. Distinct amounts per
part, so neither is served by the other's prediction cache. `--write` also writes the
queue part's events as a JSON-lines file for `make replay FILE=...`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.loadgen import event_body
from shared.adapters.http.app import create_app
from shared.adapters.queue.handler import QueueHandler
from shared.adapters.queue.publisher import MemoryPublisher
from shared.adapters.queue.replay import messages, replay
from shared.core.holder import ServiceHolder
from shared.settings import Settings

HTTP_BATCH = 256
IN_FLIGHT = 4
HTTP_OFFSET = 1_000_000  # other events (other amounts) for the HTTP part


async def post(app: Any, path: str, body: bytes) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


async def run(n: int, write: Path | None) -> dict[str, object]:
    settings = Settings.from_env()
    holder = ServiceHolder(lambda: settings)
    await holder.get()
    lines = [event_body(i) for i in range(n)]
    if write is not None:
        write.write_bytes(b"\n".join(lines) + b"\n")
    handler = QueueHandler.from_settings(settings, holder.get, publisher=MemoryPublisher())
    app = create_app(holder)
    try:
        warm = [event_body(2 * HTTP_OFFSET + i) for i in range(512)]  # NOTE: both paths warm before timing
        await replay(handler, list(messages(warm)), [])
        await post(app, "/api/score/batch", b'{"events":[' + b",".join(warm[:HTTP_BATCH]) + b"]}")
        out: list[bytes] = []
        started = time.perf_counter()
        outcomes = await replay(handler, list(messages(lines)), out)
        queue_s = time.perf_counter() - started

        bodies = [
            b'{"events":[' + b",".join(event_body(HTTP_OFFSET + j) for j in range(i, min(i + HTTP_BATCH, n))) + b"]}"
            for i in range(0, n, HTTP_BATCH)
        ]
        started = time.perf_counter()
        for i in range(0, len(bodies), IN_FLIGHT):
            codes = await asyncio.gather(*(post(app, "/api/score/batch", b) for b in bodies[i : i + IN_FLIGHT]))
            assert set(codes) == {200}, codes
        http_s = time.perf_counter() - started
    finally:
        await handler.aclose()
        await holder.aclose()
    return {
        "events": n,
        "store": "redis" if settings.redis_url else "in-process",
        "queue_outcomes": dict(outcomes),
        "queue_msgs_per_s": round(n / queue_s),
        "http_batch_events_per_s": round(n / http_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.events, args.write))))


if __name__ == "__main__":
    main()
