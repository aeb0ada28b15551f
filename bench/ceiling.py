"""Bare endpoints: what the server stack can do with no scoring work at all (the ceiling).

starlette_app  the same stack as the service (uvicorn + Starlette), reads the body, answers JSON
raw_app        a plain ASGI callable under uvicorn: the ceiling `make bench` divides by
"""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

ANSWER = b'{"risk_score":0.5,"decision":"approve"}'


async def _score(request: Request) -> Response:
    await request.body()
    return Response(ANSWER, media_type="application/json")


starlette_app = Starlette(routes=[Route("/api/score", _score, methods=["POST"]), Route("/api/health/ready", _score)])

_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(ANSWER)).encode())]


async def raw_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})
