"""Reading a request body within the app's limits: media type, size, and time to arrive whole."""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.types import Receive, Scope

from shared.errors import BadRequest, BodyTimeout, PayloadTooLarge, UnsupportedMediaType
from shared.runtime.deadlines import Deadlines

__all__ = ["read_body", "read_json_body"]


async def read_json_body(
    request: Request, cap: int, timeout_s: float, deadlines: Deadlines, *, any_media_type: bool = False
) -> bytes:
    """The body of a JSON request, refusing other media types (unless `any_media_type`), bodies
    over `cap` bytes, and bodies not arrived whole within `timeout_s` (a stalled client must not
    hold a connection)."""
    return await read_body(request.scope, request.receive, cap, timeout_s, deadlines, any_media_type=any_media_type)


async def read_body(
    scope: Scope, receive: Receive, cap: int, timeout_s: float, deadlines: Deadlines, *, any_media_type: bool = False
) -> bytes:
    """`read_json_body` straight from ASGI (`FastPath` has no `Request`)."""
    media_type, declared = "", ""
    for name, value in scope["headers"]:  # ASGI header names are lower-case bytes
        if name == b"content-type":
            media_type = value.decode("latin-1").partition(";")[0].strip().lower()
        elif name == b"content-length":
            declared = value.decode("latin-1")
    if not any_media_type and media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(f"expected content-type application/json, got {media_type or 'none'}")
    if declared.isascii() and declared.isdigit() and int(declared) > cap:  # NOTE: "²".isdigit(), int("²") fails
        raise PayloadTooLarge(f"body of {declared} bytes exceeds the {cap}-byte limit")
    task = deadlines.arm(timeout_s)
    chunks: list[bytes] = []
    size = 0
    try:
        while True:  # NOTE: straight from receive(): the per-request path, no async generator
            message = await receive()
            if message["type"] == "http.disconnect":
                # the client left mid-body (or a server ended a body it could not parse): never
                # a body to score; to a client that did leave, no one answers.
                raise BadRequest("the request body was cut off or is malformed")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cap:
                raise PayloadTooLarge(f"body exceeds the {cap}-byte limit")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    except asyncio.CancelledError:
        if deadlines.expired(task):
            raise BodyTimeout(f"the body did not arrive whole within {timeout_s * 1000:.0f} ms") from None
        raise
    finally:
        deadlines.disarm(task)
