"""Load tools for a real Service Bus namespace: send payments at a rate, drain results.

    python -m bench.servicebus send  --events 20000 --rate 2000 [--queue payments] [--per-message 16]
    python -m bench.servicebus drain [--queue risk-completed] [--idle-s 15]

The namespace: SERVICEBUS_CONNECTION_STRING (a connection string), else --namespace
`<name>.servicebus.windows.net` with DefaultAzureCredential (az login, or a managed identity).
`send` paces batch sends to `--rate` events/s with a progress bar and prints a summary;
each event's `event_id` is its MessageId. `--per-message N` packs N events per message as an
envelope `{"events": [...]}` (docs/queue.md: the function's binding converts each message once,
whatever it carries), MessageId `<first event_id>..<last event_id>`, each message kept under
Service Bus Standard's 256 KiB. `drain` receives risk-completed until the queue is
idle and reports end-to-end latency (the payment's enqueued time → the result's enqueued
time) as percentiles, and duplicates seen (same MessageId twice: duplicate detection failed).
Watch KEDA scale out while `send` runs: `az containerapp replica list -n <app> -g <rg>`.

Each event is dated as it is sent (inside the app's EVENT_MAX_AGE_S). Both count verdicts and
withhold their figures when the work was not done (bench/verdicts.py): `send` when under 99.9 %
of the events were accepted by the namespace; `drain --expect N` (the events sent) when under
99.9 % of them came back as a result with a decision: the rest were rejected (read risk-rejected)
or never handled, and a latency over them would not be the scoring path's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from bench.loadgen import event_body
from bench.verdicts import Verdicts

CHUNK = 100  # events per batch send
# Service Bus Standard's message cap (and MAX_MESSAGE_BYTES's default), less room for the
# message's headers and the AMQP framing: an envelope's body stays under it.
MESSAGE_BYTES = 256 * 1024 - 2048


def events(n: int, run: str) -> Iterator[tuple[str, bytes]]:
    """(event_id, body) of `n` synthetic payments, ids unique to this run."""
    for i in range(n):
        body = orjson.loads(event_body(i))  # NOTE: dated now, as it is built just before its send
        body["event_id"] = f"{run}-{i}"
        yield body["event_id"], orjson.dumps(body)


def pack(
    todo: Sequence[tuple[str, bytes]], per_message: int, max_bytes: int = MESSAGE_BYTES
) -> list[tuple[str, bytes, int]]:
    """(message_id, body, events) of the messages carrying `todo`: each event alone when
    `per_message` is 1; else envelopes of up to `per_message` events, closed early rather
    than reach `max_bytes`."""
    if per_message == 1:
        return [(event_id, body, 1) for event_id, body in todo]
    packed: list[tuple[str, bytes, int]] = []
    ids: list[str] = []
    bodies: list[bytes] = []
    size = len(b'{"events":[]}')
    for event_id, body in todo:
        if bodies and (len(bodies) == per_message or size + 1 + len(body) > max_bytes):
            packed.append(envelope(ids, bodies))
            ids, bodies, size = [], [], len(b'{"events":[]}')
        ids.append(event_id)
        bodies.append(body)
        size += len(body) + (1 if len(bodies) > 1 else 0)
    if bodies:
        packed.append(envelope(ids, bodies))
    return packed


def envelope(ids: list[str], bodies: list[bytes]) -> tuple[str, bytes, int]:
    return f"{ids[0]}..{ids[-1]}", b'{"events":[' + b",".join(bodies) + b"]}", len(bodies)


def schedule(n: int, rate: float, chunk: int = CHUNK) -> Iterator[tuple[float, int, int]]:
    """(due offset in s, start, stop) of each batch send that keeps `rate` events/s."""
    for start in range(0, n, chunk):
        yield start / rate, start, min(start + chunk, n)


def bar(done: int, total: int, started: float, width: int = 30) -> str:
    share = done / total if total else 1.0
    rate = done / max(time.perf_counter() - started, 1e-9)
    return f"\r[{'#' * int(share * width):<{width}}] {done}/{total} {rate:,.0f}/s"


@dataclass
class Drained:
    """What came out of risk-completed."""

    latencies_ms: list[float] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    duplicates: int = 0
    unreadable: int = 0
    verdicts: Verdicts = field(default_factory=lambda: Verdicts("drain"))

    def add(self, message_id: str, body: bytes, enqueued: datetime | None) -> None:
        if message_id in self.seen:
            self.duplicates += 1
            return
        self.seen.add(message_id)
        try:
            result = orjson.loads(body)
            sent = datetime.fromisoformat(str(result["enqueued_time"]).replace("Z", "+00:00"))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            self.unreadable += 1
            self.verdicts.add("unreadable")
            return
        self.verdicts.add("completed" if "decision" in result else "no_decision")
        if enqueued is not None:
            self.latencies_ms.append((enqueued - sent).total_seconds() * 1000)

    def summary(self, expect: int | None = None) -> dict[str, object]:
        """The latency percentiles, refused (`WorkNotDone`) when `expect` events were sent and
        under 99.9 % of them came back scored."""
        if expect is not None:
            self.verdicts.add("no_result", max(0, expect - self.verdicts.total))
            self.verdicts.require("completed")
        ordered = sorted(self.latencies_ms)
        return {
            "verdicts": self.verdicts.as_dict(),
            "results": len(self.seen),
            "duplicates": self.duplicates,
            "unreadable": self.unreadable,
            "latency_ms": {f"p{q}": percentile(ordered, q) for q in (50, 90, 99, 99.9)},
        }


def percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))], 1)


def client(namespace: str | None) -> Any:
    from azure.servicebus.aio import ServiceBusClient

    conn = os.environ.get("SERVICEBUS_CONNECTION_STRING")
    if conn:
        return ServiceBusClient.from_connection_string(conn)
    if not namespace:
        sys.exit("set SERVICEBUS_CONNECTION_STRING or pass --namespace <name>.servicebus.windows.net")
    from azure.identity.aio import DefaultAzureCredential

    return ServiceBusClient(namespace, DefaultAzureCredential())


def sdk_messages(batch: Iterable[tuple[str, bytes]]) -> list[Any]:
    """An SDK message per (message_id, body), typed JSON."""
    from azure.servicebus import ServiceBusMessage

    return [ServiceBusMessage(body, message_id=event_id, content_type="application/json") for event_id, body in batch]


async def send(args: argparse.Namespace) -> dict[str, object]:
    from azure.core.exceptions import AzureError
    from azure.servicebus.exceptions import ServiceBusError

    todo = list(events(args.events, args.run or uuid.uuid4().hex[:8]))
    packed = pack(todo, args.per_message)
    chunk = max(1, CHUNK // args.per_message)  # about CHUNK events per send, whatever the packing
    errors = done = 0
    async with client(args.namespace) as sb, sb.get_queue_sender(args.queue) as sender:
        started = time.perf_counter()
        for due, start, stop in schedule(len(packed), args.rate / args.per_message, chunk):
            delay = started + due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            group = packed[start:stop]
            carried = sum(count for _, _, count in group)
            try:
                await sender.send_messages(sdk_messages((message_id, body) for message_id, body, _ in group))
            except (ServiceBusError, AzureError, OSError) as exc:  # NOTE: a load tool counts failures, goes on
                errors += carried
                print(f"\nsend failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            done += carried
            print(bar(done, len(todo), started), end="", file=sys.stderr, flush=True)
        elapsed = time.perf_counter() - started
    print(file=sys.stderr)
    verdicts = Verdicts("send")
    verdicts.add("sent", len(todo) - errors)
    verdicts.add("failed", errors)
    verdicts.require("sent")
    return {
        "sent": len(todo) - errors,
        "failed": errors,
        "messages": len(packed),
        "seconds": round(elapsed, 2),
        "rate": round(len(todo) / elapsed),
    }


async def drain(args: argparse.Namespace) -> dict[str, object]:
    drained = Drained()
    started = time.perf_counter()
    async with client(args.namespace) as sb, sb.get_queue_receiver(args.queue, prefetch_count=500) as receiver:
        while True:
            got = await receiver.receive_messages(max_message_count=500, max_wait_time=args.idle_s)
            if not got:
                break
            for msg in got:
                drained.add(str(msg.message_id), b"".join(msg.body), msg.enqueued_time_utc)
                await receiver.complete_message(msg)
            print(f"\rdrained {len(drained.seen)} (+{drained.duplicates} duplicates)", end="", file=sys.stderr)
    print(file=sys.stderr)
    return {**drained.summary(args.expect), "seconds": round(time.perf_counter() - started - args.idle_s, 2)}


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--namespace", default=None, help="<name>.servicebus.windows.net (DefaultAzureCredential)")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("send", help="send synthetic payments at a rate")
    s.add_argument("--events", type=int, default=10_000)
    s.add_argument("--rate", type=float, default=1000.0, help="events per second")
    s.add_argument("--queue", default="payments")
    s.add_argument("--run", default=None, help="event id prefix (default: random)")
    s.add_argument(
        "--per-message", type=positive, default=1, help='events per message: above 1, an envelope {"events": [...]}'
    )
    d = sub.add_parser("drain", help="receive results, report latency percentiles and duplicates")
    d.add_argument("--queue", default="risk-completed")
    d.add_argument("--idle-s", type=float, default=15.0, help="stop after this long with nothing received")
    d.add_argument("--expect", type=positive, default=None, help="events sent: refuse to report under 99.9%% scored")
    args = parser.parse_args(argv)
    result = asyncio.run(send(args) if args.command == "send" else drain(args))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
