"""Tests that run other tests in a child pytest: a file whose imports must stay out of the main
test process (tests/adapters/oip/v2_clients.py, tests/security/log_privacy.py), or an offender that shows a
guard of tests/conftest.py fail."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["REPO", "assert_passed", "offender_run", "pytest_in_child"]

REPO = Path(__file__).resolve().parent.parent


def pytest_in_child(
    target: Path, *, timeout_s: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`target` run by a pytest of its own (under faulthandler), in the repository, with `env`."""
    command = [sys.executable, "-X", "faulthandler", "-m", "pytest", str(target), "-o", "addopts=", "-q"]
    return subprocess.run(
        [*command, "-p", "no:cacheprovider"],
        cwd=REPO,
        env=dict(os.environ if env is None else env),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def assert_passed(done: subprocess.CompletedProcess[str], what: str, *, allow_skips: bool = True) -> None:
    """The child ran tests and every one passed; a death by signal is named as such."""
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode >= 0, f"{what}'s process died of signal {-done.returncode}:\n{tail}"
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout, tail
    assert allow_skips or " skipped" not in done.stdout, tail


def offender_run(
    tmp_path: Path, source: str, *, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A one-test file of `source` run under tests/conftest.py's hooks: what its guards say of it."""
    offender = tmp_path / "test_offender.py"
    offender.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", str(offender), "-o", "addopts=", "-q"],
        cwd=REPO,
        env=dict(os.environ if env is None else env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
