"""Shared fixtures: tiny real ONNX models, real Redis, real Azurite.

Redis and Azurite come from `scripts/with_services.sh` (what `make test` runs).
Without them a backed test skips, except under CI=true, where it fails.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from shared.core.service import ScoringService
from shared.core.wiring import build_service
from shared.settings import BatchPolicy, CachePolicy, Settings
from tests.onnx_models import make_model

REPO = Path(__file__).resolve().parent.parent

# NOTE: a service built from the environment (the Functions handlers, `python -m shared`) tunes the
# process's GC at start (`shared.core.wiring.tune_gc`: gc.freeze() and a gen-0 threshold of 50,000). In the
# test process that tuning outlived the test that built it and changed when every later test's
# garbage was collected; with it, `tests/adapters/test_function_app.py tests/oip tests/security` segfaulted in
# the GC in 5 runs of 6, without it in none of 3 (docs/reliability.md, "A crash in the test process").
# `_gc_as_it_was` below fails a test that tunes it all the same.
os.environ.setdefault("GC_GEN0_THRESHOLD", "0")
# NOTE: Azurite's documented, public development account (not a secret; it only opens the emulator).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

# Hypothesis profiles for the property tests (tests/**/test_*_properties.py): `fast` in `make test`
# (the whole property suite in well under a minute), `long` on demand:
#   HYPOTHESIS_PROFILE=long PY=.venv/bin/python scripts/with_services.sh .venv/bin/python -m pytest \
#       -p no:cacheprovider --timeout 0 -k properties --hypothesis-show-statistics
# NOTE: no deadline: the machine is shared and noisy, and a slow example is not a wrong one.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
hypothesis_settings.register_profile("fast", max_examples=200, deadline=None, suppress_health_check=_SLOW_OK)
hypothesis_settings.register_profile("long", max_examples=10_000, deadline=None, suppress_health_check=_SLOW_OK)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


# C extensions that the main test process must never load (tests/adapters/oip/test_clients.py says why).
ISOLATED_MODULES = ("gevent", "greenlet", "geventhttpclient")


@pytest.fixture(autouse=True)
def _gc_as_it_was() -> Iterator[None]:
    """Every test leaves the process's GC as it found it (thresholds, nothing frozen)."""
    import gc

    before = (gc.get_threshold(), gc.get_freeze_count())
    yield
    after = (gc.get_threshold(), gc.get_freeze_count())
    if after != before:
        gc.unfreeze()
        gc.set_threshold(*before[0])
        pytest.fail(
            f"the test left the GC tuned ({after} after, {before} before): build settings with gc_gen0_threshold=0"
        )


def _isolated_loaded() -> str | None:
    if os.environ.get("SCORING_TESTS_GEVENT") == "1":
        return None  # NOTE: the child process of tests/adapters/oip/test_clients.py, which exists to load them
    import sys

    loaded = [name for name in ISOLATED_MODULES if name in sys.modules]
    if not loaded:
        return None
    return (
        f"the test process imported {', '.join(loaded)}: keep tritonclient.http in "
        "tests/adapters/oip/v2_clients.py, which runs in a process of its own"
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fail the run, before any test, if collecting it loaded what must stay in a child process."""
    if (problem := _isolated_loaded()) is not None:
        raise pytest.UsageError(problem)


@pytest.fixture(scope="session", autouse=True)
def _isolated_never_loaded() -> Iterator[None]:
    """The same, for an import inside a test or a fixture: the process's last test errors at its end.

    NOTE: a fixture's teardown, not a session hook: an xdist worker's report reaches the run's result, a
    worker's own exit status does not.
    """
    yield
    if (problem := _isolated_loaded()) is not None:
        pytest.fail(problem)


# `make check` (lint, types and these tests in two processes at once: about 90 s on 2 cores) leaves out
# two kinds of test, which the tests mark here from what they ask for and where they live:
#   services  needs Redis or Azurite (asked for directly or through any fixture it uses), starts a redis-server
#             or an Azurite of its own, reaches the package index, or drives the worker runtime or a child that does;
#   long      runs a whole path end to end or thousands of generated cases: the snapshots, the benchmarks' and the
#             flash sale's tests, the demo, the fuzzer, the fault rigs, the property tests.
# The full suite (`make test`) runs both; the markers only name them.
SERVICE_FIXTURES = frozenset({"redis_url", "azurite_connection", "own_redis", "azurite", "small_redis"})
SERVICE_PATHS = (
    "tests/worker/",
    "tests/security/test_log_privacy.py",  # NOTE: runs tests/security/log_privacy.py, which asks for both, in a child
    "tests/test_requirements.py",  # NOTE: reads the package index
)
LONG_PATHS = (
    "tests/test_snapshots.py",
    "tests/bench/",
    "tests/test_bench.py",
    "tests/test_demo_outcomes.py",
    "tests/adapters/http/test_fuzz.py",
    "tests/faults/",
    "tests/adapters/oip/test_clients.py",
    "tests/test_workers.py",  # NOTE: a child pytest on two workers
)


# `serial` (below, where the suite runs across the cores): the model's CPU deadlines (50 ms, a run's CPU read from
# its thread's clock) and the event loop's 100 ms bound while a run is stopped, and the prediction log's 20 ms
# bound on `add`: beside other workers' tests on 2 cores, a run got under a quarter of a CPU and `add` was
# descheduled past its bound (tests/README.md)
SERIAL_PATHS = (
    "tests/models/test_bounds.py",
    "tests/models/test_bounds_served.py",
    "tests/models/test_starved_runs.py",
    "tests/models/test_starved_warmup.py",
    "tests/models/test_sandbox_starved.py",
    "tests/models/test_sandbox.py::test_a_trial_past_its_wall_clock_is_killed",  # NOTE: starved, under a quarter of a CPU
    "tests/stores/prediction_log/test_log.py::test_add_never_waits_while_the_sink_fails",
)


def needs_services(item: pytest.Item) -> bool:
    """Whether `item` needs Redis, Azurite, the package index or the worker runtime."""
    fixtures = set(getattr(item, "fixturenames", ()))
    return bool(fixtures & SERVICE_FIXTURES) or item.nodeid.startswith(SERVICE_PATHS)


def is_long(item: pytest.Item) -> bool:
    """Whether `item` runs a whole path end to end, or is a property test (tests/**/test_*_properties.py)."""
    return item.nodeid.startswith(LONG_PATHS) or item.nodeid.split("::")[0].endswith("_properties.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if needs_services(item):
            item.add_marker(pytest.mark.services)
        if is_long(item):
            item.add_marker(pytest.mark.long)
        if item.nodeid.startswith(SERIAL_PATHS):
            item.add_marker(pytest.mark.serial)
    # NOTE: the long files first and the serial ones last (a stable sort keeps each file's order): xdist deals
    # the files in this order; a long one dealt last would run alone at the end, and a serial one holds off
    # every other worker's tests, better when few are left (and, in `make check`, when mypy is done)
    items.sort(
        key=lambda item: (item.get_closest_marker("long") is None, item.get_closest_marker("serial") is not None)
    )


# `make test` runs the files across the cores (pytest-xdist, `-n auto --dist loadfile`): worker gwK runs whole
# files against a set of services of its own, set K of `SERVICE_SETS=N scripts/with_services.sh` (the tests
# share fixed Redis keys, pub/sub channels and Blob containers, so two workers on one server would meet).
SERVICE_URLS = ("REDIS_URL", "AZURITE_BLOB_ENDPOINT")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per set of services (`SERVICE_SETS`); none (one process) with one set."""
    sets = int(os.environ.get("SERVICE_SETS", "1"))
    return sets if sets > 1 else 0


def take_worker_services(environ: MutableMapping[str, str], worker: str | None) -> None:
    """In xdist worker `worker` (gwK), point REDIS_URL and AZURITE_BLOB_ENDPOINT at set K's servers
    (`REDIS_URL_K`...), in the environment itself, so that the child processes a test starts inherit them too.

    A worker without a set of its own refuses to run when a service is named: it would share it with the others.
    """
    if worker is None:
        return
    k = worker.removeprefix("gw")
    if f"REDIS_URL_{k}" not in environ:
        if environ.get("REDIS_URL") or environ.get("AZURITE_BLOB_ENDPOINT"):
            raise pytest.UsageError(
                f"worker {worker} has no services of its own (REDIS_URL_{k}): run `-n auto` under "
                "`SERVICE_SETS=N scripts/with_services.sh`, or empty REDIS_URL and AZURITE_BLOB_ENDPOINT"
            )
        return
    for name in SERVICE_URLS:
        environ[name] = environ[f"{name}_{k}"]


def xdist_worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id (gwK), or None in the run's own process.

    NOTE: from the config, not from PYTEST_XDIST_WORKER, which a worker's child processes inherit (a test that
    runs a pytest of its own: tests/child_pytest.py).
    """
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    return None if workerinput is None else str(workerinput["workerid"])


def pytest_configure(config: pytest.Config) -> None:
    take_worker_services(os.environ, xdist_worker(config))
    if xdist_worker(config) is None:  # NOTE: the workers start after this and inherit it
        os.environ["SCORING_TESTS_TURNS"] = tempfile.mkstemp(prefix="scoring-tests-turns.")[1]


def pytest_unconfigure(config: pytest.Config) -> None:
    if xdist_worker(config) is None and (turns := os.environ.pop("SCORING_TESTS_TURNS", None)) is not None:
        Path(turns).unlink(missing_ok=True)


# A test marked `serial` (a CPU deadline or a measured ratio that another worker's load would starve) runs
# while no other worker runs a test: every test holds a shared lock on one file for its setup, call and
# teardown, a `serial` one an exclusive lock, which waits for the others' tests in progress to end and
# holds off their next ones. In one process the lock is never taken.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    if xdist_worker(item.config) is None:
        return (yield)
    with open(os.environ["SCORING_TESTS_TURNS"]) as turns:
        fcntl.flock(turns, fcntl.LOCK_EX if item.get_closest_marker("serial") else fcntl.LOCK_SH)
        return (yield)


def _unavailable(what: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} is required under CI=true (run through `make test`)")
    pytest.skip(f"{what} is not available (run through `make test`)")


def closed_port() -> int:
    """A loopback port where nothing listens, for a server that binds it later (and again after a restart).

    NOTE: below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default):
    a port from `bind(("", 0))` is in that range, and between its check and the server's bind (or a
    test's restart of the server) any outgoing connection of the machine could take it as its own.
    """
    import random

    for _ in range(200):
        port = random.randint(20_000, 32_767)  # noqa: S311 not a secret: a port number
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")


async def port_frees(port: int, within_s: float = 5.0) -> bool:
    """Whether loopback `port` can be bound again within `within_s` (a server's threads may let go late)."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return True
            except OSError:
                if loop.time() > deadline:
                    return False
        await asyncio.sleep(0.05)


def _answers(url: str) -> bool:
    parsed = urlparse(url)
    try:
        socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 6379), 0.5).close()
        return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = os.environ.get("REDIS_URL", "")
    if not url or not _answers(url):
        _unavailable("Redis (REDIS_URL)")
    return url


@pytest.fixture
def redis_prefix() -> str:
    """A fresh key namespace per test: no test sees another run's keys."""
    return f"test:{uuid.uuid4().hex[:12]}:"


@pytest.fixture
async def redis_client(redis_url: str, redis_prefix: str) -> AsyncIterator[object]:
    from redis.asyncio import Redis

    client = Redis.from_url(redis_url)
    yield client
    keys = [k async for k in client.scan_iter(match=redis_prefix + "*", count=1000)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
def azurite_connection() -> str:
    endpoint = os.environ.get("AZURITE_BLOB_ENDPOINT", "")
    if not endpoint or not _answers(endpoint):
        _unavailable("Azurite (AZURITE_BLOB_ENDPOINT)")
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )


@pytest.fixture
def model_bytes() -> Callable[..., bytes]:
    """Build a tiny real ONNX model: `model_bytes(bias=0.0, features=..., thresholds=...)`."""
    return make_model


@pytest.fixture
def models_dir(tmp_path: Path) -> Iterator[Path]:
    """A model directory holding `fraud/1` (a tiny model) in the blob layout."""
    root = tmp_path / "models"
    (root / "fraud" / "1").mkdir(parents=True)
    (root / "fraud" / "1" / "model.onnx").write_bytes(make_model())
    yield root


@pytest.fixture
def settings(models_dir: Path, tmp_path: Path) -> Settings:
    """Embedded-default settings over the tiny model (no Redis)."""
    users = tmp_path / "users.json"
    users.write_text('{"u1": {"user_avg_amount_30d": 50.0, "user_txn_count_24h": 3}}')
    return Settings(
        models_dir=str(models_dir),
        features_file=str(users),
        batch=BatchPolicy(window_ms=5, max_size=8),
        cache=CachePolicy(l1_size=1000),
        gc_gen0_threshold=0,
        event_max_age_s=0,  # NOTE: the fixture events carry a fixed past timestamp; the window has its own tests
    )


class LoopTurns:
    """Counts the loop's turns (a 10 ms sleep each) while an `async with` block runs: a block
    whose work holds the loop (a model run on it) leaves ~none; one in a worker thread, many."""

    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.turns += 1


def event(**overrides: object) -> dict[str, object]:
    """A valid payment event body."""
    body: dict[str, object] = {
        "event_id": "evt-1",
        "user_id": "u1",
        "amount": 120.5,
        "currency": "USD",
        "merchant_id": "m-42",
        "merchant_category": "7995",
        "country": "NG",
        "channel": "web",
        "timestamp": "2026-11-29T03:12:00Z",
        "note": "gift card",
    }
    body.update(overrides)
    return body


@pytest.fixture
async def services() -> AsyncIterator[Callable[[Settings], Awaitable[ScoringService]]]:
    """`await services(settings)` builds a service; every one built is closed, pass or fail."""
    built: list[ScoringService] = []

    async def build(settings: Settings) -> ScoringService:
        service = await build_service(settings)
        built.append(service)
        return service

    yield build
    for service in built:
        await service.aclose()


@pytest.fixture
async def service(services: Callable[[Settings], Awaitable[ScoringService]], settings: Settings) -> ScoringService:
    """The core over the tiny model with embedded defaults; closed after the test."""
    return await services(settings)


@pytest.fixture
async def closing() -> AsyncIterator[Callable[[Any], Any]]:
    """`closing(x)` returns x and closes it (`await x.aclose()`) after the test, pass or fail."""
    opened: list[Any] = []

    def track(thing: Any) -> Any:
        opened.append(thing)
        return thing

    yield track
    for thing in reversed(opened):
        await thing.aclose()
