"""The fraud-scoring core: one service behind the HTTP, Service Bus and Blob triggers.

Layers (imports run one way, down this list; tests/test_layers.py fails on an upward one):

    settings, errors, exports, telemetry  configuration · errors · lazy surfaces · metrics, traces, logs
    events                           the payment event schema and its decoding
    cache, control, batching, background, deadlines, admission  tiers, prediction cache · records whose writes raise · micro-batcher · jobs · deadlines · admission control
    models                           spec (metadata contract) · runtime (ONNX Runtime) · source
    features, feature_store, feast_store  event + user context → the model's row (feast_store: Feast's Redis layout)
    serving, registry, decision, rollout, review, signature, ensembles  one served version · versions · score → decision · fleet sync · LLM review · tensors · ensembles
    service, build                   the transport-free core · wiring once per process
    http, openapi, triggers, asgi, __main__, local_server, queue, oip   adapters (openapi: the document of the HTTP API; queue: the Service Bus batch path; oip: V2 REST and gRPC)

Importing `shared` is cheap: every name below loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.exports import lazy_exports

if TYPE_CHECKING:
    from shared.build import ServiceHolder, build_service
    from shared.errors import ScoringError
    from shared.service import ScoringService
    from shared.settings import BatchPolicy, CachePolicy, OrtOptions, Settings

__all__ = [
    "BatchPolicy",
    "CachePolicy",
    "OrtOptions",
    "ScoringError",
    "ScoringService",
    "ServiceHolder",
    "Settings",
    "build_service",
]

_HOMES = {
    "BatchPolicy": "settings",
    "CachePolicy": "settings",
    "OrtOptions": "settings",
    "Settings": "settings",
    "ScoringError": "errors",
    "ScoringService": "service",
    "ServiceHolder": "build",
    "build_service": "build",
}


__getattr__ = lazy_exports(__name__, _HOMES)  # NOTE: PEP 562: a submodule loads when its name is first used
