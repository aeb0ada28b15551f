"""Standard V2 clients (tritonclient HTTP and gRPC) against the real app, in a test process of their own.

tritonclient's HTTP client is built on gevent and greenlet. Loaded into the main test process,
those C extensions lived beside the worker threads of the Blob SDK and the test servers for the
whole run, and one full run in about eight died with a segfault inside the cyclic GC on such a
thread (docs/reliability.md, "A crash in the test process"). Here they load only in a child
pytest that runs `tests/adapters/oip/v2_clients.py` (under faulthandler), and `tests/conftest.py` fails
the main run if anything imports them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.child_pytest import assert_passed, offender_run, pytest_in_child

CLIENTS = Path(__file__).with_name("v2_clients.py")


@pytest.mark.timeout(300)
def test_standard_v2_clients_pass_in_a_process_of_their_own() -> None:
    done = pytest_in_child(CLIENTS, timeout_s=280, env={**os.environ, "SCORING_TESTS_GEVENT": "1"})
    assert_passed(done, "the clients")


def test_a_test_that_loads_gevent_in_the_main_process_fails_the_run(tmp_path: Path) -> None:
    """The guard of tests/conftest.py, shown to catch the mistake it exists for."""
    source = "import tritonclient.http  # noqa: F401\n\n\ndef test_nothing() -> None:\n    pass\n"
    env = {k: v for k, v in os.environ.items() if k != "SCORING_TESTS_GEVENT"}
    done = offender_run(tmp_path, source, env=env)
    assert done.returncode != 0 and "imported gevent" in done.stdout + done.stderr, done.stdout[-2000:]
