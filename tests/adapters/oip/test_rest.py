"""V2 REST through the ASGI app: the JSON form, the binary-data extension, and its errors."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from tests.onnx_models import make_model

INFER = "/v2/models/fraud/infer"


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as c:
        yield c


def request(rows: list[list[float]], **extra: object) -> dict[str, object]:
    tensor = {"name": "features", "datatype": "FP32", "shape": [len(rows), len(rows[0])], "data": rows}
    return {"inputs": [tensor], **extra}


def test_json_infer_echoes_the_id_and_answers_json(client: TestClient) -> None:
    r = client.post(INFER, json=request([[0.1, 0.2, 0.3, 0.4], [1, 1, 1, 1]], id="abc"))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert (body["id"], body["model_name"], body["model_version"]) == ("abc", "fraud", "1")
    [out] = body["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("score", "FP32", [2, 1]) and len(out["data"]) == 2


def test_the_binary_data_extension_both_ways(client: TestClient) -> None:
    matrix = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    head = json.dumps({"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 4],
                                   "parameters": {"binary_data_size": 16}}],
                       "outputs": [{"name": "score", "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
    r = client.post(
        INFER,
        content=head + matrix.tobytes(),
        headers={"Inference-Header-Content-Length": str(len(head)), "content-type": "application/octet-stream"},
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    split = int(r.headers["inference-header-content-length"])
    [out] = json.loads(r.content[:split])["outputs"]
    assert out["parameters"] == {"binary_data_size": 4}
    (score,) = struct.unpack("<f", r.content[split:])
    as_json = client.post(INFER, json=request(matrix.tolist())).json()["outputs"][0]["data"][0]
    assert score == pytest.approx(as_json)


@pytest.mark.parametrize(
    ("content", "headers", "status", "message"),
    [
        (b"{nope", {}, 400, "not valid JSON"),
        (b"[]", {}, 400, "with an `inputs` list"),
        (json.dumps(request([[1, 2, 3, 4]], outputs=[{"name": "proba"}])).encode(), {}, 400, "unknown output 'proba'"),
        (json.dumps(request([[1, 2, 3, 1e39]])).encode(), {}, 400, "FP32 data out of range"),
        (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}).encode(),
         {}, 400, "unknown input 'x': model 'fraud' takes 'features'"),
        (json.dumps(request([[1, 2, 3, 4]] * 257)).encode(), {}, 400, "with 1..256 rows"),
        (json.dumps(request([[1, 2, 3, 4]])).encode(), {"Inference-Header-Content-Length": "99999"}, 400,
         "does not fit"),
        (json.dumps(request([[1, 2, 3, 4]])).encode() + b"xx", {"Inference-Header-Content-Length": "0"}, 400,
         "not valid JSON"),
    ],
)  # fmt: skip
def test_bad_requests_are_4xx_with_an_error_message(
    client: TestClient, content: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    r = client.post(INFER, content=content, headers={"content-type": "application/json", **headers})
    assert r.status_code == status and list(r.json()) == ["error"] and message in r.json()["error"]


def test_a_value_that_is_not_finite_is_refused(client: TestClient) -> None:
    head = json.dumps({"inputs": [{"name": "features", "datatype": "FP32", "shape": [1, 4],
                                   "parameters": {"binary_data_size": 16}}]}).encode()  # fmt: skip
    body = head + np.array([1, 2, 3, np.nan], dtype=np.float32).tobytes()
    r = client.post(INFER, content=body, headers={"Inference-Header-Content-Length": str(len(head))})
    assert r.status_code == 400 and "not finite" in r.json()["error"]


def test_trailing_binary_bytes_are_refused(client: TestClient) -> None:
    head = json.dumps(request([[1, 2, 3, 4]])).encode()
    r = client.post(INFER, content=head + b"\0\0", headers={"Inference-Header-Content-Length": str(len(head))})
    assert r.status_code == 400 and "2 bytes after the last binary input" in r.json()["error"]


def test_health_ready_and_unknown_paths(client: TestClient) -> None:
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/v2/health/other").status_code == 404
    assert client.get("/v2/models/fraud/versions/1/ready").status_code == 200
    assert client.get("/v2/models/fraud/versions/2/ready").status_code == 400
    assert client.get("/v2/").json()["name"] == "fraud-scoring"  # the trailing slash the host may send


def test_an_ensemble_through_v2(settings: Settings, models_dir: Path) -> None:
    (models_dir / "twin" / "1").mkdir(parents=True)
    (models_dir / "twin" / "1" / "model.onnx").write_bytes(make_model(bias=1.0))
    (models_dir / "pair" / "1").mkdir(parents=True)
    (models_dir / "pair" / "1" / "ensemble.json").write_text(
        json.dumps({"members": [{"name": "fraud"}, {"name": "twin"}], "method": "weighted_average", "weights": [1, 1]})
    )
    with TestClient(create_app(ServiceHolder(lambda: settings))) as client:
        meta = client.get("/v2/models/pair").json()
        assert (meta["platform"], meta["versions"], meta["inputs"][0]["shape"]) == ("ensemble", ["1"], [-1, 4])
        rows = [[0.1, 0.2, 0.3, 0.4]]
        pair = client.post("/v2/models/pair/versions/1/infer", json=request(rows)).json()["outputs"][0]["data"][0]
        parts = [client.post(f"/v2/models/{m}/infer", json=request(rows)).json()["outputs"][0]["data"][0]
                 for m in ("fraud", "twin")]  # fmt: skip
        assert pair == pytest.approx(sum(parts) / 2, rel=1e-6)
