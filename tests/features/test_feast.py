"""The Feast online store, read as Feast wrote it: proved against Feast itself on a real Redis.

Feast (PyPI, in .venv-feast) applies a feature repo (two entities, one with an int64 key; three
views, one with a TTL), materialises it into the tests' Redis under a fresh project, and answers
`get_online_features` for 500 entity rows; the service's own reader must give the same values
for the same rows (nulls, missing entities, the int64 key, a view over both keys), and, with each
view's max age taken from Feast's `ttl`, the stale view's values as `stale`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio import Redis

from shared.core.service import ScoringService
from shared.domain.events import PaymentEvent
from shared.domain.feast_spec import parse_feast
from shared.domain.spec import FeatureDef, ModelSpec, Thresholds
from shared.errors import ModelInvalid
from shared.features.feast import (
    FeastStore,
    decode_timestamp,
    decode_value,
    encode_timestamp,
    encode_value,
    field_name,
    murmur3_32,
)
from shared.features.mapping import Absent
from shared.models.registry import ModelRegistry
from shared.models.repository import DirectoryRepository
from shared.models.served import LoadedModel
from shared.settings import BatchPolicy, CachePolicy, OrtOptions, Settings
from tests.conftest import event
from tests.feast import harness
from tests.onnx_models import make_model


def payment(user_id: str, merchant_id: object) -> PaymentEvent:
    body = json.dumps(event(user_id=user_id, merchant_id=str(merchant_id)))
    return msgspec.json.decode(body, type=PaymentEvent)


def model_spec(feast: dict[str, Any], columns: list[str] | None = None) -> ModelSpec:
    names = columns or list(harness.FEATURES)
    return ModelSpec(
        tuple(FeatureDef(n, -1.0) for n in names), "x", "y", 1, Thresholds(0.5, 0.8), feast=parse_feast(feast, names)
    )


async def clean(redis_url: str, project: str) -> None:
    client = Redis.from_url(redis_url)
    keys = [k async for k in client.scan_iter(match=b"*" + project.encode(), count=1000)]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture(scope="module")
def materialised(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Feast's repo applied and materialised under a fresh project; its own online answer."""
    project = harness.new_project()
    data = harness.dataset(seed=25, now=harness.now())
    spec = {"redis": harness.feast_connection(redis_url), "project": project, **data}
    try:
        answer = harness.run_feast(spec, tmp_path_factory.mktemp("feast"))
        yield {"project": project, **data, **answer}
    finally:
        asyncio.run(clean(redis_url, project))


@pytest.fixture
async def store(redis_url: str, materialised: dict[str, Any]) -> AsyncIterator[FeastStore]:
    found = FeastStore.from_url(redis_url, project=materialised["project"], timeout_s=2.0, l1_size=0, l1_ttl_s=1.0)
    yield found
    await found.aclose()


def same(ours: object, feasts: object) -> bool:
    if feasts is None:
        return isinstance(ours, Absent)
    return ours == feasts and type(ours) is not Absent


async def test_every_value_read_equals_feasts_own_online_read(store: FeastStore, materialised: dict[str, Any]) -> None:
    spec = model_spec(harness.serving_feast({}))  # no max age: Feast's Python read ignores the TTL too
    rows = materialised["entity_rows"]
    contexts = await store.contexts(spec, [payment(r["user_id"], r["merchant_id"]) for r in rows])
    online = materialised["online"]
    checked = nulls = 0
    for i, context in enumerate(contexts):
        assert context is not None
        for ref in harness.FEATURES:
            feasts = online[ref.split(":")[1]][i]
            assert same(context[ref], feasts), (rows[i], ref, context[ref], feasts)
            checked += 1
            nulls += feasts is None
    assert checked == 500 * 8 and 500 < nulls < 3000  # nulls, missing entities and values all occur
    assert store.counts["round_trips"] == 1  # the whole batch: one pipelined round trip


async def test_null_missing_and_stale_say_why(store: FeastStore, materialised: dict[str, Any]) -> None:
    spec = model_spec(harness.serving_feast(materialised["ttl_s"]))  # max ages from Feast's own ttl
    assert [v.max_age_s for v in spec.feast.views] == [None, 3600.0, 30 * 86_400.0]  # type: ignore[union-attr]
    users = {r["user_id"]: r for r in materialised["rows"]["user_stats"]}
    merchants = {r["merchant_id"]: r for r in materialised["rows"]["merchant_risk"]}
    rows = materialised["entity_rows"]
    contexts = await store.contexts(spec, [payment(r["user_id"], r["merchant_id"]) for r in rows])
    seen = set()
    for row, context in zip(rows, contexts, strict=True):
        assert context is not None
        user, merchant = users.get(row["user_id"]), merchants.get(row["merchant_id"])
        count = context["user_stats:txn_count_24h"]
        want = Absent.MISSING if user is None else Absent.NULL if user["txn_count_24h"] is None else None
        assert count == want if want is not None else count == user["txn_count_24h"]  # type: ignore[index]
        rate = context["merchant_risk:fraud_rate_30d"]
        if merchant is None:
            assert rate is Absent.MISSING
        elif harness.now() - merchant["event_timestamp"] > 3600:
            assert rate is Absent.STALE
        else:
            assert rate == merchant["fraud_rate_30d"]
        seen.add(count if isinstance(count, Absent) else "value")
        seen.add(rate if isinstance(rate, Absent) else "value")
    assert seen == {Absent.MISSING, Absent.NULL, Absent.STALE, "value"}
    views = store.stats().views
    assert not isinstance(views, msgspec.UnsetType)
    assert views["merchant_risk"].stale > 0 and views["user_stats"].null > 0


async def test_single_reads_coalesce_and_equal_the_batch_read(store: FeastStore, materialised: dict[str, Any]) -> None:
    spec = model_spec(harness.serving_feast({}))
    events = [payment(r["user_id"], r["merchant_id"]) for r in materialised["entity_rows"][:64]]
    one_by_one = await asyncio.gather(*(store.context(spec, e) for e in events))
    trips = store.counts["round_trips"]
    assert trips <= 6  # three hashes per event, 64 concurrent events: a handful of pipelines, not 192 reads
    assert list(one_by_one) == await store.contexts(spec, events)


async def test_concurrent_batch_reads_share_round_trips_and_each_gets_its_own_rows(
    store: FeastStore, materialised: dict[str, Any]
) -> None:
    spec = model_spec(harness.serving_feast({}))
    events = [payment(r["user_id"], r["merchant_id"]) for r in materialised["entity_rows"][:128]]
    batches = [events[i : i + 8] for i in range(0, len(events), 8)]
    together = await asyncio.gather(*(store.contexts(spec, b) for b in batches))
    assert store.counts["round_trips"] <= 4  # 16 callers: the first alone, the rest share what follows
    alone = [await store.contexts(spec, b) for b in batches]
    assert list(together) == alone


async def test_an_event_value_feast_could_not_key_is_missing_without_a_read(
    store: FeastStore, materialised: dict[str, Any]
) -> None:
    ref = "merchant_risk:fraud_rate_30d"
    spec = model_spec({**harness.serving_feast({}), "features": [ref]}, [ref])
    (context,) = await store.contexts(spec, [payment("u0001", "m-42")])  # merchant_id is int64 in Feast
    assert context == {"merchant_risk:fraud_rate_30d": Absent.MISSING}
    assert store.counts["round_trips"] == 0


async def test_a_redis_outage_is_a_miss_and_a_reason_never_an_error(materialised: dict[str, Any]) -> None:
    dead = FeastStore.from_url("redis://127.0.0.1:1/0", project=materialised["project"], timeout_s=0.2,
                               l1_size=10, l1_ttl_s=5)  # fmt: skip
    spec = model_spec(harness.serving_feast({}))
    (context,) = await dead.contexts(spec, [payment("u0001", 1)])
    assert context is not None and set(context.values()) == {Absent.MISSING}
    assert (dead.problem() or "").startswith("redis: feast online store")
    await dead.aclose()


# -- the layout's parts, against Feast's own bytes and the reference hash ------------------


def test_field_names_are_feasts_murmur3() -> None:
    # NOTE: mmh3.hash(s, signed=False) (Feast's own hash; printed from .venv-feast) for these strings
    reference = {"": 0, "a": 1009084850, "abcd": 1139631978, "user_stats:txn_count_24h": 3291345597,
                 "héllo wörld x": 2810535280}  # fmt: skip
    assert {s: murmur3_32(s.encode()) for s in reference} == reference
    assert field_name("user_stats", "txn_count_24h") == struct.pack("<I", 3291345597)


@given(st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.text()))
def test_encoded_values_decode_to_themselves(value: object) -> None:
    decoded = decode_value(encode_value(value))  # type: ignore[arg-type]
    assert decoded is Absent.NULL if value is None else (decoded == value and type(decoded) is type(value))


@given(st.floats(0, 4e9, allow_nan=False))
def test_timestamps_round_trip(seconds: float) -> None:
    assert abs(decode_timestamp(encode_timestamp(seconds)) - seconds) < 1e-6  # type: ignore[operator]


def test_value_types_no_model_takes_are_neither_numbers_nor_errors() -> None:
    int64_list = b"\x72\x02\x01\x02"  # field 14 (int64_list_val), packed
    assert not isinstance(decode_value(int64_list), int | float | Absent)
    assert decode_value(b"\x98\x01\x00") is Absent.NULL  # null_val
    assert decode_value(None) is Absent.MISSING and decode_value(b"") is Absent.NULL


def test_metadata_that_cannot_be_read_is_refused_at_load() -> None:
    good = harness.serving_feast({})
    for broken in (
        {**good, "features": ["nope:x"]},
        {**good, "features": {"not_a_column": "user_stats:segment"}},
        {**good, "views": {"user_stats": {"entities": {"user_id": "float"}}}},
        {**good, "views": {"user_stats": {"entities": {"device_id": "string"}}}},  # no such event field
        {**good, "views": {"user_stats": {"entities": {"user_id": "string"}, "max_age_s": -1}}},
    ):
        with pytest.raises(ModelInvalid):
            parse_feast(broken, harness.FEATURES)


# -- the load check: under the Feast store, serving.feast is where user columns come from ---

USER_COLUMNS = {"user_avg": "user_stats:avg_amount_30d", "merchant_rate": "merchant_risk:fraud_rate_30d",
                "pair_count": "user_merchant:txn_count_90d"}  # fmt: skip
EVENT_COLUMNS = (FeatureDef("log_amount", 0.0), FeatureDef("channel=web", 0.0))


async def install_under_feast(features: tuple[FeatureDef, ...], feast: dict[str, Any] | None,
                              root: Path) -> LoadedModel:  # fmt: skip
    """Install a model with `features` (and `serving.feast` when given) in a registry whose catalogue is
    the Feast store's (its Redis is never read at load)."""
    store = FeastStore.from_url("redis://127.0.0.1:1/0", project="p", timeout_s=0.1, l1_size=0, l1_ttl_s=1.0)
    registry = ModelRegistry(DirectoryRepository(root), OrtOptions(), BatchPolicy(window_ms=5, max_size=8),
                             catalogue=store.catalogue)  # fmt: skip
    extra = {"serving.feast": json.dumps(feast)} if feast is not None else {}
    try:
        return await registry.install("fraud", "1", make_model(features=features, extra=extra))
    finally:
        await registry.aclose()
        await store.aclose()


async def test_a_model_whose_every_user_column_a_view_feature_fills_loads(tmp_path: Path) -> None:
    features = (*EVENT_COLUMNS, *(FeatureDef(c, 0.5) for c in USER_COLUMNS))
    loaded = await install_under_feast(features, harness.serving_feast({}, columns=USER_COLUMNS), tmp_path)
    assert loaded.spec.feast is not None and loaded.spec.feast.columns == set(USER_COLUMNS)


@pytest.mark.parametrize("unmapped", sorted(USER_COLUMNS))
async def test_a_user_column_no_view_feature_fills_is_refused_at_load(unmapped: str, tmp_path: Path) -> None:
    """The mutation: the good metadata with one column's mapping taken out must be refused, by name."""
    features = (*EVENT_COLUMNS, *(FeatureDef(c, 0.5) for c in USER_COLUMNS))
    columns = {c: ref for c, ref in USER_COLUMNS.items() if c != unmapped}
    with pytest.raises(ModelInvalid, match=rf"no 'view:feature' of serving.feast fills it .*: {unmapped}$"):
        await install_under_feast(features, harness.serving_feast({}, columns=columns), tmp_path)


async def test_a_model_with_user_columns_and_no_serving_feast_is_refused_under_the_feast_store(
    tmp_path: Path,
) -> None:
    with pytest.raises(ModelInvalid, match=r"serving.feast .*: user_avg, merchant_rate$"):
        await install_under_feast((*EVENT_COLUMNS, FeatureDef("user_avg", 0.5), FeatureDef("merchant_rate", 0.5)),
                                  None, tmp_path)  # fmt: skip
    loaded = await install_under_feast(EVENT_COLUMNS, None, tmp_path)  # event columns only: nothing to read
    assert loaded.spec.feast is None


async def test_a_join_key_no_event_carries_as_text_is_refused_at_load(tmp_path: Path) -> None:
    features = (*EVENT_COLUMNS, FeatureDef("user_avg", 0.5))
    feast = {"views": {"user_stats": {"entities": {"user_id": {"type": "string", "field": "amount"}}}},
             "features": {"user_avg": "user_stats:avg_amount_30d"}}  # fmt: skip
    with pytest.raises(ModelInvalid, match=r"join key 'user_id' reads 'amount', which is no text field"):
        await install_under_feast(features, feast, tmp_path)


# -- the core scoring from Feast: answers, readiness, metrics ----------------------------


@pytest.fixture
def feast_settings(tmp_path_factory: pytest.TempPathFactory, redis_url: str, materialised: dict[str, Any]) -> Settings:
    """A tiny model whose user columns read three views (max ages from Feast's ttl), scoring from Feast."""
    columns = {"user_avg": "user_stats:avg_amount_30d", "merchant_rate": "merchant_risk:fraud_rate_30d",
               "pair_count": "user_merchant:txn_count_90d"}  # fmt: skip
    features = (FeatureDef("log_amount", 0.0), *(FeatureDef(c, 0.5) for c in columns))
    feast = harness.serving_feast(materialised["ttl_s"], columns=columns)
    root = tmp_path_factory.mktemp("models")
    (root / "fraud" / "1").mkdir(parents=True)
    (root / "fraud" / "1" / "model.onnx").write_bytes(
        make_model(features=features, extra={"serving.feast": json.dumps(feast)})
    )
    return Settings(
        models_dir=str(root),
        redis_url=redis_url,
        feature_store="feast",
        feast_project=materialised["project"],
        features_file=None,
        cache=CachePolicy(features_l1_size=0),
        gc_gen0_threshold=0,
    )


async def test_the_core_scores_from_feast_and_says_what_defaulted_and_why(
    services: Callable[[Settings], Awaitable[ScoringService]], feast_settings: Settings, materialised: dict[str, Any]
) -> None:
    service = await services(dataclasses.replace(feast_settings, answer_defaulted=True))
    assert service.stats().feature_source == "feast"
    pair = materialised["rows"]["user_merchant"][0]
    fresh = next(r for r in materialised["rows"]["merchant_risk"] if harness.now() - r["event_timestamp"] < 3600)
    stale = next(r for r in materialised["rows"]["merchant_risk"] if harness.now() - r["event_timestamp"] > 3600)
    user = next(r for r in materialised["rows"]["user_stats"] if r["avg_amount_30d"] is not None)
    answers = await service.score_many([
        payment(user["user_id"], fresh["merchant_id"]),
        payment(pair["user_id"], pair["merchant_id"]),
        payment("nobody", "m-not-an-int"),
    ])  # fmt: skip
    first, second, third = (msgspec.to_builtins(a) for a in answers)
    assert "user_avg" not in first["defaulted"] and "merchant_rate" not in first["defaulted"]
    assert "pair_count" not in second["defaulted"]  # the view over both keys (string and int64)
    assert third["defaulted_why"] == {"user_avg": "missing", "merchant_rate": "missing", "pair_count": "missing"}
    one = msgspec.to_builtins(await service.score(payment("nobody", stale["merchant_id"])))  # the per-event path
    assert one["defaulted_why"] == {"user_avg": "missing", "merchant_rate": "stale", "pair_count": "missing"}
    for i in range(120):  # mostly on defaults: readiness says which views
        await service.score(payment(f"nobody-{i}", stale["merchant_id"]))
    degraded = [r for r in service.readiness().degraded if r.startswith("features: recent lookups")]
    assert degraded and "merchant_risk" in degraded[0] and "user_stats" in degraded[0], service.readiness().degraded
    from shared.telemetry import metrics

    assert metrics.FEATURE_DEFAULTED.values[("merchant_risk", "stale")] >= 120
    assert metrics.FEATURE_AGE.series(("merchant_risk",)).count >= 120


async def test_the_seeding_tool_writes_the_bytes_feast_writes(redis_url: str, materialised: dict[str, Any]) -> None:
    """`seed_feast` (benchmarks, the eviction test) against Feast's own materialised hashes."""
    from shared.features.feast import entity_key, seed_feast

    view = model_spec(harness.serving_feast({})).feast.views[1]  # type: ignore[union-attr]
    assert view.name == "merchant_risk"
    rows = materialised["rows"]["merchant_risk"][:20]
    client = Redis.from_url(redis_url)
    ours = harness.new_project()
    try:
        data = {(str(r["merchant_id"]),): {"fraud_rate_30d": r["fraud_rate_30d"], "txn_count_7d": r["txn_count_7d"]}
                for r in rows}  # fmt: skip
        for (merchant,), features in data.items():
            stamp = next(r["event_timestamp"] for r in rows if str(r["merchant_id"]) == merchant)
            await seed_feast(client, ours, view, {(merchant,): features}, event_time_s=stamp)
            theirs = await client.hgetall(entity_key(view.entities, (merchant,), materialised["project"]))  # type: ignore[arg-type]
            mine = await client.hgetall(entity_key(view.entities, (merchant,), ours))  # type: ignore[arg-type]
            ts = b"_ts:merchant_risk"
            assert {k: v for k, v in mine.items() if k != ts} == {k: v for k, v in theirs.items() if k != ts}
            assert abs(decode_timestamp(mine[ts]) - decode_timestamp(theirs[ts])) < 1e-5  # type: ignore[operator]
    finally:
        await client.aclose()
        await clean(redis_url, ours)
