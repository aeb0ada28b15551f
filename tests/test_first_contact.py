"""What a newcomer meets on `make run` (`python -m shared`) when something is wrong: each message says
what happened, names the value it looked at, and names the fix. The real process, as README.md runs it."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shared.setting import unknown_settings
from shared.settings import Settings
from tests.conftest import closed_port

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parent.parent


@contextmanager
def running(**env: str) -> Iterator[Run]:
    run = Run(env)
    try:
        yield run
    finally:
        run.stop()


class Run:
    """`python -m shared` with `env` over the test's environment (no Redis, no prediction log); its
    stdout and stderr together in a file, read as it grows."""

    def __init__(self, env: dict[str, str]) -> None:
        full = {**os.environ, "PYTHONPATH": str(REPO), "REDIS_URL": "", "PREDICTION_LOG": "off", "PORT": "0", **env}
        self.log = tempfile.NamedTemporaryFile(prefix="first-contact-", suffix=".log")  # noqa: SIM115 closed in stop
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shared"], cwd=REPO, env=full, stdout=self.log, stderr=subprocess.STDOUT
        )

    @property
    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def until(self, pattern: str, within_s: float = 60.0) -> str:
        """The output so far once `pattern` (a regex) appears in it; fails after `within_s` or at exit."""
        deadline = time.monotonic() + within_s
        while not re.search(pattern, out := self.output) and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        out = self.output
        assert re.search(pattern, out), f"{pattern!r} not in:\n{out}"
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()


def test_a_port_in_use_is_refused_before_serving_is_announced_and_names_the_fix() -> None:
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        with running(PORT=str(port)) as run:
            assert run.proc.wait(timeout=60) == 2
            out = run.until(r"in use")
    assert f"cannot serve on 127.0.0.1:{port}: the port is in use" in out
    assert f"make run PORT={port + 1}" in out and "serving on" not in out and "Traceback" not in out


def test_the_start_says_how_to_stop_it() -> None:
    with running(PORT=str(closed_port())) as run:
        assert "Ctrl-C stops it" in run.until(r"serving on http://127\.0\.0\.1:\d+")


def test_a_typo_of_a_setting_is_warned_about_with_its_value_and_the_name_meant() -> None:
    with running(PORT=str(closed_port()), BATCH_MAX_ROWS="abc", DEFAULT_MODL="fraud") as run:
        out = run.until(r"serving on")
    assert "unknown setting BATCH_MAX_ROWS='abc' is ignored: did you mean BATCH_MAX_SIZE?" in out
    assert "unknown setting DEFAULT_MODL='fraud' is ignored: did you mean DEFAULT_MODEL?" in out


def test_a_default_model_that_does_not_load_is_not_announced_as_ready() -> None:
    with running(PORT=str(closed_port()), DEFAULT_MODEL="nope") as run:
        out = run.until(r"NOT ready.*\n")
    assert "scoring service ready" not in out
    assert "DEFAULT_MODEL 'nope' names no loaded model" in out
    assert "fix: set DEFAULT_MODEL to one of the loaded models (fraud), or add models/nope/<version>/model.onnx" in out


def test_a_missing_model_directory_names_the_path_it_looked_at() -> None:
    with running(PORT=str(closed_port()), MODELS_DIR="no-such-models") as run:
        out = run.until(r"MODELS_DIR: no directory at .*\n")
    assert f"no directory at {REPO / 'no-such-models'} (MODELS_DIR='no-such-models'); fix: set MODELS_DIR" in out


def _answered(url: str, within_s: float = 10.0) -> bytes:
    """The body at `url` once the server listens: the core says it is ready during uvicorn's
    lifespan startup, and uvicorn binds its socket only after that startup ends."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 our own loopback http:// URL
                return bytes(answer.read())
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_redis_down_names_its_address_and_asks_whether_it_runs() -> None:
    port, http = closed_port(), closed_port()
    with running(PORT=str(http), REDIS_URL=f"redis://127.0.0.1:{port}/0") as run:
        out = run.until(rf"Redis at 127\.0\.0\.1:{port} \(REDIS_URL\) failed \(ConnectionError\).*\n")
        out = run.until(r"scoring service ready: .* redis on at 127\.0\.0\.1")
        degraded = json.loads(_answered(f"http://127.0.0.1:{http}/api/health/ready"))["degraded"]
    assert "is Redis running there?" in out
    assert "GET /api/models" not in out  # NOTE: the admin route's advice is not a start's
    assert degraded and len(degraded) == len(set(degraded)), degraded  # each problem once


def test_only_names_that_look_like_ours_are_warned_about() -> None:
    env = {
        "PATH": "/bin",
        "HOME": "/root",
        "AZURE_CLIENT_ID": "x",
        "GRPC_VERBOSITY": "debug",
        "REDIS_URL": "",
        "WORKER": "2",
    }
    env |= {"AZURE_OPENAI_API_KY": "secret-value", "ORT_THREADS": "4"}
    lines = unknown_settings(env, Settings)
    assert [line.split(" is ignored")[0] for line in lines] == [
        "unknown setting AZURE_OPENAI_API_KY",  # a secret's near name: its value is not shown
        "unknown setting ORT_THREADS='4'",
        "unknown setting WORKER='2'",
    ]
    assert "did you mean AZURE_OPENAI_API_KEY?" in lines[0] and "did you mean WORKERS?" in lines[2]


def test_make_help_lists_the_targets_the_docs_send_a_newcomer_to_in_one_column() -> None:
    shown = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    rows = [re.match(r"  make (\S+) +(\S.*)", line) for line in shown.splitlines()]
    assert all(rows), shown
    targets = {row[1] for row in rows if row}
    assert {"run", "test", "worker-venvs", "check-platforms", "capacity"} <= targets
    assert len({row.start(2) for row in rows if row}) == 1, shown  # every description starts in one column


def test_the_example_settings_do_not_start_the_workers_azure_monitor_without_a_connection_string() -> None:
    """`func start` with local.settings.json.example's values: the 3.11 worker configures azure-monitor
    itself under PYTHON_ENABLE_OPENTELEMETRY=true, and an empty connection string makes every start
    log `Error initializing Azure monitor distro` with a traceback (docs/functions-host.md)."""
    values = json.loads((REPO / "local.settings.json.example").read_text())["Values"]
    enabled = values.get("PYTHON_ENABLE_OPENTELEMETRY", "").lower() in ("true", "1")
    assert not enabled or values.get("APPLICATIONINSIGHTS_CONNECTION_STRING", "").startswith("InstrumentationKey=")
    assert "ServiceBusConnection__fullyQualifiedNamespace" in values  # the name docs/functions-host.md says to edit
    assert "ServiceBusConnection__fullyQualifiedNamespace" in (REPO / "docs" / "functions-host.md").read_text()
