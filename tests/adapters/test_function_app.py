"""The Functions app: its declared metadata, and its handlers called with real binding types."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import azure.functions as func
import pytest
from azure.functions.blob import InputStream
from azure.functions.servicebus import ServiceBusMessage

import function_app
from shared.adapters.functions import FunctionHandlers
from shared.adapters.http.routes import ROUTES, RouteSpec, framed
from shared.adapters.http.routes import route as route_named
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from tests import host_routes
from tests.conftest import event
from tests.onnx_models import make_model

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# NOTE: like the worker, index the app once (a second get_functions() re-registers and fails).
FUNCTIONS = {f.get_function_name(): f for f in function_app.app.get_functions()}


def bindings(name: str) -> dict[str, dict[str, Any]]:
    return {b.get_dict_repr()["name"]: _plain(b.get_dict_repr()) for b in FUNCTIONS[name].get_bindings()}


def _plain(binding: dict[str, Any]) -> dict[str, str]:
    return {k: str(getattr(v, "value", v)) for k, v in binding.items()}


KEYS = {"function key": "function", "admin key": "admin", "anonymous": "anonymous"}
FILL = {"{name}": "fraud", "{version}": "1", "{probe}": "live", "{event_id}": "evt-1"}


def documented_routes(page: Path) -> list[tuple[str, str, str]]:
    """(method, path, auth) of every route a page's API table documents, its `{parameters}` filled in."""
    rows = re.findall(
        r"^\| `(GET|POST|PUT|DELETE) (/(?:api|v2)[^`]*)` \|.*\| (function key|admin key|anonymous) \|$",
        page.read_text(),
        re.M,
    )
    assert len(rows) >= 15, f"{page.name}'s HTTP API tables were not found"
    return [(m, re.sub(r"\{\w+\}", lambda g: FILL[g[0]], p), KEYS[a]) for m, p, a in rows]


def readme_routes() -> list[tuple[str, str, str]]:
    return documented_routes(README)


def readme_level(documented: str, declared: str) -> bool:
    """Whether the README's key matches the declared level.

    NOTE: the README is being rewritten in another change; until its control rows say "admin key",
    its "function key" there reads "a key". docs/deploy.md's table, which names the key each
    client gets, is held to the exact level (test_deploy_doc_names_the_key_of_every_route).
    """
    return documented == declared or (documented, declared) == ("function", "admin")


def host_table() -> list[host_routes.HostRoute]:
    prefix = json.loads((REPO / "host.json").read_text())["extensions"]["http"]["routePrefix"]
    return host_routes.route_table(FUNCTIONS.values(), prefix)


@pytest.mark.parametrize(("method", "path", "auth"), readme_routes())
def test_every_documented_route_is_answered_by_its_own_function_with_its_auth(
    method: str, path: str, auth: str
) -> None:
    table = host_table()
    route = host_routes.answer(table, method, path)
    assert route is not None, f"the host answers {method} {path} with 404"
    assert readme_level(auth, route.auth_level), f"{method} {path} is answered by {route.function} ({route.auth_level})"
    matching = [r.function for r in table if r.pattern.match(path) and method in r.methods]
    assert matching == [route.function], f"{method} {path} matches {matching}: the answer depends on name order"


def test_routes_sit_under_api_or_v2_with_no_prefix() -> None:
    """routePrefix "" puts V2 at the root paths its clients call; nothing else may sit at the root."""
    assert json.loads((REPO / "host.json").read_text())["extensions"]["http"]["routePrefix"] == ""
    for route in host_table():
        assert route.template.split("/")[0] in ("api", "v2"), f"{route.function} routes {route.template}"
        if route.template.startswith("v2"):
            assert route.auth_level == "function", f"{route.function} must be keyed"


def test_probes_reach_the_anonymous_health_function() -> None:
    for probe in ("live", "ready"):
        route = host_routes.answer(host_table(), "GET", f"/api/health/{probe}")
        assert route is not None and (route.function, route.auth_level) == ("health", "anonymous")


def test_the_host_model_catches_a_keyed_catch_all_named_before_health() -> None:
    """Mutation: the first wave's layout (`api` {*route}, function key) must fail the checks above."""
    app = func.FunctionApp()

    @app.function_name("health")
    @app.route(route="health/{probe}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
    def health(req: func.HttpRequest) -> func.HttpResponse: ...  # pragma: no cover

    @app.function_name("api")
    @app.route(route="{*route}", methods=["GET", "POST"], auth_level=func.AuthLevel.FUNCTION)
    def api(req: func.HttpRequest) -> func.HttpResponse: ...  # pragma: no cover

    table = host_routes.route_table(app.get_functions(), "api")
    route = host_routes.answer(table, "GET", "/api/health/live")
    assert route is not None and (route.function, route.auth_level) == ("api", "function")  # the 401 the host gave


def test_route_templates_match_as_the_host_does() -> None:
    compile_ = host_routes._compile
    assert compile_("api/models/{name}/score").match("/API/Models/fraud/score")
    assert not compile_("api/models/{name}/score").match("/api/models//score")
    assert compile_("api/{*route}").match("/api") and compile_("api/{*route}").match("/api/a/b")
    assert compile_("api/items/{id:int}").match("/api/items/42") and not compile_("api/items/{id:int}").match(
        "/api/items/x"
    )
    with pytest.raises(NotImplementedError):
        compile_("api/{id:regex(^a$)}")


def test_function_names() -> None:
    assert sorted(FUNCTIONS) == [
        "health",
        "metrics",
        "model_activate",
        "model_blob",
        "model_canary",
        "model_promote",
        "model_rollout",
        "model_score",
        "model_shadow",
        "models",
        "openapi",
        "outcomes",
        "outcomes_report",
        "payments",
        "reviews",
        "risk_outcomes",
        "score",
        "score_batch",
        "stats",
        "v2_health",
        "v2_model",
        "v2_model_infer",
        "v2_model_ready",
        "v2_server",
        "v2_version",
        "v2_version_infer",
        "v2_version_ready",
    ]


def test_service_bus_function_bindings() -> None:
    b = bindings("payments")
    assert b == {
        "msgs": {
            "direction": "0",
            "type": "serviceBusTrigger",
            "name": "msgs",
            "connection": "ServiceBusConnection",
            "queueName": "payments",
            "cardinality": "many",
            "dataType": str(func.DataType.BINARY.value),  # the bodies as queued, not decoded by the host
        }
    }  # NOTE: no output bindings: results carry a MessageId only the SDK can set (shared/adapters/queue/publisher.py)


def test_host_json_hands_the_batch_function_model_sized_batches() -> None:
    """A batch is several model batches, and fits the model queue; nothing waits unrenewed in a prefetch
    buffer (the lock arithmetic is `make test-infra`'s check_lock_budget)."""
    sb = json.loads((REPO / "host.json").read_text())["extensions"]["serviceBus"]
    batch = Settings().batch
    assert sb["maxMessageBatchSize"] % batch.max_size == 0 and 4 * batch.max_size <= sb["maxMessageBatchSize"] <= 256
    assert sb["maxMessageBatchSize"] <= batch.max_queue, (
        "one invocation's messages would be shed past the batcher's max_queue"
    )
    assert sb["prefetchCount"] == 0
    assert sb["autoCompleteMessages"] is True  # completes or abandons the batch by whether the function raised


def test_blob_function_bindings() -> None:
    blob = bindings("model_blob")["blob"]
    assert (blob["type"], blob["path"], blob["connection"], blob["source"]) == (
        "blobTrigger",
        "%MODELS_CONTAINER%/{name}/{version}/model.onnx",
        "ModelStorage",
        "EventGrid",
    )


@pytest.fixture
async def handlers(settings: Settings):
    h = FunctionHandlers(ServiceHolder(lambda: settings), publisher=MemoryPublisher())
    yield h
    await h.aclose()


def published(handlers: FunctionHandlers, queue: str) -> list[dict[str, Any]]:
    assert isinstance(handlers.publisher, MemoryPublisher)
    return [json.loads(m.body) for m in handlers.publisher.sent if m.queue == queue]


def http_request(
    method: str, path: str, body: object | None = None, content_type: str = "application/json"
) -> func.HttpRequest:
    data = json.dumps(body).encode() if body is not None else b""
    return func.HttpRequest(
        method=method, url=f"http://localhost{path}", headers={"content-type": content_type}, body=data
    )


def sb_message(body: bytes, message_id: str = "m-1", **fields: Any) -> ServiceBusMessage:
    fields.setdefault("delivery_count", 1)
    fields.setdefault("application_properties", {})
    return ServiceBusMessage(body=body, message_id=message_id, user_properties={}, **fields)


async def test_http_handler_with_function_types(handlers: FunctionHandlers) -> None:
    r = await handlers.http(http_request("POST", "/api/score", event()))
    assert r.status_code == 200 and json.loads(r.get_body())["event_id"] == "evt-1"
    r = await handlers.http(http_request("POST", "/api/score", event(amount=-3)))
    assert r.status_code == 422 and json.loads(r.get_body())["error"] == "invalid_event"
    r = await handlers.http(http_request("GET", "/api/health/ready"))
    assert r.status_code == 200


async def test_service_bus_handler_publishes_the_result(handlers: FunctionHandlers) -> None:
    from datetime import UTC, datetime

    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    msg = sb_message(
        json.dumps(event(event_id="q-1")).encode(),
        "sb-1",
        delivery_count=2,
        correlation_id="corr-9",
        enqueued_time_utc=datetime(2026, 11, 29, 3, 12, tzinfo=UTC),
        application_properties={"traceparent": traceparent},
    )
    await handlers.payments([msg])
    [result] = published(handlers, "risk-completed")
    assert result["event_id"] == "q-1" and result["decision"] in ("approve", "review", "decline")
    assert (result["delivery_count"], result["enqueued_time"]) == (2, "2026-11-29T03:12:00Z")
    assert isinstance(handlers.publisher, MemoryPublisher)
    [sent] = handlers.publisher.sent
    assert (sent.message_id, sent.correlation_id) == ("q-1", "corr-9")
    assert sent.properties["traceparent"].split("-")[1] == traceparent.split("-")[1]  # the trace continues


async def test_the_first_batch_of_a_fresh_process_is_traced(settings: Settings) -> None:
    """A cold process: no telemetry installed yet, and the first batch's spans open before its service
    builds. The batch's result still continues the trace under the app's own span (a new span id),
    as every later batch's does."""
    from shared.telemetry import process

    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    installed = process.current()
    process.install(None)  # NOTE: as a fresh worker process starts
    handlers = FunctionHandlers(ServiceHolder(lambda: settings), publisher=MemoryPublisher())
    try:
        body = json.dumps(event(event_id="cold-1")).encode()
        await handlers.payments([sb_message(body, "cold-1", application_properties={"traceparent": caller})])
        assert isinstance(handlers.publisher, MemoryPublisher)
        [sent] = handlers.publisher.sent
        trace_id, span_id = sent.properties["traceparent"].split("-")[1:3]
        assert trace_id == caller.split("-")[1] and span_id != caller.split("-")[2], sent.properties
        assert sent.properties["Diagnostic-Id"] == sent.properties["traceparent"]
    finally:
        await handlers.aclose()
        process.install(installed)


@pytest.mark.parametrize("body", [b"{broken", json.dumps(event(amount=-1)).encode(), b"\xff\xfe binary"])
async def test_bad_message_is_rejected_with_reason_and_body(handlers: FunctionHandlers, body: bytes) -> None:
    await handlers.payments([sb_message(body, "m-bad"), sb_message(json.dumps(event(event_id="ok")).encode())])
    assert [r["event_id"] for r in published(handlers, "risk-completed")] == ["ok"]  # the batch completes
    [record] = published(handlers, "risk-rejected")
    assert record["error"] in ("malformed_json", "invalid_event") and record["message_id"] == "m-bad"
    from shared.adapters.queue.messages import redacted

    assert record.get("body", "").encode() == redacted(body) or "body_base64" in record  # the note and user out


async def test_a_batch_with_a_transient_failure_raises_after_publishing_the_rest(settings: Settings) -> None:
    """The host abandons the whole batch; the redelivery republishes the same bytes under the same ids."""
    from dataclasses import replace

    from shared.adapters.queue.idempotency import Kept, MemoryResultStore
    from shared.errors import BatchIncomplete

    class OneDown(MemoryResultStore):
        async def find(self, event_ids: Any) -> list[Kept | None]:
            if "flaky" in event_ids and self.down:
                raise ResultStoreDown("result store: redis TimeoutError")
            return await super().find(event_ids)

    from shared.errors import ResultStoreDown

    store, publisher = OneDown(), MemoryPublisher()
    short = replace(settings, queue_batch_budget_ms=6000)  # the outage outlasts the (shortest) budget
    h = FunctionHandlers(ServiceHolder(lambda: short), publisher=publisher, store=store)
    try:
        store.down = True
        batch = [sb_message(json.dumps(event(event_id="flaky")).encode(), "flaky"), sb_message(b"{", "m-bad")]
        with pytest.raises(BatchIncomplete, match=r"1 of 2 messages failed.*result_store_down"):
            await h.payments(batch)
        assert [m.queue for m in publisher.sent] == ["risk-rejected"]  # the poison one left at once
        store.down = False
        await h.payments(batch)  # the redelivery
        assert [m.message_id for m in publisher.delivered("risk-completed")] == ["flaky"]
        assert len(publisher.delivered("risk-rejected")) == 1  # re-rejected under the same id: dropped
    finally:
        await h.aclose()


async def test_blob_handler_swaps_in_a_new_version(handlers: FunctionHandlers) -> None:
    data = make_model(bias=1.0)
    await handlers.model_blob(InputStream(data=data, name="models/fraud/2/model.onnx", length=len(data)))
    service = await handlers.holder.get()
    assert service.active("fraud").version == "2"


async def test_blob_handler_rejects_an_invalid_model_and_keeps_serving(
    handlers: FunctionHandlers, caplog: pytest.LogCaptureFixture
) -> None:
    await handlers.model_blob(InputStream(data=b"garbage", name="models/fraud/7/model.onnx", length=7))
    await handlers.model_blob(InputStream(data=b"x", name="models/fraud/readme.txt", length=1))
    service = await handlers.holder.get()
    assert service.active("fraud").version == "1"
    assert any("rejected" in r.getMessage() for r in caplog.records)


async def test_the_app_functions_run_end_to_end() -> None:
    """The decorated functions themselves, on the module-level service (repo model, env settings)."""
    fns = {name: f.get_user_function() for name, f in FUNCTIONS.items()}
    r = await fns["health"](http_request("GET", "/api/health/ready"), None)
    assert r.status_code in (200, 503)
    r = await fns["score"](http_request("POST", "/api/score", event()), None)
    assert r.status_code == 200 and json.loads(r.get_body())["model"] == "fraud"
    function_app.handlers.publisher = MemoryPublisher()  # the seam: no Service Bus runs here
    now = datetime.now(UTC).isoformat()  # NOTE: inside the idempotency window (EVENT_MAX_AGE_S)
    await fns["payments"]([sb_message(json.dumps(event(timestamp=now)).encode())])
    assert json.loads(function_app.handlers.publisher.sent[0].body)["event_id"] == "evt-1"
    await function_app.handlers.aclose()


def test_imported_on_a_running_loop_as_the_worker_does_the_models_load_before_any_call() -> None:
    """The Python worker imports function_app.py on its event loop: warm-up starts right there."""
    import subprocess
    import sys

    code = """
import asyncio, json, time
async def worker():
    import function_app  # indexing, as the worker's init/metadata request does it
    started = time.perf_counter()
    while function_app.handlers.holder.peek() is None and time.perf_counter() - started < 60:
        await asyncio.sleep(0.01)
    service = function_app.handlers.holder.peek()
    print(json.dumps({"built": service is not None, "ready": service is not None and service.ready}))
    await function_app.handlers.holder.aclose()
asyncio.run(worker())
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"built": True, "ready": True}


def test_imported_without_a_loop_nothing_starts(settings: Settings) -> None:
    handlers = FunctionHandlers(ServiceHolder(lambda: settings))
    handlers.warm_up_soon()  # a tool or test importing the app: no loop, no work
    assert handlers.holder.peek() is None and handlers._warm_up is None


async def test_a_message_over_max_message_bytes_is_rejected_with_an_excerpt_size_and_hash(settings: Settings) -> None:
    """A 100 KB body is never scored, and its record carries an excerpt, its size and its hash."""
    import hashlib
    from dataclasses import replace

    publisher = MemoryPublisher()
    handlers = FunctionHandlers(ServiceHolder(lambda: replace(settings, max_message_bytes=2048)), publisher=publisher)
    body = json.dumps(event(note="x" * 100_000)).encode()
    await handlers.payments([sb_message(body, "m-huge")])
    [sent] = publisher.sent
    record = json.loads(sent.body)
    assert sent.queue == "risk-rejected" and record["error"] == "payload_too_large"
    assert (record["body_bytes"], record["body_sha256"], record["truncated"]) == (
        len(body), hashlib.sha256(body).hexdigest(), True
    )  # fmt: skip
    assert len(record["body"]) <= 1024 and len(sent.body) < 4096
    assert handlers.holder.peek() is None  # rejected on its own fault: the service was not even needed
    await handlers.aclose()


async def test_a_bad_message_is_rejected_and_a_bad_configuration_retried(settings: Settings, tmp_path: Path) -> None:
    """The message's own fault is rejected at once; the service's state or configuration is retried
    (waited for inside the batch budget first: the shortest the settings allow)."""
    from dataclasses import replace

    from shared.errors import BatchIncomplete

    settings = replace(settings, queue_batch_budget_ms=6000)

    publisher = MemoryPublisher()
    misnamed = FunctionHandlers(ServiceHolder(lambda: replace(settings, default_model="nope")), publisher=publisher)
    with pytest.raises(BatchIncomplete, match="DEFAULT_MODEL 'nope'"):
        await misnamed.payments([sb_message(json.dumps(event()).encode())])
    assert publisher.sent == []  # redelivered, then dead-lettered: never lost
    readiness = misnamed.holder.readiness()
    assert not readiness.ready and "DEFAULT_MODEL 'nope'" in readiness.detail
    await misnamed.aclose()

    (tmp_path / "empty").mkdir()
    modelless = FunctionHandlers(
        ServiceHolder(lambda: replace(settings, models_dir=str(tmp_path / "empty"))), publisher=publisher
    )
    await modelless.payments([sb_message(b"{broken", "m-broken")])
    assert json.loads(publisher.sent[0].body)["error"] == "malformed_json"  # its own fault, whatever the state
    with pytest.raises(BatchIncomplete, match="no models found"):
        await modelless.payments([sb_message(json.dumps(event()).encode())])
    await modelless.aclose()


async def test_a_model_blob_over_the_cap_is_refused_unread(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    from dataclasses import replace

    handlers = FunctionHandlers(ServiceHolder(lambda: replace(settings, max_model_bytes=4096)))

    class Unreadable(InputStream):
        def read(self, size: int = -1) -> bytes:
            raise AssertionError("read a blob over the cap")

    await handlers.model_blob(Unreadable(data=b"", name="models/fraud/5/model.onnx", length=10_000_000))
    assert (await handlers.holder.get()).active().version == "1"
    assert "exceeds MAX_MODEL_BYTES" in caplog.text
    await handlers.holder.aclose()


async def test_a_malformed_redis_url_under_the_host_is_a_503_naming_it() -> None:
    """No traceback, no secret, no path: one line on a keyed route (the anonymous probe says not
    ready, no more); the worker and its warm-up live on."""
    handlers = FunctionHandlers(ServiceHolder(lambda: Settings.from_env({"REDIS_URL": "redis//:s3cret@cache:6380"})))
    handlers.warm_up_soon()
    assert handlers._warm_up is not None
    await handlers._warm_up  # logs the reason, raises nothing
    r = await handlers.http(http_request("GET", "/api/health/ready"))
    assert r.status_code == 503 and json.loads(r.get_body()) == {"status": "not_ready", "models": []}
    r = await handlers.http(http_request("GET", "/api/stats"))
    assert r.status_code == 503 and json.loads(r.get_body())["detail"] == (
        "REDIS_URL: expected a redis://, rediss:// or unix:// URL with a host"
    )
    r = await handlers.http(http_request("POST", "/api/score", event()))
    assert r.status_code == 503 and "s3cret" not in r.get_body().decode()


def test_a_publisher_that_cannot_be_built_fails_its_messages_with_the_reason() -> None:
    """azure.identity.aio cannot build its credential without aiohttp: each message fails with that
    reason (the batch is redelivered) instead of an ImportError that leaves no verdict.

    NOTE: in a fresh interpreter where aiohttp cannot be imported, as in an image that lacks it
    (in this process azure.core may already hold its aiohttp transport)."""
    import subprocess
    import sys

    script = """
import asyncio, json, sys
sys.modules["aiohttp"] = None
from azure.functions.servicebus import ServiceBusMessage
from shared.core.holder import ServiceHolder
from shared.errors import BatchIncomplete
from shared.adapters.queue.publisher import ServiceBusPublisher
from shared.settings import Settings
from shared.adapters.functions import FunctionHandlers
from tests.conftest import event

async def main():
    publisher = ServiceBusPublisher(namespace="payments.servicebus.windows.net")
    h = FunctionHandlers(ServiceHolder(lambda: Settings.from_env({"QUEUE_BATCH_BUDGET_MS": "6000"})), publisher=publisher)
    body = json.dumps(event(event_id="no-aiohttp")).encode()
    msg = ServiceBusMessage(body=body, message_id="no-aiohttp", user_properties={}, delivery_count=1, application_properties={})
    try:
        await h.payments([msg])
    except BatchIncomplete as exc:
        print("BatchIncomplete:", exc.detail)
    finally:
        await h.aclose()

asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"BatchIncomplete: 1 of 1 messages failed.*cannot be built.*aiohttp", done.stdout), done.stdout


def test_the_publishers_credential_builds_from_the_pinned_requirements() -> None:
    """requirements.txt pins what azure.identity.aio's credential imports (aiohttp)."""
    requirements = (REPO / "requirements.txt").read_text()
    assert re.search(r"^aiohttp==", requirements, re.M), "aiohttp is not pinned: the credential cannot be built"


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("http://localhost/api/score", ("/api/score", "")),
        ("https://app.example/api/score/?x=1", ("/api/score/", "x=1")),
        ("http://localhost/api/score/batch", ("/api/score/batch", "")),
        ("http://localhost/api/models/fraud_v-2.1/score", ("/api/models/fraud_v-2.1/score", "")),
        ("http://localhost/api/models/fr%C3%A9/score", None),  # NOTE: escapes go through AsgiMiddleware
        ("http://localhost/api/scores", None),
        ("http://localhost/api/models/fraud/activate", None),
        ("http://localhost/v2/models/fraud/infer", ("/v2/models/fraud/infer", "")),
        ("http://localhost/v2/models/fraud/versions/2/infer?a=b", ("/v2/models/fraud/versions/2/infer", "a=b")),
        ("http://localhost/v2/models/fraud", None),
    ],
)
def test_the_scoring_routes_are_told_by_their_url(url: str, path: tuple[str, str] | None) -> None:
    from shared.adapters.functions import scoring_path

    assert scoring_path(url) == path


async def test_the_scoring_routes_answer_as_through_the_asgi_bridge(handlers: FunctionHandlers) -> None:
    """The direct framing and func.AsgiMiddleware over the same app: the same answers."""
    big = json.dumps(event(note="x" * 70_000)).encode()
    cases = [
        ("/api/score", json.dumps(event(event_id="d-1")).encode(), "application/json"),
        ("/api/score/", json.dumps(event(event_id="d-2")).encode(), "application/json"),
        ("/api/score", b"{", "application/json"),
        ("/api/score", json.dumps(event()).encode(), "text/plain"),
        ("/api/score", big, "application/json"),
        ("/api/score/batch", json.dumps({"events": [event(event_id="d-3"), event(amount=-1)]}).encode(), "application/json"),
        ("/api/models/fraud/score", json.dumps(event(event_id="d-4")).encode(), "application/json"),
        ("/api/models/nope/score", json.dumps(event(event_id="d-5")).encode(), "application/json"),
    ]  # fmt: skip
    for path, body, content_type in cases:
        req = func.HttpRequest("POST", f"http://localhost{path}", headers={"content-type": content_type}, body=body)
        direct = await handlers.http(req)
        bridged = await handlers._asgi.handle_async(req, None)
        assert direct.status_code == bridged.status_code, (path, content_type, direct.get_body()[:200])
        assert direct.mimetype == bridged.mimetype == "application/json"
        a, b = json.loads(direct.get_body()), json.loads(bridged.get_body())
        if direct.status_code == 200:
            for answer in (a, b):
                for row in answer.get("results", [answer]):
                    row.pop("timings_ms", None), row.pop("source", None)
        assert a == b, path


# -- the route table (shared/adapters/http/routes.py) is what function_app.py declares -------------


def declared_routes(functions: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...], str]]:
    """(function, route, methods, auth level) of every HTTP trigger, as the real indexer reads them."""
    found = set()
    for name, fn in functions.items():
        for b in fn.get_bindings():
            d = b.get_dict_repr()
            if d["type"] == "httpTrigger":
                methods = tuple(sorted(str(getattr(m, "value", m)) for m in d["methods"]))
                found.add((name, d["route"], methods, str(getattr(d["authLevel"], "value", d["authLevel"]))))
    return found


def table_routes(routes: tuple[RouteSpec, ...] = ROUTES) -> set[tuple[str, str, tuple[str, ...], str]]:
    return {(r.name, r.functions_route, tuple(sorted(r.methods)), r.auth) for r in routes}


def test_function_app_declares_exactly_the_route_table() -> None:
    assert len(ROUTES) == 23
    assert declared_routes(FUNCTIONS) == table_routes()


def test_the_route_table_check_catches_a_declaration_that_drifts() -> None:
    """Mutations of the table: a route dropped, a method added, a keyed route made anonymous, a path moved."""
    score = route_named("score")
    for mutated in (
        tuple(r for r in ROUTES if r.name != "stats"),
        tuple(r._replace(ops=(*r.ops, r.ops[0]._replace(method="GET"))) if r is score else r for r in ROUTES),
        tuple(r._replace(auth="anonymous") if r is score else r for r in ROUTES),
        tuple(r._replace(path="/api/scores") if r is score else r for r in ROUTES),
    ):
        assert declared_routes(FUNCTIONS) != table_routes(mutated)


# -- who may call what: the host's keys (docs/platform.md, "Keys and auth levels") ------------------

# The host's rule: an anonymous function takes any call; a function-level one any function key or
# host key (and the master key); an admin-level one the master key only.
OPENS = {"function key": {"anonymous", "function"}, "host key": {"anonymous", "function"},
         "master key": {"anonymous", "function", "admin"}}  # fmt: skip
CONTROL = {"model_activate", "model_rollout", "model_shadow", "model_canary", "model_promote", "reviews", "outcomes"}


def calls(routes: tuple[RouteSpec, ...] = ROUTES) -> list[tuple[str, str, str]]:
    """(route name, method, path) of every call the route table answers, parameters filled in."""
    return [(r.name, m, re.sub(r"\{\w+\}", lambda g: FILL[g[0]], r.path)) for r in routes for m in r.methods]


def opened_by(key: str, functions: dict[str, Any]) -> set[str]:
    """The routes whose calls `key` gets through the host's table of `functions` to their function."""
    prefix = json.loads((REPO / "host.json").read_text())["extensions"]["http"]["routePrefix"]
    table = host_routes.route_table(functions.values(), prefix)
    opened = set()
    for name, method, path in calls():
        found = host_routes.answer(table, method, path)
        if found is not None and found.function == name and found.auth_level in OPENS[key]:
            opened.add(name)
    return opened


def test_a_scoring_key_is_refused_on_every_control_route() -> None:
    everything = {r.name for r in ROUTES}
    for key in ("function key", "host key"):
        assert opened_by(key, FUNCTIONS) == everything - CONTROL, key
    assert opened_by("master key", FUNCTIONS) == everything


def test_a_control_route_declared_with_a_function_key_is_caught() -> None:
    """Mutation: model_activate declared as the first wave had it (AuthLevel.FUNCTION)."""
    app = func.FunctionApp()
    for name, fn in FUNCTIONS.items():
        if fn.get_bindings()[0].get_dict_repr()["type"] != "httpTrigger":
            continue
        d = fn.get_bindings()[0].get_dict_repr()
        level = func.AuthLevel(str(getattr(d["authLevel"], "value", d["authLevel"])).lower())
        if name == "model_activate":
            level = func.AuthLevel.FUNCTION

        def body(req: func.HttpRequest) -> func.HttpResponse: ...  # pragma: no cover

        body.__name__ = name
        app.function_name(name)(app.route(route=d["route"], methods=d["methods"], auth_level=level)(body))
    mutated = {f.get_function_name(): f for f in app.get_functions()}
    assert "model_activate" in opened_by("function key", mutated)
    assert declared_routes(mutated) != table_routes()


def test_deploy_doc_names_the_key_of_every_route() -> None:
    """docs/deploy.md's route table (which key goes to whom) says each route's exact level."""
    documented = documented_routes(REPO / "docs" / "deploy.md")
    table = host_table()
    for method, path, auth in documented:
        found = host_routes.answer(table, method, path)
        assert found is not None and found.auth_level == auth, (method, path, auth)
    assert {(m, p) for _, m, p in calls()} <= {(m, p) for m, p, _ in documented}


def test_only_the_data_plane_is_framed_by_the_adapter_itself() -> None:
    pattern = framed()
    data = [r for r in ROUTES if r.plane == "data"]
    assert {r.name for r in data} == {"score", "score_batch", "model_score", "v2_model_infer", "v2_version_infer"}
    for r in ROUTES:
        url = "http://h" + r.path.replace("{name}", "fraud").replace("{version}", "1").replace("{probe}", "live")
        url = url.replace("{event_id}", "e-1")
        assert (pattern.match(url) is not None) == (r.plane == "data"), r.name
