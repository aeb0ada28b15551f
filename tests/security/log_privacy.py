"""No personal data and no secret in the logs of a full run, every logger at DEBUG.

One run through the Functions adapters, as the host drives them: HTTP scores with notes
(reviewed by Azure OpenAI's stand-in, bench/llm_server.py), a batch, a review read back,
bad inputs, queue messages (good, bad, too large), a model reload from Blob storage (Azurite)
and a metrics scrape; Redis behind a password. Every record of every logger is captured at
DEBUG (the root logger, every logger already made, those that do not propagate; JSON with
their extra fields and tracebacks), and so is everything written to the process's stdout and
stderr, every span and the metrics text. None may hold a user id, a note, the API key, the
Redis password, the function key or a connection string's key. The last step logs one on
purpose and the scan must find it.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import azure.functions as func
import pytest
from azure.functions.blob import InputStream
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.llm_server import LlmServer
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.holder import ServiceHolder
from shared.settings import ReviewPolicy, Settings
from shared.telemetry import process
from shared.telemetry.logs import JsonFormatter
from shared.telemetry.setup import Telemetry
from tests.adapters.test_function_app import sb_message
from tests.conftest import AZURITE_KEY, event
from tests.onnx_models import make_model

TOKEN = uuid.uuid4().hex[:8]  # NOTE: fresh per run, so nothing left over from another run can match
USERS = [f"usr-{TOKEN}-{i}@example.org" for i in range(4)]  # e-mail-like ids: personal data by any reading
NOTE = f"please ship to 12 Elm St, card ending 4242 (note {TOKEN}n)"
SECRETS = {
    "user id": f"usr-{TOKEN}",
    "note": f"{TOKEN}n",
    "address": "12 Elm St",
    "API key": f"sk-{TOKEN}-apikey",
    "Redis password": f"pw-{TOKEN}-redis",
    "function key": f"fk-{TOKEN}-funckey",
    "Service Bus key": f"sb-{TOKEN}-sharedaccesskey",
    "storage account key": AZURITE_KEY,
}


def leaks(text: str) -> list[str]:
    """The names of the SECRETS that `text` holds."""
    return [name for name, value in SECRETS.items() if value in text]


@contextlib.contextmanager
def every_log_at_debug() -> Iterator[io.StringIO]:
    """Every record of every logger, at DEBUG, as JSON lines (extras and tracebacks included)."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    existing = [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    saved = [(lg, lg.level, lg.disabled) for lg in [root, *existing]]
    apart = [lg for lg in existing if not lg.propagate]  # uvicorn's and others' that do not reach the root
    root.addHandler(handler)
    for lg in apart:
        lg.addHandler(handler)
    for lg, _, _ in saved:
        lg.setLevel(logging.DEBUG)
        lg.disabled = False
    try:
        yield out
    finally:
        for lg in apart:
            lg.removeHandler(handler)
        root.removeHandler(handler)
        for lg, level, disabled in saved:
            lg.setLevel(level)
            lg.disabled = disabled


@pytest.fixture
async def redis_with_password(redis_url: str, redis_client: Any) -> Any:
    """REDIS_URL for a user of its own, behind a password (an ACL user, removed afterwards)."""
    user = f"sec-{TOKEN}"
    await redis_client.execute_command(
        "ACL", "SETUSER", user, "on", f">{SECRETS['Redis password']}", "~*", "&*", "+@all"
    )
    host_port = redis_url.split("://", 1)[1].rsplit("@", 1)[-1]
    yield f"redis://{user}:{SECRETS['Redis password']}@{host_port}"
    await redis_client.execute_command("ACL", "DELUSER", user)


@pytest.fixture
def traced(settings: Settings) -> Iterator[InMemorySpanExporter]:
    """Every request traced into memory (the process's telemetry restored after)."""
    spans = InMemorySpanExporter()
    telemetry = Telemetry(
        replace(settings, trace_sample_ratio=1.0), span_processors=[SimpleSpanProcessor(spans)], export=False
    )
    previous = process.current()
    process.install(telemetry)
    yield spans
    process.install(previous)
    telemetry.shutdown()


@pytest.fixture
def models_container(azurite_connection: str) -> Iterator[str]:
    """A Blob container holding `fraud/1` (the model source, as in Azure)."""
    from azure.storage.blob import BlobServiceClient

    name = f"models-privacy-{TOKEN}"
    container = BlobServiceClient.from_connection_string(azurite_connection).get_container_client(name)
    container.create_container()
    container.upload_blob("fraud/1/model.onnx", make_model())
    yield name
    container.delete_container()


def http(method: str, path: str, body: object | None = None) -> func.HttpRequest:
    headers = {"content-type": "application/json", "x-functions-key": SECRETS["function key"]}
    data = body if isinstance(body, bytes) else json.dumps(body).encode() if body is not None else b""
    return func.HttpRequest(method=method, url=f"http://localhost{path}", headers=headers, body=data)


async def test_a_full_run_logs_no_personal_data_and_no_secret(
    settings: Settings,
    redis_with_password: str,
    redis_prefix: str,
    azurite_connection: str,
    models_container: str,
    traced: InMemorySpanExporter,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from shared.adapters.functions import FunctionHandlers

    with LlmServer() as llm, every_log_at_debug() as logs:
        configured = replace(
            settings,
            redis_url=redis_with_password,
            redis_prefix=redis_prefix,
            model_storage=azurite_connection,
            models_container=models_container,
            service_bus_connection=(
                "Endpoint=sb://localhost/;SharedAccessKeyName=send;"
                f"SharedAccessKey={SECRETS['Service Bus key']}"  # the publisher is the in-memory one: never dialled
            ),
            review=ReviewPolicy(endpoint=llm.endpoint, api_key=SECRETS["API key"], timeout_ms=3000.0),
            log_level="DEBUG",
        )
        publisher = MemoryPublisher()
        handlers = FunctionHandlers(ServiceHolder(lambda: configured), publisher=publisher)
        try:
            answers = await run_everything(handlers, publisher, models_container)
        finally:
            await handlers.aclose()
        assert answers["reviewed"] == "llm" and llm.requests, "the review did not run: the run proves less"
        assert answers["rejected"] >= 2 and answers["completed"] >= 2 and answers["reloaded"] == "2"

        captured = logs.getvalue()
        spans = "\n".join(s.to_json() for s in traced.get_finished_spans())
        printed = capfd.readouterr()
        assert captured.count("\n") > 50, "too little was logged for the scan to mean anything"
        assert leaks(captured) == [], [line for line in captured.splitlines() if leaks(line)][:3]
        assert leaks(printed.out + printed.err) == []
        assert leaks(spans) == [] and spans
        assert leaks(answers["metrics"]) == []

        # The scan can fail: a secret logged on purpose, at DEBUG, in an extra field, is found.
        logging.getLogger("tests.security").debug("oops", extra={"user": USERS[0]})
        assert leaks(logs.getvalue()) == ["user id"]


async def run_everything(handlers: Any, publisher: MemoryPublisher, container: str) -> dict[str, Any]:
    """Every path that takes personal data or touches a secret, once; what came back."""
    answers: dict[str, Any] = {}
    scored = await handlers.http(http("POST", "/api/score", event(event_id="p-1", user_id=USERS[0], note=NOTE)))
    assert scored.status_code == 200, scored.get_body()
    answers["reviewed"] = json.loads(scored.get_body())["source"]
    await handlers.http(http("POST", "/api/models/fraud/score", event(event_id="p-2", user_id=USERS[1], note=None)))
    batch = {"events": [event(event_id=f"b-{i}", user_id=u, note=NOTE) for i, u in enumerate(USERS)] + [{"x": 1}]}
    assert (await handlers.http(http("POST", "/api/score/batch", batch))).status_code == 200
    assert (await handlers.http(http("GET", "/api/reviews/p-1"))).status_code == 200
    for bad in (
        event(user_id=USERS[2], note=NOTE, amount=-1),  # invalid
        event(user_id=USERS[2], note=NOTE, channel=USERS[2]),  # a value where an enum is due
        json.dumps(event(user_id=USERS[3], note=NOTE)).encode()[:-9],  # cut off
        event(user_id=USERS[3] * 40, note=NOTE * 5),  # too long
    ):
        assert 400 <= (await handlers.http(http("POST", "/api/score", bad))).status_code < 500
    good = [
        sb_message(json.dumps(event(event_id=f"q-{i}", user_id=u, note=NOTE)).encode(), f"m-{i}")
        for i, u in enumerate(USERS[:2])
    ]
    bad_messages = [
        sb_message(json.dumps(event(user_id=USERS[2], note=NOTE, channel=USERS[2])).encode(), "m-enum"),
        sb_message(json.dumps(event(user_id=USERS[3], note=NOTE * 400)).encode(), "m-huge"),
        sb_message(b'{"user_id": "' + USERS[3].encode() + b'", "note": "' + NOTE.encode(), "m-cut"),
    ]
    await handlers.payments([*good, *bad_messages])
    await handlers.payments(good)  # the redelivery: duplicates
    answers["completed"] = sum(m.queue == "risk-completed" for m in publisher.sent)
    answers["rejected"] = sum(m.queue == "risk-rejected" for m in publisher.sent)
    model = make_model(bias=0.5)
    await handlers.model_blob(InputStream(data=model, name=f"{container}/fraud/2/model.onnx", length=len(model)))
    await handlers.model_blob(InputStream(data=b"garbage", name=f"{container}/fraud/3/model.onnx", length=7))
    answers["reloaded"] = (await handlers.holder.get()).active("fraud").version
    metrics = await handlers.http(http("GET", "/api/metrics"))
    answers["metrics"] = metrics.get_body().decode()
    return answers


def test_a_refused_value_is_named_by_its_field_never_quoted() -> None:
    """msgspec quotes an enum value it refuses; the detail (answered and logged) keeps only the field."""
    from shared.domain.events import decode_event
    from shared.errors import InvalidEvent

    with pytest.raises(InvalidEvent) as refused:
        decode_event(json.dumps(event(channel=USERS[0])).encode())
    assert refused.value.detail == "Invalid enum value - at `$.channel`"


async def test_a_real_server_at_debug_prints_no_personal_data_and_no_secret(
    redis_with_password: str, redis_prefix: str, models_dir: Any, tmp_path: Any
) -> None:
    """`make run` with LOG_LEVEL=DEBUG: everything the process prints, its server's logs included."""
    from tests.server_process import running_server

    with LlmServer() as llm:
        env = {
            "LOG_LEVEL": "DEBUG",
            "MODELS_DIR": str(models_dir),
            "FEATURES_FILE": "",
            "REDIS_URL": redis_with_password,
            "REDIS_KEY_PREFIX": redis_prefix,
            "AZURE_OPENAI_ENDPOINT": llm.endpoint,
            "AZURE_OPENAI_API_KEY": SECRETS["API key"],
            "LLM_TIMEOUT_MS": "3000",
        }
        with running_server(env, tmp_path) as running:
            for body in (
                event(event_id="s-1", user_id=USERS[0], note=NOTE),
                event(event_id="s-2", user_id=USERS[1], channel=USERS[1]),
                {"events": [event(event_id="s-3", user_id=USERS[2], note=NOTE), {"user_id": USERS[3]}]},
            ):
                path = "/api/score/batch" if "events" in body else "/api/score"
                raw = json.dumps(body).encode()
                head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                head += f"x-functions-key: {SECRETS['function key']}\r\nContent-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
                reply = running.send(head.encode() + raw, timeout_s=10)
                assert reply is not None and reply.status in (200, 422), reply
            reply = running.get("/api/reviews/s-1")
            assert reply is not None and reply.status == 200 and llm.requests
        printed = running.log.read_text(errors="replace")
    assert "DEBUG" in printed, printed[-2000:]
    assert leaks(printed) == [], [line for line in printed.splitlines() if leaks(line)][:3]
