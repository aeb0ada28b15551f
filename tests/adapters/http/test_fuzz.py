"""schemathesis from the app's own OpenAPI document against a real server process (`make fuzz`, bounded).

`make fuzz` sends >= 10,000 generated requests; here a few examples per operation (the
coverage phase's edge cases of every schema, a short fuzzing phase, the stateful chains)
hold the same line on every `make test`: no answer >= 500, none missing, every error JSON.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.fuzz import fuzz
from bench.fuzz_hooks import error_problem
from shared.adapters.http.openapi import document
from tests.server_process import ServerProcess, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server({}, tmp_path_factory.mktemp("fuzzed")) as served:  # NOTE: `make run`'s settings
        yield served


def test_generated_requests_get_no_5xx_no_hang_and_only_json_errors(server: ServerProcess, tmp_path: Path) -> None:
    figures = fuzz(f"http://127.0.0.1:{server.port}", tmp_path, examples=8, seed=16, request_timeout_s=10)
    # NOTE: 1,023 requests with this seed (docs/reliability.md); the floor leaves room for the stateful phase
    assert figures.ok(min_requests=800), figures.summary() + "\n" + server.log_tail()
    assert figures.statuses.get("200", 0) > 100 and figures.statuses.get("422", 0) > 10  # both sides were reached


def test_a_document_that_lies_about_an_answer_fails_the_run(server: ServerProcess, tmp_path: Path) -> None:
    """Mutation: the score's `risk_score` documented as a string; schemathesis must say so."""
    lying = copy.deepcopy(document(256))
    lying["components"]["schemas"]["Scored"]["properties"]["risk_score"] = {"type": "string"}
    (tmp_path / "lying.json").write_text(json.dumps(lying))
    figures = fuzz(
        f"http://127.0.0.1:{server.port}",
        tmp_path / "out",
        examples=5,
        phases="fuzzing",
        document=tmp_path / "lying.json",
        only="score",
    )
    assert figures.failures >= 1 and not figures.ok(), figures.summary()


@pytest.mark.parametrize(
    ("status", "content_type", "body", "path", "problem"),
    [
        (422, "application/json", b'{"error": "invalid_event", "detail": "x"}', "/api/score", None),
        (404, "application/json", b'{"error": "no model"}', "/v2/models/x", None),
        (400, "application/json", b'{"name": "x", "ready": false}', "/v2/models/x/ready", None),
        (200, "text/plain", b"ok", "/api/metrics", None),
        (400, "text/plain", b"Invalid HTTP request received.", "/api/score", "content-type 'text/plain'"),
        (413, "application/json", b"", "/api/score", "a body that is not JSON"),
        (404, "application/json", b"[]", "/api/x", "JSON that is not an object"),
        (400, "application/json", b'{"ready": false}', "/api/score", "an object without a string `error`"),
        (500, "application/json; charset=utf-8", b'{"error": 1}', "/api/score", "an object without a string `error`"),
    ],
)
def test_the_json_error_check(status: int, content_type: str, body: bytes, path: str, problem: str | None) -> None:
    assert error_problem(status, content_type, body, path) == problem
