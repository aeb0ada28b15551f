import gc

import pytest

from shared.build import tune_gc
from shared.settings import APP_SETTING_NAMES, LOCAL_SETTING_NAMES, BatchPolicy, CachePolicy, Settings, SettingsError


def test_defaults_are_the_embedded_local_setup() -> None:
    s = Settings.from_env({})
    assert s.redis_url is None and not s.uses_blob_models
    assert (s.models_dir, s.default_model, s.port) == ("models", "fraud", 7071)
    assert (s.batch.window_ms, s.batch.max_size) == (5.0, 8)


def test_values_are_read_and_cast() -> None:
    s = Settings.from_env({
        "REDIS_URL": "redis://h:6379/0", "BATCH_WINDOW_MS": "2.5", "BATCH_MAX_SIZE": "16", "ORT_USE_GPU": "false",
        "ModelStorage__blobServiceUri": "https://acct.blob.core.windows.net", "CACHE_L2_TTL_S": "60", "LOG_LEVEL": "debug",
    })
    assert s.redis_url == "redis://h:6379/0" and s.uses_blob_models
    assert s.batch == BatchPolicy(window_ms=2.5, max_size=16)
    assert s.ort.use_gpu is False and s.cache.l2_ttl_s == 60 and s.log_level == "DEBUG"


def test_empty_values_mean_unset() -> None:
    s = Settings.from_env({"REDIS_URL": "", "FEATURES_FILE": "", "ModelStorage": ""})
    assert s.redis_url is None and s.features_file is None and not s.uses_blob_models


@pytest.mark.parametrize(
    "env",
    [{"BATCH_MAX_SIZE": "0"}, {"BATCH_WINDOW_MS": "-1"}, {"CACHE_L1_TTL_S": "0"}, {"CACHE_L2_TTL_S": "-5"},
     {"ORT_GRAPH_OPTIMIZATION": "max"}, {"MAX_BODY_BYTES": "10"}, {"BATCH_MAX_SIZE": "eight"}],
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


def test_cache_policy_allows_no_l2_expiry() -> None:
    assert CachePolicy(l2_ttl_s=0).l2_ttl_s == 0


def test_tune_gc_freezes_start_up_objects_and_raises_the_threshold() -> None:
    old = gc.get_threshold()
    try:
        tune_gc(12_345)
        assert gc.get_threshold()[0] == 12_345 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*old)
