"""One event between its message and the core: parsed, held to its caps, scored, encoded.

An event travels as the JSON bytes of `POST /api/score`'s body and is answered with the JSON bytes
of its `Scored`, encoded by the one encoder every door uses (`shared.domain.answers.encode`).
Mapping the event and the answer onto proto fields would add a second decoder, a second
validation and a second encoder to keep equal to the first, and would cost more per event:
msgspec decodes and validates the JSON in one pass, where proto fields would still have to be
checked and built into a `PaymentEvent` in Python. So one body is refused with the same code on
every door.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import msgspec
from google.protobuf.message import DecodeError, Message

from shared.adapters.scoring_grpc import scoring_pb2 as pb
from shared.domain.answers import Scored
from shared.domain.events import PaymentEvent, decode_event
from shared.errors import BadRequest, PayloadTooLarge, ScoringError

if TYPE_CHECKING:
    from shared.core.service import ScoringService

__all__ = ["Limits", "decoded", "error_of", "event_id_of", "parsed", "score_event"]

M = TypeVar("M", bound=Message)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one call may send: an event's bytes (MAX_BODY_BYTES, `POST /api/score`'s cap), events per
    stream message (MAX_BATCH_ITEMS, a batch's), events a stream holds at once
    (GRPC_STREAM_MAX_IN_FLIGHT), and how long a stream may go without reading or writing
    (GRPC_STREAM_IDLE_MS)."""

    event_bytes: int
    events_per_message: int
    in_flight: int
    idle_s: float


def parsed(kind: type[M], raw: bytes) -> M:
    """`raw` as a message of `kind`, or `BadRequest` (the bytes are no such message)."""
    try:
        message: M = kind.FromString(raw)
    except DecodeError:
        raise BadRequest(f"the message is not a {kind.DESCRIPTOR.full_name}") from None
    return message


def decoded(request: pb.ScoreRequest, limits: Limits) -> PaymentEvent | ScoringError:
    """One event of a stream message, held to its cap and decoded by the one decoder every door uses;
    or the error its body gets from `POST /api/score`, in its slot."""
    event = request.event
    if len(event) > limits.event_bytes:
        return PayloadTooLarge(f"event of {len(event)} bytes exceeds the {limits.event_bytes}-byte limit")
    try:
        return decode_event(event)
    except ScoringError as exc:
        return exc


async def score_event(core: ScoringService, request: pb.ScoreRequest, limits: Limits, started: float) -> Scored:
    """One event scored by the core's single-event entry: what `POST /api/score` (or
    `/api/models/{model}/score` when `model` is set) answers for the same body, before it is
    encoded (`encode`); `started`: when its message arrived."""
    event = request.event
    if len(event) > limits.event_bytes:
        raise PayloadTooLarge(f"event of {len(event)} bytes exceeds the {limits.event_bytes}-byte limit")
    return await core.score_json(event, request.model or None, started=started, explain=request.explain, via="grpc")


def error_of(exc: ScoringError) -> pb.Error:
    """The error as a stream answers it: HTTP's code and status, the gRPC status `Score` answers."""
    return pb.Error(code=exc.code, detail=exc.detail, status=exc.status, grpc_status=exc.grpc_status)


class _Named(msgspec.Struct):
    event_id: str = ""


_named = msgspec.json.Decoder(_Named)


def event_id_of(body: bytes, limits: Limits) -> str:
    """The `event_id` a refused body names, for its answer ("" when it names none, or when the body
    is over its cap: never read). The error path only. msgspec refuses a lone surrogate, so what it
    decodes a proto string can carry."""
    if len(body) > limits.event_bytes:
        return ""
    try:
        return _named.decode(body).event_id
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # NOTE: what msgspec raises on any bytes
        return ""
