"""HTTP streams (HttpV2) through the real worker runtime: bench/httpv2_app's `score`, forwarded by the
stand-in host as the Functions host forwards it (tests/worker/host.py `Forwarder`), answers what
function_app.py's classic `score` answers for the same bodies; and the forwarder refuses an
address it cannot forward to.

Needs the extension in .venv-worker (`.venv-worker/bin/pip install -r requirements-worker-httpv2.txt`);
skipped, with that line as the reason, where it is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import event
from tests.worker import rpc
from tests.worker.host import REPO, Forwarder, Host, running_worker

HTTPV2_APP = REPO / "bench" / "httpv2_app"
EXTENSION = "lib/python3*/site-packages/azurefunctions/extensions/http/fastapi/__init__.py"

needs_runtime = pytest.mark.skipif(
    not rpc.worker_python().exists() and not os.environ.get("CI"),
    reason="no conformance runtime: `make worker-venvs` (make test builds it)",
)
needs_extension = pytest.mark.skipif(
    not any(rpc.WORKER_VENV.glob(EXTENSION)),
    reason="HttpV2 extension not in .venv-worker: `.venv-worker/bin/pip install -r requirements-worker-httpv2.txt`",
)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    models = tmp_path_factory.mktemp("httpv2") / "models"
    shutil.copytree(REPO / "models", models)
    return models


def ready(app_dir: Path, models: Path) -> Iterator[Host]:
    env = {"MODELS_DIR": str(models), "AzureWebJobsScriptRoot": str(app_dir), "FUNCTIONS_WORKER_RUNTIME": "python"}
    with running_worker(env) as (host, _):
        init = host.start(app_dir)
        assert init.result.status == host.protos.StatusResult.Success, init.result.exception.message
        for _ in range(300):  # NOTE: the warm-up loads the models right after indexing
            if host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status == 200:
                break
            time.sleep(0.05)
        yield host


@pytest.fixture(scope="module")
def classic(models: Path) -> Iterator[Host]:
    yield from ready(REPO, models)


@pytest.fixture(scope="module")
def streams(models: Path) -> Iterator[Host]:
    yield from ready(HTTPV2_APP, models)


def scored(host: Host, body: bytes) -> tuple[int, dict[str, Any]]:
    """The answer to one `POST /api/score`, less its timings (they differ run to run) and with its
    `source` read as "scored": the two hosts share the test's Redis, so the second door may find
    what the first one cached (a write-behind, so either tier can answer); which tier answered is
    the cache's state, not the door's."""
    answer = host.call("score", "POST", "/api/score", body)  # through the worker's server where it has one
    answer_body = answer.json()
    answer_body.pop("timings_ms", None)
    if "source" in answer_body:
        assert answer_body["source"] in {"model", "cache"}, answer_body
        answer_body["source"] = "scored"
    return answer.status, answer_body


@needs_extension
def test_the_httpv2_score_answers_what_the_classic_score_answers(classic: Host, streams: Host) -> None:
    assert classic.forwarder is None and streams.forwarder is not None  # the worker advertised HttpUri
    bodies = [
        json.dumps(event(event_id="hv2-1")).encode(),
        json.dumps(event(event_id="hv2-2", amount=9_800.0, country="US", channel="pos")).encode(),
        b'{"not": "an event"}',
    ]
    answers = [(scored(classic, body), scored(streams, body)) for body in bodies]
    for (classic_answer, streams_answer), body in zip(answers, bodies, strict=True):
        assert streams_answer == classic_answer, body
    assert [status for (status, _), _ in answers] == [200, 200, 422]  # an invalid event: 422, on both doors
    assert answers[0][1][1]["decision"] in {"approve", "review", "decline"}


@needs_extension
def test_the_invocation_request_carries_no_body_only_the_forwarded_request_does(streams: Host) -> None:
    """The InvocationRequest's RpcHttp is empty (the host's ToRpcHttp when proxying): the event can
    only have reached the app through the worker's server."""
    forwarded = streams.forward_async("score", "POST", "/api/score", json.dumps(event(event_id="hv2-3")).encode())
    result = forwarded.result(30)
    assert result.result.status == streams.protos.StatusResult.Success
    assert not result.response.HasField("return_value")  # the answer went over HTTP, not the stream
    assert result.answer.json()["event_id"] == "hv2-3"


@pytest.mark.parametrize(
    "uri", ["https://127.0.0.1:8443", "http://127.0.0.1", "127.0.0.1:8080", "ftp://127.0.0.1:21", ""]
)
def test_the_forwarder_refuses_an_address_it_cannot_forward_to(uri: str) -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        Forwarder(uri)


@needs_runtime
def test_forwarding_to_a_classic_worker_is_refused(classic: Host) -> None:
    with pytest.raises(RuntimeError, match="HttpUri"):
        classic.forward_async("score", "POST", "/api/score", b"{}")
