"""Azure Functions (Python v2 model): triggers and bindings only; the work is in `shared`.

    health     GET  /api/health/{probe}   anonymous (Container Apps probes)
    api        *    /api/{*route}         function key: score, batch, models, stats
    payments   Service Bus queue `payments` -> `risk-completed` | `risk-rejected`
    model_blob Blob `%MODELS_CONTAINER%/{name}/{version}/model.onnx` (Event Grid source)
"""

import azure.functions as func

from shared.triggers import handlers

app = func.FunctionApp()

QUEUE_CONNECTION = "ServiceBusConnection"
MODEL_STORAGE = "ModelStorage"


@app.function_name("health")
@app.route(route="health/{probe}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
async def health(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("api")
@app.route(route="{*route}", methods=["GET", "POST"], auth_level=func.AuthLevel.FUNCTION)
async def api(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    return await handlers.http(req, context)


@app.function_name("payments")
@app.service_bus_queue_trigger(arg_name="msg", queue_name="payments", connection=QUEUE_CONNECTION)
@app.service_bus_queue_output(arg_name="completed", queue_name="risk-completed", connection=QUEUE_CONNECTION)
@app.service_bus_queue_output(arg_name="rejected", queue_name="risk-rejected", connection=QUEUE_CONNECTION)
async def payments(msg: func.ServiceBusMessage, completed: func.Out[str], rejected: func.Out[str]) -> None:
    await handlers.payment(msg, completed, rejected)


@app.function_name("model_blob")
@app.blob_trigger(
    arg_name="blob",
    path="%MODELS_CONTAINER%/{name}/{version}/model.onnx",
    connection=MODEL_STORAGE,
    source=func.BlobSource.EVENT_GRID,
)
async def model_blob(blob: func.InputStream) -> None:
    await handlers.model_blob(blob)
