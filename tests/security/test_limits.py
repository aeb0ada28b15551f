"""Every size cap, on every entry that takes outside input: accepted at the cap, refused one past it.

    MAX_BODY_BYTES       POST /api/score (the ASGI lane), /api/models/{name}/score; declared and streamed
                         bodies; through the Functions adapter as the host hands it
    16 x MAX_BODY_BYTES  POST /api/score/batch, V2 REST infer (JSON and binary), V2 gRPC (max receive)
    1024 bytes           POST /api/models/{name}/activate
    MAX_BATCH_ITEMS      events of a batch; rows of a V2 infer (REST and gRPC)
    MAX_MESSAGE_BYTES    a Service Bus message (the batch function)
    MAX_MODEL_BYTES      the Blob trigger; a model read from the directory or the Blob container; publish-model

Small caps keep the bodies small; the code paths are the ones the defaults take.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import azure.functions as func
import grpc
import numpy as np
import pytest
from azure.functions.blob import InputStream
from starlette.testclient import TestClient

from shared.adapters.functions import FunctionHandlers
from shared.adapters.http.app import create_app
from shared.adapters.oip import grpc_predict_v2_pb2 as pb
from shared.adapters.oip.jobs import grpc_server
from shared.adapters.queue.publisher import MemoryPublisher
from shared.core.holder import ServiceHolder
from shared.errors import ModelInvalid
from shared.models.repository import BlobRepository, DirectoryRepository, ModelRef
from shared.settings import Settings
from tests.adapters.test_function_app import sb_message
from tests.conftest import REPO, closed_port, event
from tests.onnx_models import make_model

BODY = 1024  # MAX_BODY_BYTES here (its least valid value); a batch or a V2 request may carry 16 times that
ITEMS = 4  # MAX_BATCH_ITEMS here
WIDTH = 4  # the tiny model's columns
# A candidate model over MAX_MODEL_BYTES' least valid value (1024): the tiny model, with a long note in its metadata.
CANDIDATE = make_model(bias=1.0, extra={"note": "x" * 2000})


def padded(body: bytes, size: int) -> bytes:
    """The JSON object `body` with blanks after its `{`, `size` bytes long."""
    assert body.startswith(b"{") and len(body) <= size
    return b"{" + b" " * (size - len(body)) + body[1:]


@pytest.fixture
def capped(settings: Settings) -> Settings:
    return replace(settings, max_body_bytes=BODY, max_batch_items=ITEMS, max_message_bytes=1024)


@pytest.fixture
def client(capped: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(ServiceHolder(lambda: capped)), raise_server_exceptions=False) as c:
        yield c


def one_event() -> bytes:
    return json.dumps(event()).encode()


def batch(n: int = 2) -> bytes:
    return json.dumps({"events": [event(event_id=f"e{i}") for i in range(n)]}).encode()


def v2(rows: int = 1) -> bytes:
    data = np.full((rows, WIDTH), 0.5).tolist()
    return json.dumps(
        {"inputs": [{"name": "features", "datatype": "FP32", "shape": [rows, WIDTH], "data": data}]}
    ).encode()


HTTP_CAPS = [
    ("/api/score", one_event, BODY),
    ("/api/models/fraud/score", one_event, BODY),
    ("/api/score/batch", batch, 16 * BODY),
    ("/v2/models/fraud/infer", v2, 16 * BODY),
    ("/v2/models/fraud/versions/1/infer", v2, 16 * BODY),
    ("/api/models/fraud/activate", lambda: b'{"version": "1"}', 1024),
]


@pytest.mark.parametrize(("path", "body", "cap"), HTTP_CAPS, ids=[p for p, _, _ in HTTP_CAPS])
@pytest.mark.parametrize("streamed", [False, True], ids=["declared", "streamed"])
def test_an_http_body_at_its_cap_is_served_and_one_byte_more_is_413(
    client: TestClient, path: str, body: Callable[[], bytes], cap: int, streamed: bool
) -> None:
    """Declared: the Content-Length says so; streamed: chunked, no length, counted as it arrives."""
    headers = {"content-type": "application/json"}
    for size, status in ((cap, 200), (cap + 1, 413)):
        content = padded(body(), size)
        sent = (content[i : i + 1000] for i in range(0, len(content), 1000)) if streamed else content
        r = client.post(path, content=sent, headers=headers)
        assert r.status_code == status, (path, size, r.text[:200])
        if status == 413:  # the /api error shape, or V2's `{"error": "<message>"}`
            error = r.json()["error"]
            assert error == "payload_too_large" if path.startswith("/api") else f"{cap}-byte limit" in error


def test_a_v2_binary_request_at_its_cap_is_served_and_one_byte_more_is_413(client: TestClient) -> None:
    """The binary-data extension: a JSON header, then the raw tensor; the cap is on the whole body."""
    raw = np.full((1, WIDTH), 0.5, dtype=np.float32).tobytes()
    tensor = {"name": "features", "datatype": "FP32", "shape": [1, WIDTH], "parameters": {"binary_data_size": len(raw)}}
    for size, status in ((16 * BODY, 200), (16 * BODY + 1, 413)):
        head = padded(json.dumps({"inputs": [tensor]}).encode(), size - len(raw))
        headers = {"content-type": "application/octet-stream", "inference-header-content-length": str(len(head))}
        r = client.post("/v2/models/fraud/infer", content=head + raw, headers=headers)
        assert r.status_code == status, (size, r.text[:200])


async def test_the_functions_adapter_applies_the_same_cap(capped: Settings) -> None:
    """Under the host: the body arrives whole in the invocation, with or without its length."""
    handlers = FunctionHandlers(ServiceHolder(lambda: capped))
    try:
        for declared in (True, False):
            for size, status in ((BODY, 200), (BODY + 1, 413)):
                body = padded(one_event(), size)
                headers = {"content-type": "application/json"} | ({"content-length": str(size)} if declared else {})
                r = await handlers.http(
                    func.HttpRequest("POST", "http://localhost/api/score", headers=headers, body=body)
                )
                assert r.status_code == status, (declared, size, r.get_body()[:200])
    finally:
        await handlers.aclose()


@pytest.mark.parametrize("path", ["/api/score/batch", "/v2/models/fraud/infer"])
def test_items_at_max_batch_items_are_served_and_one_more_is_refused(client: TestClient, path: str) -> None:
    body = batch if path == "/api/score/batch" else v2
    assert client.post(path, content=body(ITEMS), headers={"content-type": "application/json"}).status_code == 200
    r = client.post(path, content=body(ITEMS + 1), headers={"content-type": "application/json"})
    assert r.status_code == (422 if path == "/api/score/batch" else 400), r.text[:200]
    assert (
        r.json()["error"] == "too_many_items" if path == "/api/score/batch" else f"1..{ITEMS} rows" in r.json()["error"]
    )


# -- V2 gRPC ------------------------------------------------------------------------------------------


@pytest.fixture
async def grpc_channel(capped: Settings) -> AsyncIterator[grpc.aio.Channel]:
    port = closed_port()
    holder = ServiceHolder(lambda: replace(capped, grpc_port=port), on_built=[grpc_server("127.0.0.1")])
    await holder.get()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        await asyncio.wait_for(channel.channel_ready(), 20)
        yield channel
    finally:
        await channel.close()
        await holder.aclose()


def infer_request(rows: int, size: int | None = None) -> pb.ModelInferRequest:
    """A ModelInfer request of `rows` rows (raw contents), its `id` padded to `size` bytes serialised."""
    tensor = pb.ModelInferRequest.InferInputTensor(name="features", datatype="FP32", shape=[rows, WIDTH])
    raw = np.full((rows, WIDTH), 0.5, dtype=np.float32).tobytes()
    request = pb.ModelInferRequest(model_name="fraud", inputs=[tensor], raw_input_contents=[raw])
    if size is not None:
        for pad in range(size):
            request.id = "x" * pad
            if request.ByteSize() >= size:
                break
        assert request.ByteSize() == size
    return request


async def model_infer(channel: grpc.aio.Channel, request: pb.ModelInferRequest) -> grpc.StatusCode:
    call = channel.unary_unary(
        "/inference.GRPCInferenceService/ModelInfer",
        request_serializer=pb.ModelInferRequest.SerializeToString,
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    try:
        await call(request, timeout=20)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_a_grpc_message_at_its_cap_is_served_and_one_byte_more_is_refused(grpc_channel: grpc.aio.Channel) -> None:
    assert await model_infer(grpc_channel, infer_request(1, 16 * BODY)) == grpc.StatusCode.OK
    assert await model_infer(grpc_channel, infer_request(1, 16 * BODY + 1)) == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_grpc_rows_at_max_batch_items_are_served_and_one_more_is_refused(grpc_channel: grpc.aio.Channel) -> None:
    assert await model_infer(grpc_channel, infer_request(ITEMS)) == grpc.StatusCode.OK
    assert await model_infer(grpc_channel, infer_request(ITEMS + 1)) == grpc.StatusCode.INVALID_ARGUMENT


# -- the queue ----------------------------------------------------------------------------------------


async def test_a_message_at_max_message_bytes_is_scored_and_one_byte_more_is_rejected(capped: Settings) -> None:
    publisher = MemoryPublisher()
    handlers = FunctionHandlers(ServiceHolder(lambda: capped), publisher=publisher)
    try:
        at, over = padded(one_event(), 1024), padded(json.dumps(event(event_id="evt-2")).encode(), 1025)
        await handlers.payments([sb_message(at, "m-at"), sb_message(over, "m-over")])
        sent = {m.message_id: (m.queue, json.loads(m.body)) for m in publisher.sent}
        assert sent["evt-1"][0] == "risk-completed"
        [(queue, record)] = [(q, r) for q, r in sent.values() if r.get("message_id") == "m-over"]
        assert queue == "risk-rejected" and record["error"] == "payload_too_large" and record["body_bytes"] == 1025
    finally:
        await handlers.aclose()


# -- models -------------------------------------------------------------------------------------------


def model_caps() -> list[tuple[int, bool]]:
    """(MAX_MODEL_BYTES, accepted) for the candidate model: its own size, then one byte less (size = cap + 1)."""
    size = len(CANDIDATE)
    return [(size, True), (size - 1, False)]


@pytest.mark.parametrize(("cap", "accepted"), model_caps(), ids=["at-cap", "cap+1"])
async def test_the_blob_trigger_takes_a_model_at_its_cap_and_refuses_one_byte_more(
    settings: Settings, cap: int, accepted: bool, caplog: pytest.LogCaptureFixture
) -> None:
    data = CANDIDATE
    handlers = FunctionHandlers(ServiceHolder(lambda: replace(settings, max_model_bytes=cap)))
    try:
        await handlers.model_blob(InputStream(data=data, name="models/fraud/2/model.onnx", length=len(data)))
        assert (await handlers.holder.get()).active("fraud").version == ("2" if accepted else "1")
        assert ("exceeds MAX_MODEL_BYTES" in caplog.text) is not accepted
    finally:
        await handlers.aclose()


@pytest.mark.parametrize(("cap", "accepted"), model_caps(), ids=["at-cap", "cap+1"])
def test_the_directory_source_reads_a_model_at_its_cap_and_refuses_one_byte_more(
    models_dir: Path, cap: int, accepted: bool
) -> None:
    (models_dir / "fraud" / "2").mkdir()
    (models_dir / "fraud" / "2" / "model.onnx").write_bytes(CANDIDATE)
    source = DirectoryRepository(models_dir, max_bytes=cap)
    if accepted:
        assert source.read(ModelRef("fraud", "2")) == CANDIDATE
    else:
        with pytest.raises(ModelInvalid, match="exceeds MAX_MODEL_BYTES"):
            source.read(ModelRef("fraud", "2"))


@pytest.mark.parametrize(("cap", "accepted"), model_caps(), ids=["at-cap", "cap+1"])
def test_the_blob_source_reads_a_model_at_its_cap_and_refuses_one_byte_more(
    azurite_connection: str, cap: int, accepted: bool
) -> None:
    from azure.storage.blob import BlobServiceClient

    name = f"models-cap-{os.getpid()}-{cap}"
    container = BlobServiceClient.from_connection_string(azurite_connection).get_container_client(name)
    container.create_container()
    try:
        container.upload_blob("fraud/2/model.onnx", CANDIDATE)
        source = BlobRepository.connect(
            container=name, connection_string=azurite_connection, blob_uri=None, max_bytes=cap
        )
        if accepted:
            assert source.read(ModelRef("fraud", "2")) == CANDIDATE
        else:
            with pytest.raises(ModelInvalid, match="exceeds MAX_MODEL_BYTES"):
                source.read(ModelRef("fraud", "2"))
    finally:
        container.delete_container()


@pytest.mark.parametrize(("cap", "accepted"), model_caps(), ids=["at-cap", "cap+1"])
def test_publish_model_refuses_a_file_over_the_cap_before_it_lands(
    models_dir: Path, tmp_path: Path, cap: int, accepted: bool
) -> None:
    """Every replica would refuse it: the command says so first, and publishes nothing."""
    candidate = tmp_path / "candidate.onnx"
    candidate.write_bytes(CANDIDATE)
    env = {**os.environ, "PYTHONPATH": str(REPO), "MODELS_DIR": str(models_dir), "MAX_MODEL_BYTES": str(cap)}
    env |= {"ModelStorage": "", "ModelStorage__blobServiceUri": ""}
    command = [sys.executable, "scripts/publish_model.py", "fraud", "2", str(candidate)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode == 0) is accepted, done.stderr
    assert (models_dir / "fraud" / "2" / "model.onnx").exists() is accepted
    assert accepted or "exceeds MAX_MODEL_BYTES" in done.stderr
