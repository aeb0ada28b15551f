"""The core, end to end through real ONNX Runtime (and real Redis where named)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from shared.build import build_service
from shared.errors import InvalidEvent, ModelNotFound
from shared.events import decode_event
from shared.models import ModelRef
from shared.settings import Settings
from tests.conftest import event
from tests.onnx_models import make_model


def body(**overrides: object) -> bytes:
    return json.dumps(event(**overrides)).encode()


async def test_score_has_every_field(settings: Settings) -> None:
    service = await build_service(settings)
    scored = (await service.score(decode_event(body()))).as_dict()
    assert set(scored) == {"event_id", "risk_score", "decision", "reason", "model", "model_version", "source", "defaulted", "timings_ms"}
    assert 0 <= scored["risk_score"] <= 1 and scored["decision"] in ("approve", "review", "decline")
    assert (scored["model"], scored["model_version"], scored["source"]) == ("fraud", "1", "model")
    assert set(scored["timings_ms"]) == {"parse", "features", "cache", "queue", "inference", "total"}
    await service.aclose()


async def test_same_features_twice_is_a_cache_hit_with_the_same_answer(settings: Settings) -> None:
    service = await build_service(settings)
    first = await service.score(decode_event(body(event_id="a")))
    second = await service.score(decode_event(body(event_id="b")))
    assert (first.source, second.source) == ("model", "cache")
    assert first.risk_score == second.risk_score and second.event_id == "b"
    await service.aclose()


async def test_http_and_queue_requests_land_in_the_same_batch(settings: Settings) -> None:
    service = await build_service(settings)
    loaded = service.active("fraud")
    before = loaded.batcher.batches
    http_like = [service.score(decode_event(body(amount=float(i)))) for i in range(4)]
    queue_like = [service.score_json(body(amount=100.0 + i)) for i in range(4)]
    results = await asyncio.gather(*http_like, *queue_like)
    assert all(r.source == "model" for r in results)
    assert loaded.batcher.batches - before == 1  # 8 unique events, one model run
    await service.aclose()


async def test_unknown_user_defaults_are_listed(settings: Settings) -> None:
    service = await build_service(settings)
    scored = await service.score(decode_event(body(user_id="stranger")))
    assert scored.defaulted == ["user_avg_amount_30d", "user_txn_count_24h"]
    known = await service.score(decode_event(body(user_id="u1")))
    assert known.defaulted == []
    await service.aclose()


async def test_a_new_version_never_serves_an_old_prediction(settings: Settings) -> None:
    service = await build_service(settings)
    old = await service.score(decode_event(body()))
    await service.install_model(ModelRef("fraud", "2"), make_model(bias=-50.0))
    new = await service.score(decode_event(body()))
    assert (new.model_version, new.source) == ("2", "model")
    assert new.risk_score != old.risk_score
    await service.aclose()


async def test_named_model_and_errors(settings: Settings) -> None:
    service = await build_service(settings)
    with pytest.raises(ModelNotFound):
        await service.score(decode_event(body()), "nope")
    with pytest.raises(InvalidEvent):
        await service.score_json(body(amount=-5))
    mixed = await service.score_many([decode_event(body()), InvalidEvent("bad"), decode_event(body(amount=2.0))])
    assert [type(r).__name__ for r in mixed] == ["Scored", "InvalidEvent", "Scored"]
    await service.aclose()


async def test_predictions_are_shared_across_replicas_through_redis(settings: Settings, redis_url: str, redis_prefix: str, redis_client) -> None:
    shared_settings = replace(settings, redis_url=redis_url, redis_prefix=redis_prefix)
    replica_a = await build_service(shared_settings)
    replica_b = await build_service(shared_settings)
    assert (await replica_a.score(decode_event(body()))).source == "model"
    for _ in range(100):  # the L2 write is fire-and-forget
        if await redis_client.keys(redis_prefix + "pred:*"):
            break
        await asyncio.sleep(0.01)
    scored = await replica_b.score(decode_event(body()))
    assert scored.source == "cache"
    assert replica_b.stats()["predictions"] == {"l1_hits": 0, "l2_hits": 1, "misses": 0}
    await replica_a.aclose()
    await replica_b.aclose()


async def test_scoring_goes_on_when_redis_is_down(settings: Settings) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    service = await build_service(replace(settings, redis_url=f"redis://127.0.0.1:{port}/0"))
    scored = await service.score(decode_event(body()))
    assert scored.source == "model"
    assert scored.defaulted == ["user_avg_amount_30d", "user_txn_count_24h"]  # the online store is unreachable
    assert service.stats()["redis"]["errors"] >= 1
    await service.aclose()
