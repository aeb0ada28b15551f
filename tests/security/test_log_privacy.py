"""No personal data and no secret in any log, at DEBUG: `tests/security/log_privacy.py`, in a test process of its own.

That run turns every logger of the process to DEBUG, so which code paths it wakes depends on which
libraries the process has imported before it. In the main test process, after hundreds of other
tests, it was where the suite's one segfault struck (a C extension's reference-count fault found by
the cyclic GC; docs/reliability.md, "A crash in the test process"): 2 of 2 loaded fresh-clone CI
runs died there. Here it runs in a child pytest (under faulthandler) with only its own imports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRIVACY = Path(__file__).with_name("log_privacy.py")


@pytest.mark.timeout(420)
def test_no_log_holds_personal_data_or_a_secret_in_a_process_of_its_own() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-X",
            "faulthandler",
            "-m",
            "pytest",
            str(PRIVACY),
            "-o",
            "addopts=",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode >= 0, f"the privacy run's process died of signal {-done.returncode}:\n{tail}"
    assert done.returncode == 0, tail
    assert " passed" in done.stdout and " failed" not in done.stdout and " skipped" not in done.stdout, tail
