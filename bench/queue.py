"""The queue path's throughput beside `/api/score/batch`, in one process, on the same service.

    .venv/bin/python -m bench.queue --events 10000 [--write events.jsonl]

(1) the Service Bus batch handler as `make replay` drives it (batches of 64, 4 in flight,
idempotency in Redis when REDIS_URL is set, else in-process); (2) the ASGI app called
in-process with `/api/score/batch` bodies of 256 events, 4 in flight. Distinct amounts per
part, so neither is served by the other's prediction cache. `--write` also writes the
queue part's events as a JSON-lines file for `make replay FILE=...`.

Every event is dated when it is built (inside EVENT_MAX_AGE_S), and each part counts its verdicts
(completed, duplicate, rejected:<code>; bench/verdicts.py): a part where under 99.9 % of the events
were scored raises `WorkNotDone` and reports nothing (it would have timed rejections).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.loadgen import event_body, now_stamp
from bench.verdicts import Verdicts, batch_verdicts
from shared.adapters.http.app import create_app
from shared.adapters.queue.handler import QueueHandler
from shared.adapters.queue.publisher import MemoryPublisher
from shared.adapters.queue.replay import messages, replay
from shared.core.holder import ServiceHolder
from shared.settings import Settings

HTTP_BATCH = 256
IN_FLIGHT = 4
HTTP_OFFSET = 1_000_000  # other events (other amounts) for the HTTP part


async def post(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    status: list[int] = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status[0], b"".join(chunks)


async def run(
    n: int, write: Path | None, event_age_s: float = 0.0, settings: Settings | None = None
) -> dict[str, object]:
    settings = settings or Settings.from_env()
    holder = ServiceHolder(lambda: settings)
    await holder.get()
    lines = [event_body(i, timestamp=now_stamp(event_age_s)) for i in range(n)]
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
        await replay(handler, list(messages(lines)), out)
        queue_s = time.perf_counter() - started
        queued = Verdicts("queue")
        queued.update(verdict(line) for line in out)
        queued.require("completed")

        bodies = [
            b'{"events":[' + b",".join(event_body(HTTP_OFFSET + j) for j in range(i, min(i + HTTP_BATCH, n))) + b"]}"
            for i in range(0, n, HTTP_BATCH)
        ]
        started = time.perf_counter()
        answers = []
        for i in range(0, len(bodies), IN_FLIGHT):
            answers += await asyncio.gather(*(post(app, "/api/score/batch", b) for b in bodies[i : i + IN_FLIGHT]))
        http_s = time.perf_counter() - started
        batched = Verdicts("http_batch")
        for status, body in answers:
            batched.update(batch_verdicts(status, body))
        batched.require("completed")
    finally:
        await handler.aclose()
        await holder.aclose()
    return {
        "events": n,
        "store": "redis" if settings.redis_url else "in-process",
        "queue_verdicts": queued.as_dict(),
        "http_batch_verdicts": batched.as_dict(),
        "queue_msgs_per_s": round(n / queue_s),
        "http_batch_events_per_s": round(n / http_s),
    }


def verdict(line: bytes) -> str:
    """A replay output line's verdict: its outcome, with the error code when it was rejected."""
    handled = json.loads(line)
    reason = handled.get("reason") or ""
    return f"{handled['outcome']}:{reason.partition(':')[0]}" if handled["outcome"] != "completed" else "completed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--write", type=Path, default=None)
    parser.add_argument("--event-age-s", type=float, default=0.0, help="date the events this far in the past")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.events, args.write, args.event_age_s))))


if __name__ == "__main__":
    main()
