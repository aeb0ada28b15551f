"""Statements of the docs that code can make false, each held to the code: api.md's error table to
the error tree, the V2 ready probe's answer when no model loads to api.md, and queue.md's replay of
recorded events run as written."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared import errors
from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.settings import Settings
from tests.conftest import closed_port

REPO = Path(__file__).resolve().parent.parent
API = (REPO / "docs" / "api.md").read_text()


def error_tree() -> dict[str, tuple[int, str]]:
    """Every code of the error tree: (HTTP status, gRPC status). Only shared/errors.py's classes: a test
    may subclass one to show a class outside the tree is refused (test_openapi's `Homemade`), and a
    class lives on in `__subclasses__()` for the rest of that process."""
    found: dict[str, tuple[int, str]] = {}
    todo: list[type[errors.ScoringError]] = [errors.ScoringError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.code, (cls.status, cls.grpc_status))
        todo += [sub for sub in cls.__subclasses__() if sub.__module__ == errors.__name__]
    return found


def documented(page: str) -> dict[str, tuple[int, str]]:
    """api.md's error table: code → (HTTP, gRPC)."""
    rows = re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \| `([A-Z_]+)` \|", page, re.M)
    return {code: (int(http), grpc) for code, http, grpc in rows}


def test_the_api_error_table_is_the_error_tree() -> None:
    assert documented(API) == error_tree()


def test_the_error_table_check_catches_a_missing_code_and_a_wrong_status() -> None:
    missing = API.replace("| `event_expired` | 422 |", "| `event_expird` | 422 |")
    wrong = API.replace("| `event_id_conflict` | 409 |", "| `event_id_conflict` | 400 |")
    assert documented(missing) != error_tree() and documented(wrong) != error_tree()


def test_the_docs_say_http_keeps_no_idempotency() -> None:
    assert "**HTTP has no idempotency.**" in API


async def test_v2_ready_answers_the_protocols_false_while_no_model_loads(settings: Settings, tmp_path: Path) -> None:
    """api.md: `ready` → 400 `{"ready": false}` while none loads (a 4xx is the protocol's false), not a 503."""
    assert 'or 400 `{"ready": false}` until the models are loaded, and while none loads' in API
    broken = dataclasses.replace(settings, models_dir=str(tmp_path / "absent"))
    holder = ServiceHolder(lambda: broken)
    app = create_app(holder)
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://app") as client:
            answer = await client.get("/v2/health/ready")
            live = await client.get("/v2/health/live")
    finally:
        await holder.aclose()
    assert (answer.status_code, answer.json()) == (400, {"ready": False})
    assert live.status_code == 200


def test_the_replay_of_recorded_events_runs_as_queue_md_writes_it(tmp_path: Path) -> None:
    """queue.md's block, its commands run as written (in a scratch folder, `make` as the venv runs it)."""
    page = (REPO / "docs" / "queue.md").read_text()
    block = page.split("**Replaying recorded events: `EVENT_MAX_AGE_S=0`.**", 1)[1]
    script = re.search(r"```bash\n(.*?)```", block, re.S)[1]  # type: ignore[index]
    write, run, shown = script.strip().split("\n")
    assert run == "EVENT_MAX_AGE_S=0 make replay FILE=events.jsonl"
    subprocess.run(["sh", "-c", write], cwd=tmp_path, check=True)
    env = {**os.environ, "REDIS_URL": "", "PREDICTION_LOG": "off", "EVENT_MAX_AGE_S": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "shared.adapters.queue.replay", str(tmp_path / "events.jsonl")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    expected = json.loads(shown.removeprefix("# ").replace("...", '"model":"fraud"'))
    assert (
        (line["outcome"], line["message_id"])
        == (expected["outcome"], expected["message_id"])
        == ("completed", "evt-1001")
    )
    assert line["body"]["risk_score"] == expected["body"]["risk_score"]
    env.pop("EVENT_MAX_AGE_S")  # NOTE: the default window: the same file is refused, which is why the page says so
    refused = subprocess.run(
        [sys.executable, "-m", "shared.adapters.queue.replay", str(tmp_path / "events.jsonl")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(refused.stdout.strip().splitlines()[-1])["reason"].startswith("event_expired")


@pytest.mark.parametrize("target", ["replay"])
def test_the_make_target_the_page_names_runs_the_module_the_test_runs(target: str) -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "$(PY) -m shared.adapters.queue.replay" in makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v2/repository/index"), ("GET", "/v2/models/fraud/stats"), ("GET", "/v2/models/fraud/config")],
)
async def test_a_v2_extension_not_served_answers_in_the_protocols_error_shape(
    settings: Settings, method: str, path: str
) -> None:
    holder = ServiceHolder(lambda: settings)
    try:
        transport = httpx.ASGITransport(app=create_app(holder))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            answer = await client.request(method, path, json={} if method == "POST" else None)
    finally:
        await holder.aclose()
    assert answer.status_code == 404 and list(answer.json()) == ["error"]
    assert answer.json()["error"].startswith(f"{method} {path}: not served here")


# NOTE: tritonclient.http imports gevent, which the test process must never load (tests/conftest.py): a process of its own
TRITON_CALLS = """
import sys
import tritonclient.http as http
from tritonclient.utils import InferenceServerException
client = http.InferenceServerClient(sys.argv[1])
for name, call in (("index", client.get_model_repository_index), ("stats", lambda: client.get_inference_statistics("fraud")),
                   ("config", lambda: client.get_model_config("fraud"))):
    try:
        call()
        print(name, "answered")
    except InferenceServerException as exc:
        print(name, exc.message())
print("ready", client.is_server_ready(), client.get_server_metadata()["extensions"])
"""


def test_tritonclient_raises_the_servers_message_for_an_extension_not_served(served_app: int) -> None:
    """tritonclient's own calls: get_model_repository_index, get_inference_statistics, get_model_config."""
    pytest.importorskip("tritonclient")
    done = subprocess.run(
        [sys.executable, "-c", TRITON_CALLS, f"127.0.0.1:{served_app}"], capture_output=True, text=True, timeout=60
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and len(lines) == 4, done.stdout + done.stderr
    for line, path in zip(
        lines[:3], ("/v2/repository/index", "/v2/models/fraud/stats", "/v2/models/fraud/config"), strict=True
    ):
        assert f"{path}: not served here" in line, line
    assert lines[3] == "ready True ['binary_tensor_data']"


@pytest.fixture
def served_app(tmp_path: Path) -> Iterator[int]:
    """`python -m shared` on a free port (no Redis, no log), until the test ends."""
    port = closed_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "PORT": str(port), "REDIS_URL": "", "PREDICTION_LOG": "off"}
    app = subprocess.Popen([sys.executable, "-m", "shared"], cwd=REPO, env=env, stdout=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health/ready", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        yield port
    finally:
        app.terminate()
        app.wait(timeout=30)
