"""function_app.py as the Python worker runs it: indexed, loaded and invoked through
`azure_functions_runtime` (Python 3.13, from PyPI) by a stand-in host over the host's own
gRPC message types, every function once, every answer checked; in that process, the packages
imported are the app's pins and the app's import is light.
"""

from __future__ import annotations

import json
import shutil
import struct
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import event
from tests.worker.host import REPO, Host, running_worker

FUNCTIONS = 27  # every function function_app.py declares
HEAVY = {"numpy", "onnxruntime", "redis.asyncio", "azure.servicebus", "openai"}


def pins() -> dict[str, str]:
    """The app's pins, as the 3.13 worker (which isolates the app's dependencies) loads them."""
    found: dict[str, str] = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        spec, _, marker = line.partition(";")
        if "==" in spec and ("3.13" not in marker or ">=" in marker):
            name, version = spec.strip().split("==")
            found[name] = version
    return found


@pytest.fixture(scope="module")
def app_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    models = tmp_path_factory.mktemp("worker") / "models"
    shutil.copytree(REPO / "models", models)  # NOTE: the blob trigger installs a version: not into the repo
    return {"MODELS_DIR": str(models), "AzureWebJobsScriptRoot": str(REPO), "FUNCTIONS_WORKER_RUNTIME": "python"}


@pytest.fixture(scope="module")
def worker(app_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Host, Path]]:
    report = tmp_path_factory.mktemp("report") / "report.json"
    with running_worker(app_env, report=report) as (host, _):
        init = host.start(REPO)
        assert init.result.status == host.protos.StatusResult.Success, init.result.exception.message
        yield host, report


@pytest.fixture(scope="module")
def host(worker: tuple[Host, Path]) -> Host:
    host = worker[0]
    for _ in range(300):  # NOTE: the warm-up loads the models right after indexing
        if host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status == 200:
            break
        time.sleep(0.05)
    return host


def test_the_worker_indexes_every_function_with_its_bindings(worker: tuple[Host, Path]) -> None:
    host = worker[0]
    assert len(host.functions) == FUNCTIONS, sorted(host.functions)
    payments = [json.loads(b) for b in host.functions["payments"].raw_bindings]
    assert payments == [
        {"direction": "IN", "dataType": "BINARY", "type": "serviceBusTrigger", "name": "msgs",
         "connection": "ServiceBusConnection", "queueName": "payments", "cardinality": "MANY"}
    ]  # fmt: skip


WIDTH = 25  # the committed demo model's features (models/fraud/1)
V2_JSON = json.dumps({"id": "w-v2", "inputs": [{"name": "features", "datatype": "FP32", "shape": [1, WIDTH],
                                                "data": [0.5] * WIDTH}]}).encode()  # fmt: skip


def test_every_http_function_answers_through_the_worker(host: Host) -> None:
    body = json.dumps(event(event_id="w-1")).encode()
    checks: list[tuple[str, str, str, bytes, dict[str, str], int]] = [
        ("health", "GET", "/api/health/live", b"", {"probe": "live"}, 200),
        ("health", "GET", "/api/health/ready", b"", {"probe": "ready"}, 200),
        ("score", "POST", "/api/score", body, {}, 200),
        ("score", "POST", "/api/score", b"{", {}, 400),
        ("score_batch", "POST", "/api/score/batch", json.dumps({"events": [event(event_id="w-2")]}).encode(), {}, 200),
        ("model_score", "POST", "/api/models/fraud/score", body, {"name": "fraud"}, 200),
        ("models", "GET", "/api/models", b"", {}, 200),
        ("openapi", "GET", "/api/openapi.json", b"", {}, 200),
        ("reviews", "GET", "/api/reviews/w-1", b"", {"event_id": "w-1"}, 404),
        ("stats", "GET", "/api/stats", b"", {}, 200),
        ("metrics", "GET", "/api/metrics", b"", {}, 200),
        ("v2_server", "GET", "/v2", b"", {}, 200),
        ("v2_health", "GET", "/v2/health/ready", b"", {"probe": "ready"}, 200),
        ("v2_model", "GET", "/v2/models/fraud", b"", {"name": "fraud"}, 200),
        ("v2_model_ready", "GET", "/v2/models/fraud/ready", b"", {"name": "fraud"}, 200),
        ("v2_version", "GET", "/v2/models/fraud/versions/1", b"", {"name": "fraud", "version": "1"}, 200),
        ("v2_version_ready", "GET", "/v2/models/fraud/versions/1/ready", b"", {"name": "fraud", "version": "1"}, 200),
        ("v2_model_infer", "POST", "/v2/models/fraud/infer", V2_JSON, {"name": "fraud"}, 200),
        (
            "v2_version_infer",
            "POST",
            "/v2/models/fraud/versions/1/infer",
            V2_JSON,
            {"name": "fraud", "version": "1"},
            200,
        ),
        ("v2_model_infer", "POST", "/v2/models/fraud/infer", b'{"inputs": 1}', {"name": "fraud"}, 400),
    ]
    for function, method, path, data, params, status in checks:
        answer = host.call(function, method, path, data, params=params)
        assert answer.status == status, f"{function} {method} {path}: {answer.status} {answer.body[:200]!r}"
        if answer.headers.get("content-type", "").startswith("application/json"):
            answer.json()  # NOTE: every JSON answer parses
    scored = host.call("score", "POST", "/api/score", body).json()
    assert (scored["event_id"], scored["model"]) == ("w-1", "fraud") and 0 <= scored["risk_score"] <= 1
    assert (
        host.call(
            "score_batch", "POST", "/api/score/batch", json.dumps({"events": [event(event_id="w-2")]}).encode()
        ).json()["results"][0]["event_id"]
        == "w-2"
    )
    assert "fraud" in {m["name"] for m in host.call("models", "GET", "/api/models").json()["models"]}
    inferred = host.call("v2_model_infer", "POST", "/v2/models/fraud/infer", V2_JSON, params={"name": "fraud"}).json()
    assert (inferred["model_name"], inferred["id"], len(inferred["outputs"][0]["data"])) == ("fraud", "w-v2", 1)
    tensor = {
        "name": "features",
        "datatype": "FP32",
        "shape": [1, WIDTH],
        "parameters": {"binary_data_size": 4 * WIDTH},
    }
    head = json.dumps({"inputs": [tensor], "parameters": {"binary_data_output": True}})
    body = head.encode() + struct.pack(f"<{WIDTH}f", *[0.5] * WIDTH)
    headers = {"inference-header-content-length": str(len(head))}
    binary = host.call(
        "v2_model_infer", "POST", "/v2/models/fraud/infer", body, params={"name": "fraud"}, headers=headers
    )
    split = int(binary.headers["inference-header-content-length"])
    assert binary.status == 200 and len(binary.body) == split + 4  # the JSON head, then one FP32 score


def test_once_built_an_invocation_sends_the_host_no_worker_info_line(host: Host) -> None:
    """The worker's per-invocation INFO lines (one gRPC message each) stay at WARNING, from the app."""
    before = len(host.logs)
    for n in range(5):
        assert host.call("score", "POST", "/api/score", json.dumps(event(event_id=f"l-{n}")).encode()).status == 200
    time.sleep(0.2)
    worker = ("proxy_worker", "azure_functions_worker", "azure_functions_runtime", "azure.functions")
    info = [
        f"{log.category}: {log.message}"
        for log in host.logs[before:]
        if log.level == host.protos.RpcLog.Information and log.category.startswith(worker)
    ]
    assert info == [], info[:3]


def test_v2_infer_and_pinning_through_the_worker(host: Host) -> None:
    meta = host.call("v2_model", "GET", "/v2/models/fraud", params={"name": "fraud"}).json()
    width = meta["inputs"][0]["shape"][-1]
    request = {
        "id": "x",
        "inputs": [
            {"name": meta["inputs"][0]["name"], "datatype": "FP32", "shape": [2, width], "data": [0.1] * (2 * width)}
        ],
    }
    for function, path, params in (
        ("v2_model_infer", "/v2/models/fraud/infer", {"name": "fraud"}),
        ("v2_version_infer", "/v2/models/fraud/versions/1/infer", {"name": "fraud", "version": "1"}),
    ):
        answer = host.call(function, "POST", path, json.dumps(request).encode(), params=params)
        assert answer.status == 200, answer.body[:200]
        assert (answer.json()["id"], answer.json()["outputs"][0]["shape"][0]) == ("x", 2)
    pin = json.dumps({"version": "1"}).encode()
    assert (
        host.call("model_activate", "POST", "/api/models/fraud/activate", pin, params={"name": "fraud"}).status == 200
    )
    assert host.call("model_activate", "DELETE", "/api/models/fraud/activate", params={"name": "fraud"}).status == 200


def test_a_queued_batch_as_the_host_sends_it(host: Host) -> None:
    now = datetime.now(UTC).isoformat()  # NOTE: inside the idempotency window (EVENT_MAX_AGE_S), as a live payment is
    inputs, metadata = host.batch(
        [
            ("q-1", json.dumps(event(event_id="q-1", timestamp=now)).encode()),
            ("q-bad", b"\xff{not json"),
            ("q-2", json.dumps(event(event_id="q-2", timestamp=now)).encode()),
        ]
    )
    response = host.invoke("payments", inputs, metadata)
    assert response.result.status == host.protos.StatusResult.Success, response.result.exception.message


def test_a_model_blob_installs_a_new_version(host: Host) -> None:
    content = (REPO / "models" / "fraud" / "1" / "model.onnx").read_bytes()
    inputs, metadata = host.blob("models/fraud/7/model.onnx", content)
    response = host.invoke("model_blob", inputs, metadata)
    assert response.result.status == host.protos.StatusResult.Success, response.result.exception.message
    versions = next(m for m in host.call("models", "GET", "/api/models").json()["models"] if m["name"] == "fraud")
    assert "7" in json.dumps(versions)


def test_the_process_ran_the_pins_and_imported_the_app_light(worker: tuple[Host, Path], host: Host) -> None:
    """Checked last: the report comes when the stream ends (module teardown order: this test's)."""
    report = report_of(worker)
    wanted = pins()
    imported = report["imported"]
    assert imported["azure.functions"]["version"] == wanted["azure-functions"]
    assert imported["google.protobuf"]["version"] == wanted["protobuf"]
    assert imported["grpc"]["version"] == wanted["grpcio"]
    assert not HEAVY & set(report["heavy_after_index"]), report["heavy_after_index"]
    assert report["index_s"] < 2.0, f"indexing took {report['index_s']:.2f} s"
    published = {(m["queue"], m["message_id"]): json.loads(m["body"]) for m in report["published"]}
    assert published[("risk-completed", "q-1")]["event_id"] == "q-1"
    assert published[("risk-completed", "q-2")]["event_id"] == "q-2"
    [(rejection_id, rejected)] = [(mid, body) for (queue, mid), body in published.items() if queue == "risk-rejected"]
    assert rejected["message_id"] == "q-bad" and rejection_id.startswith("rejected:")  # its id: from what was rejected
    assert (
        rejected["error"] == "malformed_json" and rejected["body_base64"] == "/3tub3QganNvbg=="
    )  # the bytes as queued


def report_of(worker: tuple[Host, Path]) -> dict[str, Any]:
    host, path = worker
    host.stop()
    for _ in range(200):
        if path.exists() and path.stat().st_size:
            return dict(json.loads(path.read_text()))
        time.sleep(0.05)
    raise AssertionError("the worker wrote no report")


def mutated_app(tmp_path: Path, old: str, new: str) -> Path:
    source = (REPO / "function_app.py").read_text()
    assert old in source, f"the mutation's anchor {old!r} is not in function_app.py"
    (tmp_path / "function_app.py").write_text(source.replace(old, new))
    return tmp_path


def test_a_pep_585_annotation_put_back_fails_the_index(app_env: dict[str, str], tmp_path: Path) -> None:
    """The mutation: `list[...]` on the batch binding, as before; the worker refuses the whole app."""
    app_dir = mutated_app(tmp_path, "msgs: List[func.ServiceBusMessage]", "msgs: list[func.ServiceBusMessage]")
    with running_worker(app_env, memory_publisher=False) as (host, _):
        init = host.start(app_dir)
    assert init.result.status == host.protos.StatusResult.Failure
    assert "invalid non-type annotation" in init.result.exception.message
    assert host.functions == {}, "a failed index must serve nothing"


def test_with_the_worker_exporting_to_azure_monitor_itself_every_answer_is_clean(
    app_env: dict[str, str], tmp_path: Path
) -> None:
    """The worker configures azure-monitor before the app (its own sampler and log handler): the
    app exports through that setup, and a span the worker's sampler drops raises nothing."""
    connection = "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=http://127.0.0.1:9/"
    env = {
        **app_env,
        "PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY": "true",
        "PYTHON_ENABLE_OPENTELEMETRY": "true",
        "APPLICATIONINSIGHTS_CONNECTION_STRING": connection,
        "TRACE_SAMPLE_RATIO": "1.0",
    }
    with running_worker(env) as (host, _):
        assert host.start(REPO).result.status == host.protos.StatusResult.Success
        for _ in range(300):
            if host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status == 200:
                break
            time.sleep(0.05)
        for n in range(40):  # NOTE: sampled by the host; the worker's sampler keeps only a few per second
            traceparent = f"00-{n + 1:032x}-{n + 1:016x}-01"
            body = json.dumps(event(event_id=f"t-{n}")).encode()
            response = host.invoke_async(
                "score", host.http("score", "POST", "/api/score", body), traceparent=traceparent
            ).result(60)
            assert host.answer(response).status == 200
        errors = [log.message for log in host.logs if log.level >= host.protos.RpcLog.Error]
    # NOTE: the exporter's live metrics ping a fixed Azure host (rt.services.visualstudio.com) that
    # this sandbox cannot resolve, on their own timer: that traceback is the network's, not the app's
    errors = [e for e in errors if not e.startswith("Exception occurred while pinging live metrics")]
    assert not [e for e in errors if "Traceback" in e or "AttributeError" in e], errors[:2]


def test_an_envelope_message_through_the_worker_publishes_a_result_per_event(
    app_env: dict[str, str], tmp_path: Path
) -> None:
    """One Service Bus message carrying `{"events": [...]}`, converted once by the worker's binding:
    a result per valid event under its event_id, a rejection naming `<message id>#<index>`."""
    now = datetime.now(UTC).isoformat()  # NOTE: inside the idempotency window (EVENT_MAX_AGE_S)
    items = [event(event_id=f"env-{i}", timestamp=now) for i in range(3)] + [event(event_id="env-x", amount=-1)]
    report = tmp_path / "report.json"
    with running_worker(app_env, report=report) as (host, _):
        assert host.start(REPO).result.status == host.protos.StatusResult.Success
        inputs, metadata = host.batch([("q-env", json.dumps({"events": items}).encode())])
        response = host.invoke("payments", inputs, metadata)
        assert response.result.status == host.protos.StatusResult.Success, response.result.exception.message
    published = {
        (m["queue"], m["message_id"]): json.loads(m["body"]) for m in json.loads(report.read_text())["published"]
    }
    [(rejection_id, rejected)] = [(mid, body) for (queue, mid), body in published.items() if queue == "risk-rejected"]
    assert sorted(mid for queue, mid in published if queue == "risk-completed") == [f"env-{i}" for i in range(3)]
    assert {published[("risk-completed", f"env-{i}")]["delivery_count"] for i in range(3)} == {1}
    assert rejected["message_id"] == "q-env#3" and rejected["error"] == "invalid_event"
    assert rejection_id.startswith("rejected:") and rejection_id.endswith("#3")
