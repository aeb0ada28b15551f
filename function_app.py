"""Azure Functions (Python v2 model): triggers and bindings only; the work is in `shared`.

    function     route (prefix /api)        methods  auth        what
    health       health/{probe}             GET      anonymous   live / ready (Container Apps probes)
    model_activate  models/{name}/activate  POST, DELETE  function  pin a version everywhere / release it
    model_score  models/{name}/score        POST     function    one event, a named model
    models       models                     GET      function    loaded models and versions
    score        score                      POST     function    one event, the default model
    score_batch  score/batch                POST     function    up to MAX_BATCH_ITEMS events
    reviews      reviews/{event_id}         GET      function    an event's review by Azure OpenAI
    stats        stats                      GET      function    cache and batch counters
    metrics      metrics                    GET      function    every metric, Prometheus text format
    payments     Service Bus `payments` (batches) -> `risk-completed` | `risk-rejected` (SDK publisher)
    model_blob   Blob `%MODELS_CONTAINER%/{name}/{version}/model.onnx` (Event Grid source)

NOTE: one explicit route per HTTP function, no catch-all. The host puts routes into one
first-match table in the order of function names, with no precedence: a keyed catch-all
named before `health` answered the probes with 401. Explicit routes cannot overlap, so
the order cannot matter; tests/test_function_app.py models the host's table to keep it so.
Every HTTP function forwards to the same ASGI app that `make run` serves.
"""

import azure.functions as func

from shared.triggers import handlers

app = func.FunctionApp()

QUEUE_CONNECTION = "ServiceBusConnection"
MODEL_STORAGE = "ModelStorage"
KEYED = func.AuthLevel.FUNCTION

handlers.warm_up_soon()  # under the worker: load models now, not at the first probe


@app.function_name("health")
@app.route(route="health/{probe}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def health(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("score")
@app.route(route="score", methods=["POST"], auth_level=KEYED)
async def score(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("score_batch")
@app.route(route="score/batch", methods=["POST"], auth_level=KEYED)
async def score_batch(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_score")
@app.route(route="models/{name}/score", methods=["POST"], auth_level=KEYED)
async def model_score(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("model_activate")
@app.route(route="models/{name}/activate", methods=["POST", "DELETE"], auth_level=KEYED)
async def model_activate(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("models")
@app.route(route="models", methods=["GET"], auth_level=KEYED)
async def models(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("reviews")
@app.route(route="reviews/{event_id}", methods=["GET"], auth_level=KEYED)
async def reviews(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("stats")
@app.route(route="stats", methods=["GET"], auth_level=KEYED)
async def stats(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("metrics")
@app.route(route="metrics", methods=["GET"], auth_level=KEYED)
async def metrics(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


# NOTE: no output bindings: the Python binding sets the body only (no MessageId for duplicate
# detection), and sends nothing when the function raises, which a batch with a transient
# failure must do. Results and rejections go through the SDK publisher (shared/queue/publisher.py).
@app.function_name("payments")
@app.service_bus_queue_trigger(
    arg_name="msgs", queue_name="payments", connection=QUEUE_CONNECTION, cardinality=func.Cardinality.MANY
)
async def payments(msgs: list[func.ServiceBusMessage]) -> None:
    await handlers.payments(msgs)


@app.function_name("model_blob")
@app.blob_trigger(
    arg_name="blob",
    path="%MODELS_CONTAINER%/{name}/{version}/model.onnx",
    connection=MODEL_STORAGE,
    source=func.BlobSource.EVENT_GRID,
)
async def model_blob(blob: func.InputStream) -> None:
    await handlers.model_blob(blob)
