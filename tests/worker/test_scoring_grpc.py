"""Payment events over gRPC (`fraud.scoring.v1.Scoring`) from the app as the Python worker runs it:
`azure_functions_runtime` (3.13) indexes, loads and invokes function_app.py (tests/worker/host.py);
building the service starts the gRPC server on GRPC_PORT, on every interface, keyed (GRPC_KEYS).

Differential: for the same generated bodies (valid events, JSON that is no event, corrupted events),
`Score`, `ScoreStream` and the worker's `POST /api/score` give the same answers (decision, score,
model, version, reasons... everything but timings and whether the cache answered) and the same error
codes. Hostile clients: no key, a client that does not read, half-closed streams, 10,000 messages on
one stream, bad messages interleaved. Under each 3.11 bundle (protobuf 4.25 and 5.29), the event
stubs load and both methods answer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from shared.adapters.scoring_grpc import scoring_pb2 as pb
from shared.adapters.scoring_grpc.client import score_stream
from tests.adapters.scoring_grpc.streams import answers_of, body, decided, message, raw_score, raw_stream, write_all
from tests.conftest import closed_port
from tests.strategies import corrupted, event_dict, events, json_bytes
from tests.worker import rpc
from tests.worker.host import REPO, Host, running_worker
from tests.worker.test_bundled import BUNDLE_2024, BUNDLE_2026, EACH_BUNDLE, NO_RUNTIME_VERSION, Bundle

pytestmark = pytest.mark.skipif(
    not rpc.worker_python().exists() and not os.environ.get("CI"),
    reason="no conformance runtime: `make worker-venvs` (make test builds it)",
)

KEY = "worker-grpc-key-0123456789"
KEYED = (("x-api-key", KEY),)
IN_FLIGHT = 32  # GRPC_STREAM_MAX_IN_FLIGHT under the worker: the read of a half-closed stream ends before its answers


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Host, int]]:
    """The worker, its service built (ready) and its gRPC port answering a keyed call."""
    models = tmp_path_factory.mktemp("worker-grpc") / "models"
    shutil.copytree(REPO / "models", models)
    port = closed_port()
    env = {
        "MODELS_DIR": str(models),
        "AzureWebJobsScriptRoot": str(REPO),
        "FUNCTIONS_WORKER_RUNTIME": "python",
        "GRPC_PORT": str(port),
        "GRPC_KEYS": KEY,
        "GRPC_STREAM_MAX_IN_FLIGHT": str(IN_FLIGHT),
    }
    with running_worker(env) as (host, _):
        init = host.start(REPO)
        assert init.result.status == host.protos.StatusResult.Success, init.result.exception.message
        for _ in range(300):
            if host.call("health", "GET", "/api/health/ready", params={"probe": "ready"}).status == 200:
                break
            time.sleep(0.05)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        yield host, port


def http_score(host: Host, data: bytes) -> tuple[int, dict[str, Any]]:
    answer = host.call("score", "POST", "/api/score", data)
    return answer.status, answer.json()


def admitted(host: Host) -> int:
    return int(host.call("stats", "GET", "/api/stats").json()["admission"]["admitted"])


# -- the same answers as POST /api/score ------------------------------------------------------

valid = events().map(lambda e: json.dumps(event_dict(e)).encode())
bodies = st.one_of(valid, valid, valid.flatmap(corrupted), json_bytes())


@given(st.lists(bodies, min_size=1, max_size=6))
@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_score_and_score_stream_answer_what_post_api_score_answers(served: tuple[Host, int], sent: list[bytes]) -> None:
    host, port = served
    over_http = [http_score(host, data) for data in sent]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        unary = [_unary(channel, data) for data in sent]
        streamed = _streamed(channel, sent)
    for (status, http), one, answer in zip(over_http, unary, streamed, strict=True):
        if status == 200:
            assert one == answer == decided(json.dumps(http).encode())
        else:
            assert one == (http["error"], http["detail"]), (status, http)
            assert answer == (http["error"], http["detail"], status)


def _unary(channel: grpc.Channel, data: bytes) -> Any:
    call = channel.unary_unary("/fraud.scoring.v1.Scoring/Score", response_deserializer=pb.ScoreResponse.FromString)
    try:
        return decided(call(pb.ScoreRequest(event=data).SerializeToString(), metadata=KEYED, timeout=30).scored)
    except grpc.RpcError as exc:
        return dict(exc.trailing_metadata())["x-error-code"], exc.details()


def _streamed(channel: grpc.Channel, sent: list[bytes]) -> list[Any]:
    """One stream, the events one, two and five to a message in turn (a lone event takes the
    single-event path, several the batch path), its answers put back in the order sent."""
    call = channel.stream_stream(
        "/fraud.scoring.v1.Scoring/ScoreStream", response_deserializer=pb.ScoreStreamResponse.FromString
    )
    starts: list[int] = []  # the place of each message's first event
    chunks: list[list[bytes]] = []
    at = 0
    for size in itertools.cycle((1, 2, 5)):
        if at >= len(sent):
            break
        starts.append(at)
        chunks.append(sent[at : at + size])
        at += size
    messages = [message(*chunk) for chunk in chunks]
    found: dict[int, Any] = {}
    for response in call(iter(messages), metadata=KEYED, timeout=60):
        for a in response.answers:
            place = starts[a.message] + a.index
            if a.WhichOneof("outcome") == "scored":
                assert a.event_id == json.loads(a.scored)["event_id"]
                found[place] = decided(a.scored)
            else:
                found[place] = (a.error.code, a.error.detail, a.error.status)
    return [found[i] for i in range(len(sent))]


# -- hostile clients ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "w" * 24], ids=["no-key", "wrong-key"])
async def test_a_stream_without_a_valid_key_is_refused_and_ends(served: tuple[Host, int], key: str | None) -> None:
    _, port = served
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = raw_stream(channel, (("x-api-key", key),) if key else ())
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asyncio.wait_for(call.read(), 10)  # NOTE: refused from its metadata alone, before any message
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(asyncio.InvalidStateError):  # NOTE: ended: a message after the refusal is never sent
            await call.write(message(body()))
        with pytest.raises(grpc.aio.AioRpcError) as unary:
            await raw_score(channel)(pb.ScoreRequest(event=body()).SerializeToString(), timeout=10)
        assert unary.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_bad_messages_interleaved_are_each_answered_and_the_stream_goes_on(served: tuple[Host, int]) -> None:
    _, port = served
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = raw_stream(channel, KEYED)
        sent: list[tuple[bytes, str | None]] = []
        for i in range(50):
            sent += [
                (message(body(event_id=f"b{i}")), None),
                (b"\xff\xff" + bytes([i]), "bad_request"),
                (message(body(event_id=f"x{i}", amount="much")), "invalid_event"),
                (message(b" " * 70_000), "payload_too_large"),
                (message(f"{{not json {i}".encode()), "malformed_json"),
            ]
        _, answers = await asyncio.gather(
            write_all(call, [raw for raw, _ in sent]), answers_of(call, len(sent), wait_s=30)
        )
        assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
    got = {a.message: (a.error.code if a.WhichOneof("outcome") == "error" else None) for a in answers}
    assert got == {number: code for number, (_, code) in enumerate(sent)}
    assert {a.event_id for a in answers if a.WhichOneof("outcome") == "scored"} == {f"b{i}" for i in range(50)}
    assert {a.event_id for a in answers if a.error.code == "invalid_event"} == {f"x{i}" for i in range(50)}


async def test_a_half_closed_stream_gets_every_pending_answer_then_ends_ok(served: tuple[Host, int]) -> None:
    _, port = served
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = raw_stream(channel, KEYED)
        await write_all(call, [message(*[body(event_id=f"h{m}-{i}") for i in range(8)]) for m in range(20)])
        answers = await answers_of(call, 160, wait_s=30)  # NOTE: none read before the half-close
        assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
    assert sorted(a.event_id for a in answers) == sorted(f"h{m}-{i}" for m in range(20) for i in range(8))


async def test_a_client_that_does_not_read_stops_its_own_stream_at_the_cap(served: tuple[Host, int]) -> None:
    """Scoring stops at the cap ahead of what the client's transport took (64 KiB: BDP probing off)."""
    host, port = served
    before = admitted(host)
    sent = 3000
    options = [("grpc.http2.bdp_probe", 0)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        call = raw_stream(channel, KEYED)
        writer = asyncio.create_task(write_all(call, [message(body(event_id=f"s{i}")) for i in range(sent)]))
        await asyncio.sleep(2.0)
        held = await asyncio.to_thread(admitted, host)
        await asyncio.sleep(1.0)
        assert await asyncio.to_thread(admitted, host) == held, (
            "the server kept scoring for a client that reads nothing"
        )
        assert held - before < 400, f"{held - before} events scored for a client that took 64 KiB of answers"
        answers = await answers_of(call, sent, wait_s=30)
        await writer
        assert await call.read() is grpc.aio.EOF and await call.code() == grpc.StatusCode.OK
    assert len({a.event_id for a in answers}) == sent


async def test_ten_thousand_messages_on_one_stream_are_all_answered(served: tuple[Host, int]) -> None:
    host, port = served
    before = admitted(host)
    bodies = [body(event_id=f"t{i}", amount=float(i % 700)) for i in range(10_000)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answers = [a async for a in score_stream(channel, bodies, key=KEY)]
    assert sorted(int(a.id) for a in answers) == list(range(10_000))
    assert {a.event_id for a in answers} == {f"t{i}" for i in range(10_000)}
    assert all(a.WhichOneof("outcome") == "scored" for a in answers)
    assert admitted(host) - before == 10_000


# -- under each 3.11 bundle --------------------------------------------------------------------

BUNDLED = """
import asyncio, json, socket
import grpc, google.protobuf
from shared.adapters.oip.jobs import grpc_server
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from shared.domain.events import EXAMPLE_EVENT
from shared.adapters.scoring_grpc.client import score_stream, scores

def body(event_id):
    return json.dumps({**EXAMPLE_EVENT, "event_id": event_id}).encode()

async def main():
    probe = socket.create_server(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
    holder = ServiceHolder(lambda: Settings.from_env({"GRPC_PORT": str(port)}), on_built=[grpc_server("127.0.0.1")])
    await holder.get()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), 10)
            one = [json.loads(line)["event_id"] async for line in scores(channel, [body(event_id="u")])]
            many = [a.event_id async for a in score_stream(channel, [body(event_id="s")])]
            return {"protobuf": google.protobuf.__version__, "grpcio": grpc.__version__, "answers": one + many}
    finally:
        await holder.aclose()

print(json.dumps(asyncio.run(main())))
"""


def bundled(bundle: Bundle, folder: Path, app_dir: Path = REPO) -> subprocess.CompletedProcess[str]:
    """BUNDLED's run with `bundle`, then the app in `app_dir`, first on the path (the script in
    `folder`: `python -c` would put the working directory, the repository, first)."""
    assert (bundle.folder / ".installed").exists(), f"{bundle.folder.name} is not built: make worker-venvs"
    script = folder / "bundled_events.py"
    script.write_text(BUNDLED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bundle.folder), str(app_dir), str(REPO)])}
    return subprocess.run(
        [sys.executable, str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )  # fmt: skip


@EACH_BUNDLE
def test_under_each_bundle_the_event_stubs_load_and_both_methods_answer(bundle: Bundle, tmp_path: Path) -> None:
    done = bundled(bundle, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert (report["protobuf"], report["grpcio"]) == (bundle.pins()["protobuf"], bundle.pins()["grpcio"])
    assert report["answers"] == ["u", "s"]


def test_event_stubs_at_a_newer_gencode_level_fail_under_the_2024_bundle(tmp_path: Path) -> None:
    """The mutation: the event stubs regenerated by the dev venv's grpcio-tools (newer gencode, which
    first calls `runtime_version`): the 2024 bundle cannot load them, so the stubs that ship must not."""
    app = tmp_path / "app"
    shutil.copytree(REPO / "shared", app / "shared", ignore=shutil.ignore_patterns("__pycache__"))
    proto = REPO / "shared" / "adapters" / "scoring_grpc" / "proto" / "fraud" / "scoring" / "v1" / "scoring.proto"
    out = app / "shared" / "adapters" / "scoring_grpc"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto.parent}", f"--python_out={out}", str(proto)],
        check=True, capture_output=True,
    )  # fmt: skip
    assert "runtime_version" in (out / "scoring_pb2.py").read_text()
    assert "runtime_version" not in (REPO / "shared" / "adapters" / "scoring_grpc" / "scoring_pb2.py").read_text()
    done = bundled(BUNDLE_2024, tmp_path, app)
    assert done.returncode != 0 and NO_RUNTIME_VERSION in done.stderr, done.stderr[-2000:]
    newer = bundled(BUNDLE_2026, tmp_path, app)
    assert newer.returncode != 0 and "VersionError" in newer.stderr, newer.stderr[-2000:]  # 5.29 refuses newer gencode
