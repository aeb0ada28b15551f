"""The core, end to end through real ONNX Runtime (and real Redis where named)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace

import pytest
from msgspec import to_builtins

from shared.core.service import ScoringService
from shared.domain.answers import CacheStats
from shared.domain.events import decode_event
from shared.errors import InvalidEvent, ModelNotFound
from shared.models.repository import ModelRef
from shared.settings import Settings
from tests.conftest import closed_port, event
from tests.onnx_models import make_model

Services = Callable[[Settings], Awaitable[ScoringService]]


def body(**overrides: object) -> bytes:
    return json.dumps(event(**overrides)).encode()


async def test_score_has_every_field(service: ScoringService) -> None:
    scored = to_builtins(await service.score(decode_event(body())))
    assert set(scored) == {
        "event_id",
        "risk_score",
        "decision",
        "reason",
        "model",
        "model_version",
        "source",
        "timings_ms",
    }
    assert 0 <= scored["risk_score"] <= 1 and scored["decision"] in ("approve", "review", "decline")
    assert (scored["model"], scored["model_version"], scored["source"]) == ("fraud", "1", "model")
    assert set(scored["timings_ms"]) == {"parse", "features", "cache", "queue", "inference", "total"}


async def test_same_features_twice_is_a_cache_hit_with_the_same_answer(service: ScoringService) -> None:
    first = await service.score(decode_event(body(event_id="a")))
    second = await service.score(decode_event(body(event_id="b")))
    assert (first.source, second.source) == ("model", "cache")
    assert first.risk_score == second.risk_score and second.event_id == "b"


async def test_http_and_queue_requests_land_in_the_same_batch(service: ScoringService) -> None:
    loaded = service.active("fraud")
    before = loaded.batcher.batches
    http_like = [service.score(decode_event(body(amount=float(i)))) for i in range(4)]
    queue_like = [service.score_json(body(amount=100.0 + i)) for i in range(4)]
    results = await asyncio.gather(*http_like, *queue_like)
    assert all(r.source == "model" for r in results)
    assert loaded.batcher.batches - before == 1  # 8 unique events, one model run


async def test_with_answer_defaulted_an_unknown_users_defaults_are_listed(
    settings: Settings, services: Services
) -> None:
    service = await services(replace(settings, answer_defaulted=True))
    scored = await service.score(decode_event(body(user_id="stranger")))
    assert scored.defaulted == ["user_avg_amount_30d", "user_txn_count_24h"]
    assert scored.defaulted_why == {"user_avg_amount_30d": "missing", "user_txn_count_24h": "missing"}
    known = await service.score(decode_event(body(user_id="u1")))
    assert known.defaulted == []


async def test_by_default_an_answer_cannot_tell_an_unknown_user_from_a_known_one(service: ScoringService) -> None:
    """Whether a user's features were found is the operator's to know (ANSWER_DEFAULTED off): the
    two answers have the same fields, and neither names a default."""
    stranger = to_builtins(await service.score(decode_event(body(event_id="s", user_id="stranger"))))
    known = to_builtins(await service.score(decode_event(body(event_id="k", user_id="u1"))))
    assert set(stranger) == set(known) and not {"defaulted", "defaulted_why"} & set(stranger)
    assert service.stats().events.defaulted == 1  # the operator still sees it


async def test_a_new_version_never_serves_an_old_prediction(service: ScoringService) -> None:
    old = await service.score(decode_event(body()))
    await service.admin.install_model(ModelRef("fraud", "2"), make_model(bias=-50.0))
    new = await service.score(decode_event(body()))
    assert (new.model_version, new.source) == ("2", "model")
    assert new.risk_score != old.risk_score


async def test_named_model_and_errors(service: ScoringService) -> None:
    with pytest.raises(ModelNotFound):
        await service.score(decode_event(body()), "nope")
    with pytest.raises(InvalidEvent):
        await service.score_json(body(amount=-5))
    mixed = await service.score_many([decode_event(body()), InvalidEvent("bad"), decode_event(body(amount=2.0))])
    assert [type(r).__name__ for r in mixed] == ["Scored", "InvalidEvent", "Scored"]


async def test_predictions_are_shared_across_replicas_through_redis(
    settings: Settings, services: Services, redis_url: str, redis_prefix: str, redis_client
) -> None:
    shared_settings = replace(settings, redis_url=redis_url, redis_prefix=redis_prefix)
    replica_a = await services(shared_settings)
    replica_b = await services(shared_settings)
    assert (await replica_a.score(decode_event(body()))).source == "model"
    for _ in range(1000):  # the L2 write is fire-and-forget: up to 10 s on a loaded machine
        if [key async for key in redis_client.scan_iter(match=redis_prefix + "pred:*", count=1000)]:
            break
        await asyncio.sleep(0.01)
    scored = await replica_b.score(decode_event(body()))
    assert scored.source == "cache"
    assert replica_b.stats().predictions == CacheStats(l1_hits=0, l2_hits=1, misses=0)


async def test_scoring_goes_on_when_redis_is_down(settings: Settings, services: Services) -> None:
    service = await services(replace(settings, redis_url=f"redis://127.0.0.1:{closed_port()}/0", answer_defaulted=True))
    scored = await service.score(decode_event(body()))
    assert scored.source == "model"
    assert scored.defaulted == ["user_avg_amount_30d", "user_txn_count_24h"]  # the online store is unreachable
    assert (redis := service.stats().redis) is not None and redis.errors >= 1


async def test_the_decision_carries_its_reason(service: ScoringService) -> None:
    scored = await service.score(decode_event(body()))
    thresholds = service.active().spec.thresholds
    expected = {"approve": f"score < review threshold {thresholds.review}",
                "review": f"score >= review threshold {thresholds.review}",
                "decline": f"score >= decline threshold {thresholds.decline}"}  # fmt: skip
    assert scored.reason == expected[scored.decision]
    assert "scores" not in to_builtins(scored)  # one opinion: the local model's


async def test_a_decider_that_wraps_the_local_one_can_overrule_it(settings: Settings) -> None:
    from shared.domain.decision import ThresholdDecider, Verdict

    class SecondOpinion:
        async def decide(self, event, score, thresholds, wait_s=None):  # type: ignore[no-untyped-def]
            local = await ThresholdDecider().decide(event, score, thresholds)
            return Verdict("decline", "reviewer: gift cards to a new merchant", {**local.scores, "reviewer": 0.97})

    from shared.core.wiring import build_service

    core = await build_service(settings)
    try:
        core._decider = SecondOpinion()
        scored = to_builtins(await core.score(decode_event(body())))
        assert scored["decision"] == "decline" and scored["reason"].startswith("reviewer:")
        assert set(scored["scores"]) == {"model", "reviewer"}  # type: ignore[arg-type]
    finally:
        await core.aclose()


async def test_infer_scores_rows_of_the_live_version_named_or_not(service: ScoringService) -> None:
    import numpy as np

    await service.admin.install_model(ModelRef("fraud", "2"), make_model(bias=-50.0))
    width = service.active("fraud", "1").spec.width
    rows = [np.zeros(width, dtype=np.float32), np.ones(width, dtype=np.float32)]
    named, live = await service.infer("fraud", "2", rows), await service.infer("fraud", None, rows)
    assert (named.model_version, live.model_version) == ("2", "2") and named.scores == live.scores
    with pytest.raises(ModelNotFound, match="not the live version"):  # an older version: not the caller's pick
        await service.infer("fraud", "1", rows)


async def test_readiness_and_models_come_from_the_core(service: ScoringService) -> None:
    assert to_builtins(service.readiness()) == {"status": "ready", "models": ["fraud"]}
    assert [m.name for m in service.models()] == ["fraud"]
    stats = service.stats()
    assert set(to_builtins(stats)) == {
        "events",
        "predictions",
        "features",
        "feature_source",
        "redis",
        "reviews",
        "admission",
    }
    assert stats.reviews is None  # AZURE_OPENAI_ENDPOINT unset: reviews are off


async def test_every_tier_counts_what_it_served(settings: Settings, services: Services) -> None:
    """With no Redis configured, rows that ran the model still count as misses."""
    core = await services(replace(settings, cache=replace(settings.cache, l1_size=1000)))
    for i in range(3):
        await core.score(decode_event(body(amount=float(i))))
    await core.score(decode_event(body(amount=0.0)))
    assert core.stats().predictions == CacheStats(l1_hits=1, l2_hits=0, misses=3)


async def test_with_redis_down_scoring_goes_on_and_readiness_and_stats_say_so(
    settings: Settings, services: Services
) -> None:
    """Redis down: scoring goes on (on defaults), and readiness and stats say so."""
    core = await services(replace(settings, redis_url=f"redis://127.0.0.1:{closed_port()}/0"))
    for i in range(120):
        await core.score(decode_event(body(amount=float(i))))
    readiness = core.readiness()
    assert readiness.ready  # keep serving: that is right
    assert any(r.startswith("redis: ") for r in readiness.degraded), readiness.degraded
    assert any(r.startswith("features: ") for r in readiness.degraded), readiness.degraded
    events = core.stats().events
    assert events.scored == 120 and events.defaulted_share == 1.0
    assert to_builtins(readiness)["degraded"] == readiness.degraded


async def test_a_healthy_core_lists_nothing_degraded(service: ScoringService) -> None:
    for i in range(120):
        await service.score(decode_event(body(amount=float(i))))
    assert service.readiness().degraded == [] and service.stats().events.defaulted_share == 0.0


async def test_a_model_whose_features_resolve_to_nothing_is_refused_by_name(service: ScoringService) -> None:
    """A model whose features resolve to nothing is rejected with their names; the current version serves on."""
    from shared.domain.spec import FeatureDef
    from shared.errors import ModelInvalid

    alien = (FeatureDef("txn_value_usd", 0.0), FeatureDef("colour=red", 0.0), FeatureDef("user_avg_amount_30d", 1.0))
    with pytest.raises(ModelInvalid, match=r"resolve to nothing .*: txn_value_usd, colour=red$"):
        await service.admin.install_model(ModelRef("fraud", "2"), make_model(features=alien))
    assert service.active().version == "1"


async def test_the_redis_feature_store_publishes_the_names_it_serves(
    settings: Settings, services: Services, redis_url: str, redis_prefix: str, redis_client
) -> None:
    from shared.domain.spec import FeatureDef
    from shared.errors import ModelInvalid
    from shared.features.store import seed_redis

    await seed_redis(redis_url, {"u1": {"user_avg_amount_30d": 5.0, "user_txn_count_24h": 1.0}}, prefix=redis_prefix)
    core = await services(replace(settings, redis_url=redis_url, redis_prefix=redis_prefix))
    with pytest.raises(ModelInvalid, match="user_age_days"):
        await core.admin.install_model(ModelRef("fraud", "2"), make_model(features=(FeatureDef("user_age_days", 0.0),)))
    await core.admin.install_model(
        ModelRef("fraud", "3"), make_model(features=(FeatureDef("user_txn_count_24h", 0.0),))
    )
    assert core.active().version == "3"


async def test_rows_that_ran_the_model_count_as_misses_whatever_the_l2_policy(
    settings: Settings, services: Services, redis_url: str, redis_prefix: str
) -> None:
    """Rows that ran the model count as misses whether or not predictions go through Redis."""
    for policy in ("never", "always"):
        cache = replace(settings.cache, prediction_l2=policy)
        core = await services(replace(settings, redis_url=redis_url, redis_prefix=redis_prefix + policy, cache=cache))
        for i in range(5):
            await core.score(decode_event(body(amount=float(i))))
        await core.score(decode_event(body(amount=0.0)))
        predictions = core.stats().predictions
        assert predictions == CacheStats(l1_hits=1, l2_hits=0, misses=5), (policy, predictions)


def batch_of(n: int, users: int = 4, start: int = 0) -> bytes:
    events = [event(event_id=f"b-{start + i}", user_id=f"u{i % users}", amount=10.0 + start + i) for i in range(n)]
    return json.dumps({"events": events}).encode()


async def test_a_batch_request_runs_as_its_own_model_batches_and_answers_as_single_events(
    service: ScoringService,
) -> None:
    loaded = service.active()
    runs, rows, lookups = loaded.batcher.batches, loaded.rows_run, sum(to_builtins(service.stats().features).values())
    together = await service.score_batch_json(batch_of(64, users=4))
    assert loaded.batcher.batches == runs + 1 and loaded.rows_run == rows + 64  # 64 rows: one model run
    assert sum(to_builtins(service.stats().features).values()) == lookups + 4  # once per user
    assert [s.event_id for s in together] == [f"b-{i}" for i in range(64)]  # type: ignore[union-attr]
    alone = [await service.score(decode_event(json.dumps(event(event_id=f"b-{i}", user_id=f"u{i % 4}", amount=10.0 + i)).encode())) for i in range(64)]  # fmt: skip
    for a, b in zip(together, alone, strict=True):
        assert not isinstance(a, Exception)
        assert (a.risk_score, a.decision, a.reason, a.defaulted) == (b.risk_score, b.decision, b.reason, b.defaulted)
        assert b.source == "cache"  # the batch's scores went into the same cache


async def test_a_batch_larger_than_one_run_is_chunked_and_keeps_its_errors_in_place(service: ScoringService) -> None:
    loaded = service.active()
    runs = loaded.batcher.batches
    items = [event(event_id=f"c-{i}", amount=1000.0 + i) for i in range(150)]
    items[7]["amount"] = -1  # a bad item keeps its slot
    results = await service.score_batch_json(json.dumps({"events": items}).encode())
    assert loaded.batcher.batches == runs + 3  # 149 rows: runs of 64, 64, 21
    assert isinstance(results[7], InvalidEvent)
    assert [r.event_id for i, r in enumerate(results) if i != 7] == [f"c-{i}" for i in range(150) if i != 7]  # type: ignore[union-attr]


async def test_a_model_run_off_the_loop_scores_a_batch_event_by_event(
    services: Callable[[Settings], Awaitable[ScoringService]], settings: Settings
) -> None:
    core = await services(replace(settings, ort=replace(settings.ort, inline=False)))
    loaded = core.active()
    results = await core.score_batch_json(batch_of(16))
    assert all(not isinstance(r, Exception) and r.source == "model" for r in results)
    assert loaded.batcher.items == 16 and loaded.batcher.batches >= 2  # through the batcher, 8 at most per run


async def test_no_prediction_l1_keeps_the_features_l1(
    services: Callable[[Settings], Awaitable[ScoringService]], settings: Settings
) -> None:
    """CACHE_L1_SIZE=0 once sized the features' L1 too: every event read its user from Redis."""
    core = await services(replace(settings, cache=replace(settings.cache, l1_size=0)))
    for i in range(3):
        await core.score(decode_event(body(event_id=f"l1-{i}", amount=500.0 + i)))
    assert core.stats().features.l1_hits == 2
