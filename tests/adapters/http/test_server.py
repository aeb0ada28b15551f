"""The local server (`python -m shared`: uvicorn) at its edges: stalled clients, malformed framing.

One server per module, with a limit small enough to overrun in a test: 1 s to send the
headers and the body (BODY_TIMEOUT_MS). Every socket is closed by the test that opened it,
and every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import orjson
import pytest

import shared.adapters.http.server
from tests.conftest import event
from tests.onnx_models import make_model
from tests.server_process import ServerProcess, read_reply, running_server

STALLED = 40  # stalled connections held open at once
TIMEOUT_S = 1.0  # BODY_TIMEOUT_MS: the headers' deadline and the body's
LIVE_WITHIN_S = 10.0  # a bound on every wait: uvicorn holds every connection, so liveness answers at once

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("server")
    (root / "models" / "fraud" / "1").mkdir(parents=True)
    (root / "models" / "fraud" / "1" / "model.onnx").write_bytes(make_model())
    env = {
        "MODELS_DIR": str(root / "models"),
        "FEATURES_FILE": "",
        "BODY_TIMEOUT_MS": str(int(TIMEOUT_S * 1000)),
        "LOG_LEVEL": "WARNING",
    }
    with running_server(env, root) as running:
        yield running


@pytest.fixture
def live(server: ServerProcess) -> ServerProcess:
    """The server, answering liveness before the test begins (no test inherits another's flood)."""
    deadline = time.monotonic() + LIVE_WITHIN_S
    while time.monotonic() < deadline:
        reply = server.get("/api/health/live", timeout_s=LIVE_WITHIN_S)
        if reply is not None and reply.status == 200:
            return server
    raise AssertionError(f"the server is not live:\n{server.log_tail()}")


def post(path: str, body: bytes, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def assert_live_within(server: ServerProcess, seconds: float) -> float:
    started = time.monotonic()
    try:
        reply = server.get("/api/health/live", timeout_s=seconds)
    except TimeoutError:
        raise AssertionError(f"liveness did not answer within {seconds} s:\n{server.log_tail()}") from None
    assert reply is not None and reply.status == 200
    return time.monotonic() - started


def test_stalled_body_flood_leaves_liveness_answering(live: ServerProcess) -> None:
    """Defect 8: a flood of stalled bodies froze the server; now liveness answers and each ends in a JSON 408."""
    with ExitStack() as stack:
        stalled = [stack.enter_context(live.connect()) for _ in range(STALLED)]
        for sock in stalled:
            sock.sendall(post("/api/score", b"{", "Content-Length: 100"))

        assert_live_within(live, LIVE_WITHIN_S)

        deadline = time.monotonic() + LIVE_WITHIN_S
        for sock in stalled:
            reply = read_reply(sock, max(deadline - time.monotonic(), 0.1))
            assert reply is not None and reply.status == 408
            assert reply.json()["error"] == "body_timeout" and reply.json()["detail"]


def test_slowloris_headers_do_not_block_liveness_past_the_header_timeout(live: ServerProcess) -> None:
    """Defect 8: connections that never finish (or never start) their headers are closed on BODY_TIMEOUT_MS."""
    with ExitStack() as stack:
        slow = [stack.enter_context(live.connect()) for _ in range(STALLED)]
        for sock in slow[::2]:
            sock.sendall(b"GET /api/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        # NOTE: the other half send nothing at all: the same deadline closes those

        assert_live_within(live, LIVE_WITHIN_S)

        deadline = time.monotonic() + LIVE_WITHIN_S
        for sock in slow:
            reply = read_reply(sock, max(deadline - time.monotonic(), 0.1))
            assert reply is None or reply.status == 408  # closed by the server, never answered by the app


@pytest.mark.parametrize(
    "chunks",
    [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}\r\nnot-a-size\r\n\r\n"],
    ids=["bad-first-size", "bad-later-size"],
)
def test_malformed_chunked_body_is_the_documented_400(live: ServerProcess, chunks: bytes) -> None:
    """Defect 9a: a body the server cannot parse was a 500; uvicorn answers a chunk size httptools
    cannot parse itself (documented in shared/adapters/http/server.py)."""
    reply = live.send(post("/api/score", chunks, "Transfer-Encoding: chunked"))
    assert reply is not None and reply.status == 400
    assert reply.body.decode() in (shared.adapters.http.server.__doc__ or "")


def test_trailing_slash_is_served_not_redirected(live: ServerProcess) -> None:
    """Defect 9b: `POST /api/score/` was a 307 to a Location built from the client's Host header."""
    body = orjson.dumps(event())
    raw = post("/api/score/", body, f"Content-Length: {len(body)}").replace(b"127.0.0.1", b"evil.example", 1)
    reply = live.send(raw)
    assert reply is not None and reply.status == 200 and "location" not in reply.headers
    assert reply.json()["event_id"] == "evt-1"


def test_a_digit_that_is_not_ascii_in_a_length_header_is_a_400(live: ServerProcess) -> None:
    """Found while fuzzing (schemathesis sends ASCII headers only): "²" (latin-1 0xB2) passes str.isdigit()
    and breaks int(); that was a 500."""
    body = b'{"inputs": []}'
    header = b"Inference-Header-Content-Length: \xb2"
    raw = post("/v2/models/fraud/infer", body, f"Content-Length: {len(body)}").replace(
        b"\r\n\r\n", b"\r\n" + header + b"\r\n\r\n", 1
    )
    reply = live.send(raw)
    assert reply is not None and reply.status == 400 and "does not fit" in reply.json()["error"]


UNPARSABLE = {
    "bad-request-line": b"NOT HTTP\r\n\r\n",
    "bad-header-line": b"GET /api/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon\r\n\r\n",
    "two-content-lengths": post("/api/score", b"{}", "Content-Length: 2", "Content-Length: 3"),
    "uri-too-long": b"GET /api/health/live?" + b"q" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
}


@pytest.mark.parametrize("raw", UNPARSABLE.values(), ids=UNPARSABLE.keys())
def test_framing_the_server_cannot_parse_gets_its_documented_400(live: ServerProcess, raw: bytes) -> None:
    """Defect 9c: these never reach the app, so they cannot be JSON; shared/adapters/http/server.py says what they are."""
    reply = live.send(raw)
    assert reply is None or (reply.status == 400 and reply.body.decode() in (shared.adapters.http.server.__doc__ or ""))
    assert_live_within(live, LIVE_WITHIN_S)


def test_many_header_fields_are_served_as_documented(live: ServerProcess) -> None:
    """uvicorn sets no limit on the number of header fields (shared/adapters/http/server.py says so)."""
    raw = b"GET /api/health/live HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(120)) + b"\r\n"
    reply = live.send(raw)
    assert reply is not None and reply.status == 200
    assert "no limit on the number of header fields" in (shared.adapters.http.server.__doc__ or "")


def test_workers_are_processes_that_each_serve(tmp_path: Path) -> None:
    """WORKERS=2: two processes, each with its own warm service, both answering."""
    (tmp_path / "models" / "fraud" / "1").mkdir(parents=True)
    (tmp_path / "models" / "fraud" / "1" / "model.onnx").write_bytes(make_model())
    env = {"MODELS_DIR": str(tmp_path / "models"), "FEATURES_FILE": "", "WORKERS": "2"}
    with running_server(env, tmp_path) as server:
        workers = children(server.process.pid)
        assert len(workers) >= 2, f"expected 2 worker processes, found {workers}"
        for i in range(20):
            body = orjson.dumps(event(event_id=f"evt-{i}"))
            reply = server.send(post("/api/score", body, f"Content-Length: {len(body)}"))
            assert reply is not None and reply.status == 200


def children(pid: int) -> list[int]:
    """Every descendant process of `pid` (Linux /proc)."""
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        for task in Path(f"/proc/{current}/task").iterdir():
            kids = [int(k) for k in (task / "children").read_text().split()]
            found.extend(kids)
            pending.extend(kids)
    return found
