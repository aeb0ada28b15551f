"""The fraud-scoring core: one service behind the HTTP, Service Bus and Blob triggers.

Importing `shared` is cheap: heavy modules (onnxruntime, redis, Azure SDKs) load
when the service is built, on first use.
"""

from shared.build import ServiceHolder, build_service
from shared.errors import ScoringError
from shared.settings import BatchPolicy, CachePolicy, OrtOptions, Settings

__all__ = ["BatchPolicy", "CachePolicy", "OrtOptions", "ScoringError", "ServiceHolder", "Settings", "build_service"]
