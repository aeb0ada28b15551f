"""The floor of the production hop: the app's scoring functions with empty bodies.

`python -m bench.worker` runs this beside `function_app.py`, through the same worker runtime, in
the same round, and reports each of the app's figures as a ratio to this one: what the worker
costs (the gRPC stream, protobuf, the binding conversion, the dispatch onto the loop) against
what the app adds. Same triggers, routes, auth levels, bindings and annotations as the app;
`score` and `score_batch` answer a constant, `payments` reads each message's body. The worker's
own loggers are left at WARNING, as the app leaves them (shared/adapters/functions.py
`quiet_worker_logs`): their INFO lines are a cost the app does not pay, so the floor does not either.
"""

import logging
from typing import List  # noqa: UP035 the worker's loader refuses PEP 585 generics on bindings

import azure.functions as func

from shared.runtime.doctor import WORKER_LOGGERS  # stdlib only: the floor stays empty

app = func.FunctionApp()

for name in WORKER_LOGGERS:
    logging.getLogger(name).setLevel(logging.WARNING)

ANSWER = b'{"event_id":"e","decision":"approve"}'


@app.function_name("health")
@app.route(route="api/health/{probe}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def health(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return func.HttpResponse(b'{"ready":true}', mimetype="application/json")


@app.function_name("score")
@app.route(route="api/score", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
async def score(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return func.HttpResponse(ANSWER, mimetype="application/json")


@app.function_name("score_batch")
@app.route(route="api/score/batch", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
async def score_batch(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return func.HttpResponse(ANSWER, mimetype="application/json")


@app.function_name("payments")
@app.service_bus_queue_trigger(
    arg_name="msgs",
    queue_name="payments",
    connection="ServiceBusConnection",
    cardinality=func.Cardinality.MANY,
    data_type=func.DataType.BINARY,
)
async def payments(msgs: List[func.ServiceBusMessage]) -> None:  # noqa: UP006
    for msg in msgs:
        msg.get_body()
