"""Azure Functions (Python v2 model): triggers and bindings only; the work is in `shared`.

    HTTP         one function per route of the route table, shared/adapters/http/routes.py (its name,
                 path, methods and auth level; tests/adapters/test_function_app.py holds the two equal)
    payments     Service Bus `payments` (batches) -> `risk-completed` | `risk-rejected` (SDK publisher)
    risk_outcomes  Service Bus `risk-outcomes` (batches): outcomes learned later -> the prediction log's store
    outcomes_report  timer (%OUTCOMES_REPORT_SCHEDULE%, daily): decisions joined to outcomes -> the log's
                 store and the `scoring.outcomes.*` gauges (shared/stores/prediction_log/daily.py)
    model_blob   Blob `%MODELS_CONTAINER%/{name}/{version}/model.onnx` (Event Grid source)

Auth levels are the route table's (`auth`): "function" accepts any host or function key (what
scoring clients get), "admin" only the master key (the control routes; which key goes to whom:
docs/deploy.md).

host.json's routePrefix is "" so that the V2 routes sit at the root paths standard
clients call (`/v2/...`); every other route names its `api/` itself.

NOTE: one explicit route per HTTP function, no catch-all. The host puts routes into one
first-match table in the order of function names, with no precedence: a keyed catch-all
named before `health` answered the probes with 401. Explicit routes cannot overlap, so
the order cannot matter; tests/adapters/test_function_app.py models the host's table to keep it so.
Every HTTP function forwards to the same ASGI app that `make run` serves.
"""

from typing import List  # noqa: UP035 the worker's loader refuses PEP 585 generics (list[...]) on bindings

import azure.functions as func

from shared.adapters.functions import handlers

app = func.FunctionApp()

QUEUE_CONNECTION = "ServiceBusConnection"
MODEL_STORAGE = "ModelStorage"
KEYED = func.AuthLevel.FUNCTION  # any host or function key: what scoring clients get
CONTROL = func.AuthLevel.ADMIN  # the master key only: who may change what the fleet serves

handlers.warm_up_soon()  # under the worker: load models now, not at the first probe


@app.function_name("health")
@app.route(route="api/health/{probe}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def health(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("score")
@app.route(route="api/score", methods=["POST"], auth_level=KEYED)
async def score(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("score_batch")
@app.route(route="api/score/batch", methods=["POST"], auth_level=KEYED)
async def score_batch(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_score")
@app.route(route="api/models/{name}/score", methods=["POST"], auth_level=KEYED)
async def model_score(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_activate")
@app.route(route="api/models/{name}/activate", methods=["POST", "DELETE"], auth_level=CONTROL)
async def model_activate(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_rollout")
@app.route(route="api/models/{name}/rollout", methods=["GET"], auth_level=CONTROL)
async def model_rollout(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_shadow")
@app.route(route="api/models/{name}/shadow", methods=["PUT", "DELETE"], auth_level=CONTROL)
async def model_shadow(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_canary")
@app.route(route="api/models/{name}/canary", methods=["PUT", "DELETE"], auth_level=CONTROL)
async def model_canary(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_promote")
@app.route(route="api/models/{name}/canary/promote", methods=["POST"], auth_level=CONTROL)
async def model_promote(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("models")
@app.route(route="api/models", methods=["GET"], auth_level=KEYED)
async def models(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("openapi")
@app.route(route="api/openapi.json", methods=["GET"], auth_level=KEYED)
async def openapi(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("reviews")
@app.route(route="api/reviews/{event_id}", methods=["GET"], auth_level=CONTROL)
async def reviews(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("outcomes")
@app.route(route="api/outcomes", methods=["POST"], auth_level=CONTROL)
async def outcomes(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("stats")
@app.route(route="api/stats", methods=["GET"], auth_level=KEYED)
async def stats(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("metrics")
@app.route(route="api/metrics", methods=["GET"], auth_level=KEYED)
async def metrics(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


# -- the Open Inference Protocol (V2), served by the same ASGI app (shared/adapters/oip/rest.py) --------------
# keyed like every non-probe route, health included: the platform's probes use
# /api/health/*, and V2 clients (tritonclient's `headers=`) send the key as they do for infer.


@app.function_name("v2_server")
@app.route(route="v2", methods=["GET"], auth_level=KEYED)
async def v2_server(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("v2_health")
@app.route(route="v2/health/{probe}", methods=["GET"], auth_level=KEYED)
async def v2_health(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("v2_model")
@app.route(route="v2/models/{name}", methods=["GET"], auth_level=KEYED)
async def v2_model(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("v2_model_ready")
@app.route(route="v2/models/{name}/ready", methods=["GET"], auth_level=KEYED)
async def v2_model_ready(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("v2_model_infer")
@app.route(route="v2/models/{name}/infer", methods=["POST"], auth_level=KEYED)
async def v2_model_infer(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("v2_version")
@app.route(route="v2/models/{name}/versions/{version}", methods=["GET"], auth_level=KEYED)
async def v2_version(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("v2_version_ready")
@app.route(route="v2/models/{name}/versions/{version}/ready", methods=["GET"], auth_level=KEYED)
async def v2_version_ready(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("v2_version_infer")
@app.route(route="v2/models/{name}/versions/{version}/infer", methods=["POST"], auth_level=KEYED)
async def v2_version_infer(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


# NOTE: `typing.List`, not `list[...]`: both Python workers refuse a PEP 585 annotation on a binding
# ("invalid non-type annotation") and then index no function at all (azure-functions-python-worker#1034).
# NOTE: dataType binary: the host then sends each body as the bytes that were queued; without it the
# host decodes bodies as UTF-8 text, replacing what does not decode (azure-functions-host#3125), so a
# malformed body would arrive altered and its rejection record would not hold what was sent.
# NOTE: no output bindings: the Python binding sets the body only (no MessageId for duplicate
# detection), and sends nothing when the function raises, which a batch with a transient
# failure must do. Results and rejections go through the SDK publisher (shared/adapters/queue/publisher.py).
@app.function_name("payments")
@app.service_bus_queue_trigger(
    arg_name="msgs",
    queue_name="payments",
    connection=QUEUE_CONNECTION,
    cardinality=func.Cardinality.MANY,
    data_type=func.DataType.BINARY,
)
async def payments(msgs: List[func.ServiceBusMessage]) -> None:  # noqa: UP006 (see the NOTE above)
    await handlers.payments(msgs)


# NOTE: the same binding as `payments` (List, binary bodies, no output binding): each message one outcome
@app.function_name("risk_outcomes")
@app.service_bus_queue_trigger(
    arg_name="msgs",
    queue_name="risk-outcomes",
    connection=QUEUE_CONNECTION,
    cardinality=func.Cardinality.MANY,
    data_type=func.DataType.BINARY,
)
async def risk_outcomes(msgs: List[func.ServiceBusMessage]) -> None:  # noqa: UP006 (see the NOTE on payments)
    await handlers.outcomes(msgs)


# NOTE: the schedule is an app setting (infra/modules/app.bicep); the host runs a timer on one replica of
# the app (a storage lock) and does not retry a failed run: the next day's run covers it (docs/outcomes.md)
@app.function_name("outcomes_report")
@app.timer_trigger(arg_name="timer", schedule="%OUTCOMES_REPORT_SCHEDULE%", run_on_startup=False, use_monitor=True)
async def outcomes_report(timer: func.TimerRequest) -> None:
    from shared.stores.prediction_log.daily import run  # NOTE: DuckDB loads at the daily run, never at indexing

    await run(handlers.holder.settings)


@app.function_name("model_blob")
@app.blob_trigger(
    arg_name="blob",
    path="%MODELS_CONTAINER%/{name}/{version}/model.onnx",
    connection=MODEL_STORAGE,
    source=func.BlobSource.EVENT_GRID,
)
async def model_blob(blob: func.InputStream) -> None:
    await handlers.model_blob(blob)
