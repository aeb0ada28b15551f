"""The app's `score` through HTTP streams (HttpV2), for `python -m bench.httpv2` and tests/worker/test_httpv2.py.

With `azurefunctions-extensions-http-fastapi` imported (requirements-worker-httpv2.txt), the worker
runtime starts a web server (uvicorn) on its own loop and advertises it to the host (`HttpUri`);
the host forwards each HTTP request there, tagged with its invocation id, and still sends the
InvocationRequest over gRPC (tests/worker/host.py, `Host.forward`). Every HTTP function of the
process then takes the server's request (a Starlette Request) and returns a Starlette Response.

`score` hands that request to the same ASGI app, the same instance, that the classic
`function_app.py` frames for `POST /api/score` (shared/adapters/functions.py `call_asgi`): the
request is already ASGI, so its own scope and body stream go in, and the answer is collected
into one Response. Same route, methods and auth level as the classic function; `health` answers
the probes the same way (readiness), so both apps are ready at the same moment.
"""

import logging
from typing import Any

import azure.functions as func
from azurefunctions.extensions.http.fastapi import Request, Response

from shared.adapters.functions import handlers

app = func.FunctionApp()

KEYED = func.AuthLevel.FUNCTION  # as function_app.py: the host checks the key before it invokes

handlers.warm_up_soon()  # under the worker: load models now, not at the first probe

# NOTE: uvicorn configures its loggers when its server starts, after this module is imported; its
# access log is a stdout line per request (which the host would log). Quieted at the first request,
# as the app quiets the worker's own per-invocation INFO lines.
_quiet = [False]


def quiet_server_logs() -> None:
    if not _quiet[0]:
        logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
        _quiet[0] = True


async def forward(request: Any) -> Any:
    """One request through the app's ASGI app (`handlers`' own), its answer as one Response."""
    quiet_server_logs()
    status, headers, chunks = 500, [], []

    async def send(message: Any) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], message.get("headers", [])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    # NOTE: the server's scope as it is; the app's router overwrites FastAPI's routing keys
    await handlers._app({**request.scope, "root_path": ""}, request.receive, send)
    response = Response(b"".join(chunks), status_code=status)
    response.raw_headers = headers  # the app's own: content-type and content-length included
    return response


@app.function_name("health")
@app.route(route="api/health/{probe}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def health(req: Request) -> Response:
    return await forward(req)


@app.function_name("score")
@app.route(route="api/score", methods=["POST"], auth_level=KEYED)
async def score(req: Request) -> Response:
    return await forward(req)
