"""`make replay FILE=events.jsonl`: the queue path without a queue.

Each non-empty line is one message body (its `event_id` is the message id) and goes
through the same batch handler as the Service Bus trigger, idempotency included (Redis
when REDIS_URL is set, else this process). Lines go in batches of host.json's
`maxMessageBatchSize`, one batch at a time, as the host runs a batch trigger: its batch loop
waits for each invocation before it receives the next batch, and `maxConcurrentCalls` does not
apply to batches (docs/platform.md P2). The messages/s on stderr is therefore one replica's
queue-path rate, less the broker's receive and complete round trips. One JSON line per
message on stdout:

    {"outcome": "completed"|"duplicate"|"rejected"|"failed", "message_id": ..., "body": <result or null>, "reason": ...}

An envelope line (`{"events": [...]}`, docs/queue.md) gives a line per event, `line-N#<index>`.
A summary (counts, messages/s) goes to stderr. Exit 0 when every line was handled
(completed, duplicate or rejected); 1 when any failed; 2 when the file cannot be read.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from shared.adapters.queue.handler import QueueHandler
from shared.adapters.queue.messages import Incoming
from shared.adapters.queue.publisher import MemoryPublisher
from shared.adapters.queue.verdicts import Handled
from shared.settings import Settings

if TYPE_CHECKING:
    from shared.core.service import ScoringService

__all__ = ["main", "replay"]

BATCH = 64  # host.json extensions.serviceBus.maxMessageBatchSize


def message_id(line: bytes, number: int) -> str:
    """The event's id when the line has one (a string), else `line-N`."""
    try:
        found = orjson.loads(line).get("event_id")
    except (orjson.JSONDecodeError, AttributeError):
        found = None
    return found if isinstance(found, str) and found else f"line-{number}"


def messages(lines: Sequence[bytes]) -> Iterator[Incoming]:
    now = datetime.now(UTC)
    for number, line in enumerate(lines, 1):
        if line.strip():
            yield Incoming(message_id=message_id(line, number), body=line, enqueued_time=now)


def as_line(handled: Handled) -> bytes:
    body = orjson.Fragment(handled.body) if handled.outcome in ("completed", "duplicate") and handled.body else None
    return orjson.dumps(
        {"outcome": handled.outcome, "message_id": handled.message_id, "body": body, "reason": handled.reason}
    )


async def replay(handler: QueueHandler, incoming: Sequence[Incoming], out: list[bytes]) -> Counter[str]:
    """Every message through `handler`, one batch after the other, output lines in input order."""
    outcomes: Counter[str] = Counter()
    for start in range(0, len(incoming), BATCH):
        for verdict in await handler.handle(incoming[start : start + BATCH]):
            outcomes[verdict.outcome] += 1
            out.append(as_line(verdict))
    return outcomes


async def run(path: Path, settings: Settings) -> int:
    from shared.core.wiring import build_service

    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        print(f"replay: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    service = await build_service(settings)

    async def get() -> ScoringService:
        return service

    handler = QueueHandler.from_settings(settings, get, publisher=MemoryPublisher())
    try:
        incoming = list(messages(lines))
        out: list[bytes] = []
        started = time.perf_counter()
        outcomes = await replay(handler, incoming, out)
        elapsed = time.perf_counter() - started
    finally:
        await handler.aclose()
        await service.aclose()
    sys.stdout.buffer.write(b"\n".join(out) + (b"\n" if out else b""))
    sys.stdout.flush()
    store = "redis" if settings.redis_url else "in-process"
    rate = len(incoming) / elapsed if elapsed > 0 else 0.0
    summary = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    verdicts = sum(outcomes.values())
    events = f" ({verdicts} verdicts: envelopes unpacked)" if verdicts != len(incoming) else ""
    print(
        f"replay: {len(incoming)} messages{events} in {elapsed:.2f} s ({rate:,.0f}/s), store {store}: {summary}",
        file=sys.stderr,
    )
    return 1 if outcomes["failed"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m shared.adapters.queue.replay FILE.jsonl", file=sys.stderr)
        return 2
    import logging

    settings = Settings.from_env()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(run(Path(args[0]), settings))


if __name__ == "__main__":
    raise SystemExit(main())
