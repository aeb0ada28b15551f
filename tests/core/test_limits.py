"""What adapters must know of the settings: the core's `Limits`, read once from them."""

from __future__ import annotations

import dataclasses

from shared.core.limits import Limits
from shared.core.service import ScoringService
from shared.settings import Settings


def test_limits_carry_the_caps_and_the_listener_as_set() -> None:
    settings = Settings.from_env(
        {"MAX_BODY_BYTES": "2048", "LLM_QUEUE_TIMEOUT_MS": "1500", "BODY_TIMEOUT_MS": "250", "GRPC_PORT": "8001"}
    )
    limits = Limits.of(settings)
    assert (limits.max_body_bytes, limits.review_queue_wait_s, limits.body_timeout_s) == (2048, 1.5, 0.25)
    assert (limits.grpc_port, limits.max_batch_items, limits.models_container) == (8001, 256, "models")


async def test_the_service_hands_adapters_its_limits(service: ScoringService, settings: Settings) -> None:
    assert service.limits == Limits.of(settings)
    assert dataclasses.is_dataclass(service.limits) and not service.refuses()
