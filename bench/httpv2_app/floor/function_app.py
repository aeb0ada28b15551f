"""The floor of HTTP streams (HttpV2): `score` with an empty body, through the same runtime and server.

`python -m bench.httpv2` runs it beside bench/httpv2_app in the same round, as bench/worker_floor
beside function_app.py: the same routes, auth levels and annotations (the extension's Request and
Response), a constant answer. What it costs is what the worker and the extension's server cost
per invocation; the app's figure over it is what the app adds.
"""

import logging

import azure.functions as func
from azurefunctions.extensions.http.fastapi import Request, Response

from shared.runtime.doctor import WORKER_LOGGERS  # stdlib only: the floor stays empty

app = func.FunctionApp()

for name in WORKER_LOGGERS:
    logging.getLogger(name).setLevel(logging.WARNING)

ANSWER = b'{"event_id":"e","decision":"approve"}'
_quiet = [False]


def quiet_server_logs() -> None:
    """As bench/httpv2_app: uvicorn's access log off once its server has configured it."""
    if not _quiet[0]:
        logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
        _quiet[0] = True


@app.function_name("health")
@app.route(route="api/health/{probe}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def health(req: Request) -> Response:
    quiet_server_logs()
    return Response(b'{"ready":true}', media_type="application/json")


@app.function_name("score")
@app.route(route="api/score", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
async def score(req: Request) -> Response:
    quiet_server_logs()
    return Response(ANSWER, media_type="application/json")
