"""Standard V2 clients, unchanged, against the real app (`python -m shared` in a subprocess).

tritonclient's HTTP client (binary-data extension by default, JSON on request) and its gRPC
client (`raw_input_contents`) call the same process, which also serves `/api/score`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import closed_port, event
from tests.onnx_models import make_model
from tests.server_process import ServerProcess, running_server

pytestmark = pytest.mark.timeout(90)
WIDTH = 4


class Running:
    def __init__(self, server: ServerProcess, grpc_port: int) -> None:
        self.server = server
        self.http = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        self.grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root = tmp_path_factory.mktemp("oip")
    for version, bias in (("1", 0.0), ("2", 1.0)):
        (root / "models" / "fraud" / version).mkdir(parents=True)
        (root / "models" / "fraud" / version / "model.onnx").write_bytes(make_model(bias=bias))
    grpc_port = closed_port()
    env = {"MODELS_DIR": str(root / "models"), "FEATURES_FILE": "", "GRPC_PORT": str(grpc_port), "LOG_LEVEL": "INFO"}
    with running_server(env, root) as server:
        running = Running(server, grpc_port)
        _wait_grpc(running, server)
        yield running
        running.grpc.close()
        running.http.close()


def _wait_grpc(running: Running, server: ServerProcess, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if running.grpc.is_server_live(client_timeout=1):
                return
        except InferenceServerException:
            time.sleep(0.1)
    raise TimeoutError(f"the gRPC server did not come up:\n{server.log_tail()}")


def rows(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, WIDTH), dtype=np.float32)


def expected(matrix: np.ndarray, bias: float) -> np.ndarray:
    """The tiny model: sigmoid(x · linspace(0.1, 0.5) + bias)."""
    z = matrix.astype(np.float64) @ np.linspace(0.1, 0.5, WIDTH) + bias
    return 1 / (1 + np.exp(-z))


def http_input(matrix: np.ndarray, datatype: str = "FP32", binary: bool = True) -> httpclient.InferInput:
    tensor = httpclient.InferInput("features", list(matrix.shape), datatype)
    tensor.set_data_from_numpy(matrix, binary_data=binary)
    return tensor


def grpc_input(matrix: np.ndarray, datatype: str = "FP32") -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("features", list(matrix.shape), datatype)
    tensor.set_data_from_numpy(matrix)
    return tensor


def test_health_and_server_metadata(app: Running) -> None:
    assert app.http.is_server_live() and app.http.is_server_ready()
    assert app.grpc.is_server_live() and app.grpc.is_server_ready()
    assert app.http.get_server_metadata()["name"] == "fraud-scoring"
    assert app.grpc.get_server_metadata().name == "fraud-scoring"


def test_model_metadata_over_both(app: Running) -> None:
    meta = app.http.get_model_metadata("fraud")
    assert (meta["name"], meta["versions"], meta["platform"]) == ("fraud", ["1", "2"], "onnx_onnxv1")
    assert meta["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, WIDTH]}]
    assert meta["outputs"] == [{"name": "score", "datatype": "FP32", "shape": [-1, 1]}]
    assert meta["parameters"]["features"][0] == "log_amount"
    grpc_meta = app.grpc.get_model_metadata("fraud", model_version="2", as_json=True)
    assert grpc_meta["inputs"] == [{"name": "features", "datatype": "FP32", "shape": ["-1", str(WIDTH)]}]
    assert app.http.is_model_ready("fraud", "2") and app.grpc.is_model_ready("fraud", "2")
    assert not app.http.is_model_ready("fraud", "9") and not app.grpc.is_model_ready("nope")
    # a scoring call names the live version or none: version 1 is loaded, not live (issue 54)
    assert not app.http.is_model_ready("fraud", "1") and not app.grpc.is_model_ready("fraud", "1")


@pytest.mark.parametrize(("version", "bias"), [("2", 1.0), ("", 1.0)])
def test_a_versioned_infer_answers_from_that_version(app: Running, version: str, bias: float) -> None:
    matrix = rows(1, seed=int(version or 0))
    by_http = app.http.infer("fraud", [http_input(matrix)], model_version=version)
    by_grpc = app.grpc.infer("fraud", [grpc_input(matrix)], model_version=version)
    for result in (by_http, by_grpc):
        np.testing.assert_allclose(result.as_numpy("score").reshape(-1), expected(matrix, bias), rtol=1e-5)
    assert by_http.get_response()["model_version"] == by_grpc.get_response().model_version == (version or "2")


def test_a_batched_infer_goes_through_the_batcher_row_by_row(app: Running) -> None:
    before = _requests(app.server)
    matrix = rows(16, seed=7)
    by_http = app.http.infer("fraud", [http_input(matrix, binary=False)], request_id="req-16",
                             outputs=[httpclient.InferRequestedOutput("score", binary_data=False)])  # fmt: skip
    assert by_http.get_response()["id"] == "req-16"
    by_grpc = app.grpc.infer("fraud", [grpc_input(matrix)], request_id="req-16g")
    assert by_grpc.get_response().id == "req-16g"
    for result in (by_http, by_grpc):
        assert result.as_numpy("score").shape == (16, 1)
        np.testing.assert_allclose(result.as_numpy("score").reshape(-1), expected(matrix, 1.0), rtol=1e-5)
    requests, batches = (a - b for a, b in zip(_requests(app.server), before, strict=True))
    # NOTE: each row of the first call is one request of the micro-batcher (BATCH_MAX_SIZE 8: at
    # least 2 batches); the second call's rows all come from the process's cache, shared with /api/score.
    assert requests == 16 and 2 <= batches < 16


def _requests(server: ServerProcess) -> tuple[int, int]:
    reply = server.get("/api/models")
    assert reply is not None
    [fraud] = reply.json()["models"]
    version = next(v for v in fraud["loaded"] if v["version"] == "2")
    return int(version["requests"]), int(version["batches"])


def test_v2_and_api_score_share_the_model_and_its_cache(app: Running) -> None:
    body = orjson.dumps(event(event_id="shared-1"))
    request = (
        f"POST /api/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    reply = app.server.send(request)
    assert reply is not None and reply.status == 200 and reply.json()["model_version"] == "2"


@pytest.mark.parametrize(
    ("shape", "message"),
    [((3, WIDTH + 1), "has shape [3, 5]; expected [rows, 4]"), ((WIDTH,), "has shape [4]")],
)
def test_a_bad_shape_is_a_400_naming_the_expected_shape(app: Running, shape: tuple[int, ...], message: str) -> None:
    matrix = np.zeros(shape, dtype=np.float32)
    with pytest.raises(InferenceServerException, match=re.escape(message)) as by_http:
        app.http.infer("fraud", [http_input(matrix)])
    assert by_http.value.status() == "400"
    with pytest.raises(InferenceServerException, match=re.escape(message)) as by_grpc:
        app.grpc.infer("fraud", [grpc_input(matrix)])
    assert by_grpc.value.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.parametrize("datatype", ["FP64", "INT64", "INT32", "BOOL", "BYTES"])
def test_a_wrong_datatype_is_a_400(app: Running, datatype: str) -> None:
    matrix = np.ones((2, WIDTH), dtype=np.float32)
    typed = matrix.astype({"FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "BOOL": np.bool_,
                           "BYTES": np.object_}[datatype])  # fmt: skip
    if datatype == "BYTES":
        typed = np.array([[b"1"] * WIDTH] * 2, dtype=np.object_)
    message = f"input 'features' is {datatype}; the model takes FP32"
    with pytest.raises(InferenceServerException, match=re.escape(message)) as by_http:
        app.http.infer("fraud", [http_input(typed, datatype)])
    assert by_http.value.status() == "400"
    with pytest.raises(InferenceServerException, match=re.escape(message)) as by_grpc:
        app.grpc.infer("fraud", [grpc_input(typed, datatype)])
    assert by_grpc.value.status() == "StatusCode.INVALID_ARGUMENT"


@pytest.mark.parametrize(
    ("model", "version", "message"),
    [
        ("nope", "", "no model named 'nope'"),
        ("fraud", "9", "fraud/9 is not the live version of 'fraud' (2)"),
        ("fraud", "1", "fraud/1 is not the live version of 'fraud' (2)"),  # loaded, older: not the caller's pick
    ],
)
def test_an_unknown_model_or_version_is_a_404(app: Running, model: str, version: str, message: str) -> None:
    matrix = rows(1)
    with pytest.raises(InferenceServerException, match=re.escape(message)) as by_http:
        app.http.infer(model, [http_input(matrix)], model_version=version)
    assert by_http.value.status() == "404"
    with pytest.raises(InferenceServerException, match=re.escape(message)) as by_grpc:
        app.grpc.infer(model, [grpc_input(matrix)], model_version=version)
    assert by_grpc.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match=re.escape(message)):
        app.grpc.get_model_metadata(model, model_version=version)


def test_v2_errors_are_error_messages_and_api_errors_keep_their_shape(app: Running) -> None:
    reply = app.server.get("/v2/models/nope")
    assert reply is not None and (reply.status, reply.json()) == (404, {"error": "no model named 'nope'"})
    body = b"{}"
    raw = (f"POST /api/models/nope/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body  # fmt: skip
    reply = app.server.send(raw)
    assert reply is not None and reply.status in (404, 422) and set(reply.json()) == {"error", "detail"}


def test_the_grpc_server_is_a_background_job_of_the_core(app: Running, tmp_path: Path) -> None:
    assert "V2 gRPC serving on 127.0.0.1" in app.server.log.read_text()
