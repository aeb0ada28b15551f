"""The suite across the cores (tests/conftest.py): each xdist worker on services of its own, `serial` tests alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.child_pytest import REPO
from tests.conftest import take_worker_services

# Two files a child pytest deals to two workers: each test records when it ran, where, and what it was given.
RECORDING = """
import json, os, subprocess, sys, time
import pytest

def record(name):
    started = time.monotonic()
    time.sleep(0.3)
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['REDIS_URL'])"],
                           capture_output=True, text=True, check=True).stdout.strip()
    line = {"name": name, "worker": os.environ["PYTEST_XDIST_WORKER"], "redis": os.environ["REDIS_URL"],
            "azurite": os.environ["AZURITE_BLOB_ENDPOINT"], "child": child, "span": [started, time.monotonic()]}
    with open(os.environ["RECORD"], "a") as out:
        out.write(json.dumps(line) + "\\n")
"""
ALONE = (
    RECORDING
    + """
pytestmark = pytest.mark.serial

@pytest.mark.parametrize("n", range(3))
def test_alone(n):
    record("alone")
"""
)
BESIDE = (
    RECORDING
    + """
@pytest.mark.parametrize("n", range(6))
def test_beside(n):
    record("beside")
"""
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    """The two files under tests/conftest.py on `-n auto` with two sets of (named, unstarted) services."""
    tmp_path = tmp_path_factory.mktemp("workers")
    (tmp_path / "test_alone.py").write_text(ALONE)
    (tmp_path / "test_beside.py").write_text(BESIDE)
    record = tmp_path / "record.jsonl"
    env = {
        **os.environ,
        "RECORD": str(record),
        "SERVICE_SETS": "2",
        "REDIS_URL": "redis://set-0",
        "PYTHONPATH": str(REPO),
    }
    for k in range(2):
        env |= {f"REDIS_URL_{k}": f"redis://set-{k}", f"AZURITE_BLOB_ENDPOINT_{k}": f"http://set-{k}"}
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-o", "addopts=", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-n", "auto", "--dist", "loadfile", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and "9 passed" in done.stdout, done.stdout + done.stderr
    return [json.loads(line) for line in record.read_text().splitlines()]


def test_each_worker_and_the_processes_it_starts_use_its_own_set_of_services(runs: list[dict[str, object]]) -> None:
    assert {run["worker"] for run in runs} == {"gw0", "gw1"}
    for run in runs:
        k = str(run["worker"]).removeprefix("gw")
        assert (run["redis"], run["child"], run["azurite"]) == (
            f"redis://set-{k}",
            f"redis://set-{k}",
            f"http://set-{k}",
        )


def test_a_serial_test_runs_while_no_other_worker_runs_one(runs: list[dict[str, object]]) -> None:
    alone = [run["span"] for run in runs if run["name"] == "alone"]
    beside = [run["span"] for run in runs if run["name"] == "beside"]
    overlaps = [(a, b) for a in alone for b in beside if a[0] < b[1] and b[0] < a[1]]  # type: ignore[index]
    assert len(alone) == 3 and len(beside) == 6 and not overlaps, overlaps


def test_a_worker_without_a_set_of_its_own_refuses_a_named_redis() -> None:
    environ = {"REDIS_URL": "redis://shared", "REDIS_URL_0": "redis://set-0"}
    with pytest.raises(pytest.UsageError, match="gw2 has no services of its own"):
        take_worker_services(environ, "gw2")


def test_a_worker_needing_no_service_runs_without_a_set() -> None:
    environ = {"REDIS_URL": "", "AZURITE_BLOB_ENDPOINT": ""}
    take_worker_services(environ, "gw1")
    assert environ["REDIS_URL"] == ""


def test_one_process_keeps_the_services_it_was_given() -> None:
    environ = {"PYTEST_XDIST_WORKER": "gw1", "REDIS_URL": "redis://given", "REDIS_URL_1": "redis://set-1"}
    take_worker_services(environ, None)
    assert environ["REDIS_URL"] == "redis://given"
