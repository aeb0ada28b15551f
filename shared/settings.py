"""Every setting the service reads, in one place, read once.

`Settings.from_env()` is the only reader of the process environment. Everything
else receives a `Settings` (or one of its small policy objects) as an argument;
tests build `Settings(...)` directly instead of patching the environment.

Names are the app-setting names used in Azure, in `local.settings.json` and by
`make run`; `APP_SETTING_NAMES` lists them for the infra checks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from starlette.config import Config

__all__ = ["APP_SETTING_NAMES", "LOCAL_SETTING_NAMES", "BatchPolicy", "CachePolicy", "OrtOptions", "Settings"]

GraphOptimization = Literal["disable", "basic", "extended", "all"]
PredictionL2 = Literal["auto", "always", "never"]


class SettingsError(ValueError):
    """A setting has a value the service cannot run with."""


@dataclass(frozen=True)
class BatchPolicy:
    """How requests are grouped before the model runs.

    `window_ms`: the longest a request waits for company once a batch is open.
    `max_size`: a full batch runs at once. A lone request on an idle model never waits.
    """

    window_ms: float = 5.0
    max_size: int = 8

    def __post_init__(self) -> None:
        if not 0 <= self.window_ms <= 1000:
            raise SettingsError(f"BATCH_WINDOW_MS must be within 0..1000, got {self.window_ms}")
        if not 1 <= self.max_size <= 1024:
            raise SettingsError(f"BATCH_MAX_SIZE must be within 1..1024, got {self.max_size}")

    @property
    def window_s(self) -> float:
        return self.window_ms / 1000.0


@dataclass(frozen=True)
class CachePolicy:
    """Sizes and lifetimes of the two cache tiers.

    `l2_ttl_s=0` keeps predictions in Redis without expiry: a prediction never goes
    stale (its key holds the model version and the exact feature row), and Redis's
    allkeys-lru policy evicts the coldest. A TTL costs a SET per key instead of one MSET.

    `prediction_l2`: whether predictions go through Redis. `auto` uses it only while a
    round-trip costs less than the model run it would save (both measured as they go);
    `always` and `never` fix the choice.
    """

    l1_size: int = 50_000
    l1_ttl_s: float = 30.0
    l2_ttl_s: float = 0.0
    features_l1_ttl_s: float = 5.0
    redis_timeout_ms: float = 50.0
    prediction_l2: PredictionL2 = "auto"

    def __post_init__(self) -> None:
        if self.prediction_l2 not in ("auto", "always", "never"):
            raise SettingsError(f"PREDICTION_L2 must be auto|always|never, got {self.prediction_l2!r}")
        if self.l1_size < 0:
            raise SettingsError(f"CACHE_L1_SIZE must be >= 0, got {self.l1_size}")
        if self.l2_ttl_s < 0:
            raise SettingsError(f"CACHE_L2_TTL_S must be >= 0 (0: no expiry, LRU evicts), got {self.l2_ttl_s}")
        for name, value in (
            ("CACHE_L1_TTL_S", self.l1_ttl_s),
            ("FEATURES_L1_TTL_S", self.features_l1_ttl_s),
            ("REDIS_TIMEOUT_MS", self.redis_timeout_ms),
        ):
            if value <= 0:
                raise SettingsError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True)
class OrtOptions:
    """ONNX Runtime session options."""

    intra_op_threads: int = 1
    inter_op_threads: int = 1
    graph_optimization: GraphOptimization = "all"
    use_gpu: bool = True
    use_tensorrt: bool = False
    inline: bool = True

    def __post_init__(self) -> None:
        if self.intra_op_threads < 0 or self.inter_op_threads < 0:
            raise SettingsError("ORT_*_THREADS must be >= 0 (0 lets ONNX Runtime choose)")
        if self.graph_optimization not in ("disable", "basic", "extended", "all"):
            raise SettingsError(f"ORT_GRAPH_OPTIMIZATION must be disable|basic|extended|all, got {self.graph_optimization!r}")


@dataclass(frozen=True)
class Settings:
    """The whole configuration of one process."""

    redis_url: str | None = None
    redis_prefix: str = ""
    redis_use_entra: bool = False
    models_dir: str = "models"
    model_storage: str | None = None
    model_storage_blob_uri: str | None = None
    models_container: str = "models"
    default_model: str = "fraud"
    features_file: str | None = "data/demo_users.json"
    batch: BatchPolicy = field(default_factory=BatchPolicy)
    cache: CachePolicy = field(default_factory=CachePolicy)
    ort: OrtOptions = field(default_factory=OrtOptions)
    max_body_bytes: int = 64 * 1024
    max_batch_items: int = 256
    models_keep_versions: int = 2
    gc_gen0_threshold: int = 50_000
    port: int = 7071
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1024:
            raise SettingsError(f"MAX_BODY_BYTES must be >= 1024, got {self.max_body_bytes}")
        if self.gc_gen0_threshold < 0:
            raise SettingsError("GC_GEN0_THRESHOLD must be >= 0 (0 keeps Python's default)")
        if self.models_keep_versions < 1:
            raise SettingsError("MODELS_KEEP_VERSIONS must be >= 1")

    @property
    def uses_blob_models(self) -> bool:
        return bool(self.model_storage or self.model_storage_blob_uri)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from `environ` (the process environment by default)."""
        config = Config(environ=dict(os.environ if environ is None else environ))
        return cls(
            redis_url=config("REDIS_URL", default=None) or None,
            redis_prefix=config("REDIS_KEY_PREFIX", default=""),
            redis_use_entra=config("REDIS_USE_ENTRA", cast=bool, default=False),
            models_dir=config("MODELS_DIR", default="models"),
            model_storage=config("ModelStorage", default=None) or None,
            model_storage_blob_uri=config("ModelStorage__blobServiceUri", default=None) or None,
            models_container=config("MODELS_CONTAINER", default="models"),
            default_model=config("DEFAULT_MODEL", default="fraud"),
            features_file=config("FEATURES_FILE", default="data/demo_users.json") or None,
            batch=BatchPolicy(
                window_ms=config("BATCH_WINDOW_MS", cast=float, default=5.0),
                max_size=config("BATCH_MAX_SIZE", cast=int, default=8),
            ),
            cache=CachePolicy(
                l1_size=config("CACHE_L1_SIZE", cast=int, default=50_000),
                l1_ttl_s=config("CACHE_L1_TTL_S", cast=float, default=30.0),
                l2_ttl_s=config("CACHE_L2_TTL_S", cast=float, default=0.0),
                features_l1_ttl_s=config("FEATURES_L1_TTL_S", cast=float, default=5.0),
                redis_timeout_ms=config("REDIS_TIMEOUT_MS", cast=float, default=50.0),
                prediction_l2=config("PREDICTION_L2", default="auto"),  # type: ignore[arg-type]
            ),
            ort=OrtOptions(
                intra_op_threads=config("ORT_INTRA_OP_THREADS", cast=int, default=1),
                inter_op_threads=config("ORT_INTER_OP_THREADS", cast=int, default=1),
                graph_optimization=config("ORT_GRAPH_OPTIMIZATION", default="all"),  # type: ignore[arg-type]
                use_gpu=config("ORT_USE_GPU", cast=bool, default=True),
                use_tensorrt=config("ORT_USE_TENSORRT", cast=bool, default=False),
                inline=config("ORT_INLINE", cast=bool, default=True),
            ),
            max_body_bytes=config("MAX_BODY_BYTES", cast=int, default=64 * 1024),
            max_batch_items=config("MAX_BATCH_ITEMS", cast=int, default=256),
            models_keep_versions=config("MODELS_KEEP_VERSIONS", cast=int, default=2),
            gc_gen0_threshold=config("GC_GEN0_THRESHOLD", cast=int, default=50_000),
            port=config("PORT", cast=int, default=7071),
            log_level=config("LOG_LEVEL", default="INFO").upper(),
        )


# NOTE: every name `Settings.from_env` reads is in one of these two tuples. Infra tests
# check each APP_SETTING_NAMES entry is set on the Container App; the local-only ones are
# a connection string (Azure uses the identity-based ModelStorage__blobServiceUri) and the
# port (the Functions host owns it in Azure).
LOCAL_SETTING_NAMES: tuple[str, ...] = ("ModelStorage", "PORT")
APP_SETTING_NAMES: tuple[str, ...] = (
    "REDIS_URL",
    "REDIS_KEY_PREFIX",
    "REDIS_USE_ENTRA",
    "MODELS_DIR",
    "ModelStorage__blobServiceUri",
    "MODELS_CONTAINER",
    "DEFAULT_MODEL",
    "FEATURES_FILE",
    "BATCH_WINDOW_MS",
    "BATCH_MAX_SIZE",
    "CACHE_L1_SIZE",
    "CACHE_L1_TTL_S",
    "CACHE_L2_TTL_S",
    "FEATURES_L1_TTL_S",
    "REDIS_TIMEOUT_MS",
    "PREDICTION_L2",
    "ORT_INTRA_OP_THREADS",
    "ORT_INTER_OP_THREADS",
    "ORT_GRAPH_OPTIMIZATION",
    "ORT_USE_GPU",
    "ORT_USE_TENSORRT",
    "ORT_INLINE",
    "MAX_BODY_BYTES",
    "MAX_BATCH_ITEMS",
    "MODELS_KEEP_VERSIONS",
    "GC_GEN0_THRESHOLD",
    "LOG_LEVEL",
)
