import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shared.core.wiring import tune_gc
from shared.errors import SettingsError
from shared.policies import BatchPolicy, CachePolicy
from shared.setting import markdown_table
from shared.settings import APP_SETTING_NAMES, LOCAL_SETTING_NAMES, Settings
from tests.child_pytest import offender_run


def test_defaults_are_the_embedded_local_setup() -> None:
    s = Settings.from_env({})
    assert s.redis_url is None and not s.uses_blob_models
    assert (s.models_dir, s.default_model, s.port) == ("models", "fraud", 7071)
    assert (s.batch.window_ms, s.batch.max_size) == (5.0, 8)


def test_values_are_read_and_cast() -> None:
    s = Settings.from_env(
        {
            "REDIS_URL": "redis://h:6379/0",
            "BATCH_WINDOW_MS": "2.5",
            "BATCH_MAX_SIZE": "16",
            "ORT_USE_GPU": "false",
            "ModelStorage__blobServiceUri": "https://acct.blob.core.windows.net",
            "CACHE_L2_TTL_S": "60",
            "LOG_LEVEL": "debug",
        }
    )
    assert s.redis_url == "redis://h:6379/0" and s.uses_blob_models
    assert s.batch == BatchPolicy(window_ms=2.5, max_size=16)
    assert s.ort.use_gpu is False and s.cache.l2_ttl_s == 60 and s.log_level == "DEBUG"


def test_empty_values_mean_unset() -> None:
    s = Settings.from_env({"REDIS_URL": "", "FEATURES_FILE": "", "ModelStorage": ""})
    assert s.redis_url is None and s.features_file is None and not s.uses_blob_models


@pytest.mark.parametrize(
    "env",
    [
        {"BATCH_MAX_SIZE": "0"},
        {"BATCH_WINDOW_MS": "-1"},
        {"CACHE_L1_TTL_S": "0"},
        {"CACHE_L2_TTL_S": "-5"},
        {"ORT_INTRA_OP_THREADS": "-1"},
        {"MAX_BATCH_ITEMS": "2000"},
        {"MAX_BODY_BYTES": "10"},
        {"BATCH_MAX_SIZE": "eight"},
    ],
)
def test_bad_values_fail_at_start_with_the_setting_name(env: dict[str, str]) -> None:
    with pytest.raises((SettingsError, ValueError)):
        Settings.from_env(env)


def test_every_name_read_is_listed_for_the_infra_checks() -> None:
    class Recording(dict[str, str]):
        def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
            read.add(key)
            return super().get(key, default)

    read: set[str] = set()
    Settings.from_env(Recording())
    assert read == set(APP_SETTING_NAMES) | set(LOCAL_SETTING_NAMES)
    assert not set(APP_SETTING_NAMES) & set(LOCAL_SETTING_NAMES)


def test_every_prediction_in_redis_must_expire() -> None:
    """Only keys with a TTL are evictable under volatile-lru: a prediction without one could fill Redis."""
    with pytest.raises(SettingsError, match="CACHE_L2_TTL_S"):
        CachePolicy(l2_ttl_s=0)
    assert CachePolicy().l2_ttl_s == 3600


def test_tune_gc_freezes_start_up_objects_and_raises_the_threshold() -> None:
    old = gc.get_threshold()
    try:
        tune_gc(12_345)
        assert gc.get_threshold()[0] == 12_345 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)


REPO = Path(__file__).resolve().parent.parent
# Values the Functions host and its extensions read (not ours): named in local.settings.json.example only.
HOST_SETTINGS = {
    "FUNCTIONS_WORKER_RUNTIME",
    "AzureWebJobsStorage",
    "PYTHON_ENABLE_OPENTELEMETRY",
    "OUTCOMES_REPORT_SCHEDULE",  # the timer's %schedule%: the host resolves it, the app never reads it
}


def test_the_settings_page_table_is_the_declaration() -> None:
    assert markdown_table(Settings) in (REPO / "docs" / "settings.md").read_text(), (
        "docs/settings.md's settings table: run `make readme`"
    )


def test_the_settings_page_check_catches_a_stale_row() -> None:
    """Mutation: a default changed in code but not in docs/settings.md must fail the check above."""
    readme = (
        (REPO / "docs" / "settings.md")
        .read_text()
        .replace("| `BATCH_MAX_SIZE` | int | `8` |", "| `BATCH_MAX_SIZE` | int | `16` |")
    )
    assert markdown_table(Settings) not in readme


def test_local_settings_example_names_only_declared_settings_with_valid_values() -> None:
    values: dict[str, str] = json.loads((REPO / "local.settings.json.example").read_text())["Values"]
    ours = {k: v for k, v in values.items() if k not in HOST_SETTINGS}
    assert set(ours) <= set(APP_SETTING_NAMES) | set(LOCAL_SETTING_NAMES), (
        set(ours) - set(APP_SETTING_NAMES) - set(LOCAL_SETTING_NAMES)
    )
    # NOTE: locally ModelStorage (a connection string to Azurite) stands for Azure's identity-based URI
    expected = set(APP_SETTING_NAMES) - {"ModelStorage__blobServiceUri"}
    assert expected <= set(ours), f"missing from the example: {expected - set(ours)}"
    Settings.from_env(ours)  # every example value parses


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"BATCH_MAX_SIZE": "eight"}, "BATCH_MAX_SIZE: expected an integer, got 'eight'"),
        ({"PREDICTION_L2": "sometimes"}, "PREDICTION_L2: expected one of auto|always|never, got 'sometimes'"),
        ({"ORT_USE_GPU": "maybe"}, "ORT_USE_GPU: expected true or false, got 'maybe'"),
        (
            {"REDIS_URL": "http://user:hunter2@cache:6379"},
            "REDIS_URL: expected a redis://, rediss:// or unix:// URL with a host",
        ),
        (
            {"REDIS_URL": "redis://:hunter2@cache:port/0"},
            "REDIS_URL: expected a redis://, rediss:// or unix:// URL with a host",
        ),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting_and_never_a_secret(env: dict[str, str], line: str) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert caught.value.detail == line and "hunter2" not in str(caught.value)


def test_make_run_exits_non_zero_with_one_line_on_a_bad_setting() -> None:
    env = {**os.environ, "REDIS_URL": "not a url", "PORT": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "shared"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "fraud scoring: invalid settings: REDIS_URL: expected a redis://, rediss:// or unix:// URL with a host"
    ]
    assert "Traceback" not in done.stderr + done.stdout


def test_grpc_with_several_workers_is_refused() -> None:
    """Each worker process would try to bind GRPC_PORT; all but one would fail, forever."""
    with pytest.raises(SettingsError, match="WORKERS"):
        Settings.from_env({"GRPC_PORT": "8001", "WORKERS": "2"})
    assert Settings.from_env({"GRPC_PORT": "8001", "WORKERS": "1"}).grpc_port == 8001


def test_a_test_that_leaves_the_gc_tuned_fails(tmp_path: Path) -> None:
    """The guard of tests/conftest.py (`_gc_as_it_was`), shown to catch the leak it exists for."""
    done = offender_run(
        tmp_path, "from shared.core.wiring import tune_gc\n\n\ndef test_tunes() -> None:\n    tune_gc(1000)\n"
    )
    assert done.returncode != 0 and "left the GC tuned" in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"PORT": "70000"}, "PORT: expected a TCP port within 1..65535, got 70000"),
        ({"GRPC_PORT": "70000"}, "GRPC_PORT: expected 0 (no gRPC server) or a TCP port within 1..65535, got 70000"),
        ({"LLM_MAX_SHARE": "2"}, "LLM_MAX_SHARE: expected a share within (0, 1], got 2"),
        ({"DRIFT_REFERENCE": "5"}, "DRIFT_REFERENCE: expected 0 (no drift) or an integer within 100..1000000, got 5"),
        ({"CACHE_L2_TTL_S": "0"}, "CACHE_L2_TTL_S: expected a number > 0 (a prediction must be evictable), got 0"),
        ({"CANARY_MIN_EVENTS": "5000"}, "CANARY_MIN_EVENTS: expected an integer <= CANARY_WINDOW"),
        ({"FEATURE_STORE": "redis"}, "FEATURE_STORE: expected one of native|feast, got 'redis'"),
    ],
)
def test_a_value_outside_the_bounds_declared_with_its_setting_names_the_setting_once(
    env: dict[str, str], line: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    assert caught.value.detail == line
    assert caught.value.detail.count(next(iter(env))) == 1


def test_the_edges_of_declared_bounds_are_kept_and_zero_may_mean_off() -> None:
    edges = {"PORT": "65535", "GRPC_PORT": "0", "LLM_MAX_SHARE": "1", "DRIFT_REFERENCE": "0", "BATCH_WINDOW_MS": "0"}
    settings = Settings.from_env(edges)
    assert (settings.port, settings.grpc_port, settings.review.max_share) == (65535, 0, 1.0)
    assert (settings.drift.reference, settings.batch.window_ms) == (0, 0.0)
    with pytest.raises(SettingsError, match="LLM_MAX_SHARE"):
        Settings.from_env({"LLM_MAX_SHARE": "0"})  # (0, 1]: the open end refuses its edge


def test_a_value_fixed_by_design_is_bounded_too() -> None:
    from shared.policies import PredictionLogPolicy

    with pytest.raises(SettingsError) as caught:
        PredictionLogPolicy(buffer=5)
    assert caught.value.detail == "PredictionLogPolicy.buffer: expected an integer within 100..10000000, got 5"
