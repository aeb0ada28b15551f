"""No personal data and no secret in any log, at DEBUG: `tests/security/log_privacy.py`, in a test process of its own.

That run turns every logger of the process to DEBUG, so which code paths it wakes depends on which
libraries the process has imported before it. In the main test process, after hundreds of other
tests, it was where the suite's one segfault struck (a C extension's reference-count fault found by
the cyclic GC; docs/reliability.md, "A crash in the test process"): 2 of 2 loaded fresh-clone CI
runs died there. Here it runs in a child pytest (under faulthandler) with only its own imports.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.child_pytest import assert_passed, pytest_in_child

PRIVACY = Path(__file__).with_name("log_privacy.py")


@pytest.mark.timeout(420)
def test_no_log_holds_personal_data_or_a_secret_in_a_process_of_its_own() -> None:
    assert_passed(pytest_in_child(PRIVACY, timeout_s=400), "the privacy run", allow_skips=False)
