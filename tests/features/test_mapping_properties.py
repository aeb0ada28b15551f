"""Properties of the feature mapping: any valid event and any stored user context give a row
of the model's width, finite float32 values, the same row every time."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from shared.domain.events import PaymentEvent, decode_event
from shared.domain.spec import FeatureDef, ModelSpec, Thresholds
from shared.errors import ModelInvalid
from shared.features.mapping import CATEGORICAL_FIELDS, EVENT_FEATURE_FNS, EVENT_FEATURES, FeatureMapper
from shared.features.store import FeatureStore, encode_user, user_key
from shared.stores.cache import codec
from shared.stores.cache.tier import MemoryTier
from tests.conftest import event as event_body
from tests.strategies import HUGE, events, json_bytes, json_values

F32_MAX = float(np.finfo(np.float32).max)
USER_NAMES = ("user_avg_amount_30d", "user_txn_count_24h", "user_age", "device=new", "merchant_id")
indicator_names = st.builds(
    lambda field, value: f"{field}={value}",
    st.sampled_from(CATEGORICAL_FIELDS),
    st.sampled_from(["web", "app", "pos", "NG", "US", "USD", "EUR", "7995", "m-42"]) | st.text(max_size=5),
)
feature_names = st.sampled_from(EVENT_FEATURES) | indicator_names | st.sampled_from(USER_NAMES) | st.text(max_size=20)
finite_defaults = st.floats(-F32_MAX, F32_MAX) | st.integers(-(2**64), 2**64).map(float)


def specs(defaults: st.SearchStrategy[float] = finite_defaults) -> st.SearchStrategy[ModelSpec]:
    return st.lists(st.tuples(feature_names, defaults), min_size=1, max_size=24, unique_by=lambda f: f[0]).map(
        lambda fs: ModelSpec(tuple(FeatureDef(n, d) for n, d in fs), "x", "y", 1, Thresholds(0.5, 0.9))
    )


# What a stored context can hold: anything JSON (orjson reads huge integers as floats), and,
# from other producers of the mapping, numbers JSON cannot carry.
stored_values = (
    json_values
    | st.floats()
    | st.sampled_from([F32_MAX, -F32_MAX, 3.5e38, -1e300, 2**128, -(2**200), HUGE, True, np.float64(1.0)])
    | st.integers()
)


@st.composite
def contexts(draw: st.DrawFn, spec: ModelSpec) -> dict[str, Any] | None:
    """No context, or one that names some of the spec's features (and others) with any values."""
    if draw(st.booleans()) and draw(st.booleans()):
        return None
    names = [f.name for f in spec.features] + list(USER_NAMES)
    return draw(st.dictionaries(st.sampled_from(names) | st.text(max_size=8), stored_values, max_size=12))


def usable_range(value: Any) -> bool:
    return type(value) in (int, float) and -F32_MAX <= value <= F32_MAX


def check_row(mapper: FeatureMapper, event: PaymentEvent, user: dict[str, Any] | None) -> None:
    spec = mapper.spec
    row = mapper.row(event, user)
    assert row.values.shape == (spec.width,) and row.values.dtype == np.float32
    assert np.isfinite(row.values).all(), row.values
    again = FeatureMapper(spec).row(event, None if user is None else dict(reversed(list(user.items()))))
    assert again.values.tobytes() == row.values.tobytes() and again.defaulted == row.defaulted
    for i, feature in enumerate(spec.features):
        field, sep, expected = feature.name.partition("=")
        if feature.name in EVENT_FEATURES:
            assert row.values[i] == np.float32(EVENT_FEATURE_FNS[feature.name](event))
        elif sep and field in CATEGORICAL_FIELDS:
            assert row.values[i] == (1.0 if getattr(event, field) == expected else 0.0)
        elif user is not None and usable_range(user.get(feature.name)):
            assert row.values[i] == np.float32(user[feature.name]) and feature.name not in row.defaulted
        else:
            assert row.values[i] == np.float32(feature.default) and feature.name in row.defaulted


@given(st.data(), specs(), events())
def test_any_event_and_context_give_a_finite_row_of_the_models_width(
    data: st.DataObject, spec: ModelSpec, event: PaymentEvent
) -> None:
    check_row(FeatureMapper(spec), event, data.draw(contexts(spec)))


@pytest.mark.parametrize("value", [1e300, -3.5e38, 2**128, 10**400, float("inf"), float("nan")])
def test_a_stored_value_past_float32_takes_the_default(value: float) -> None:
    """Regression: 1e300 (finite, what orjson reads from `1e300`) became inf in the row, and
    10**400 made `math.isfinite` raise OverflowError."""
    mapper = FeatureMapper(ModelSpec((FeatureDef("user_age", 30.0),), "x", "y", 1, Thresholds(0.5, 0.9)))
    row = mapper.row(_event(), {"user_age": value})
    assert row.values.tolist() == [30.0] and row.defaulted == ["user_age"]


@given(specs(st.floats(allow_nan=False, allow_infinity=False)))
@example(ModelSpec((FeatureDef("amount", 1e39),), "x", "y", 1, Thresholds(0.5, 0.9)))
def test_a_default_float32_cannot_hold_is_model_invalid(spec: ModelSpec) -> None:
    """Regression: a default of 1e39 (finite, so the metadata parser took it) made an inf column."""
    fits = all(-F32_MAX <= f.default <= F32_MAX for f in spec.features)
    try:
        mapper = FeatureMapper(spec)
    except ModelInvalid as exc:
        assert not fits and "float32" in exc.detail
        return
    assert fits
    check_row(mapper, _event(), None)


@given(st.data(), specs(), events(), json_bytes(st.dictionaries(st.text(max_size=8), stored_values, max_size=8)))
def test_stored_bytes_read_through_the_feature_store_give_a_finite_row(
    data: st.DataObject, spec: ModelSpec, event: PaymentEvent, stored: bytes
) -> None:
    """Whatever bytes sit under `user:{id}` (a valid encoding of any JSON, or a corruption of
    one), the store answers a context and the row stays finite."""
    raw = data.draw(st.sampled_from([codec.encode(stored), encode_user({}), codec.encode(stored)[: len(stored) // 2]]))
    raw = data.draw(st.just(raw) | st.binary(max_size=64))
    tier = MemoryTier()
    tier.put(user_key(event.user_id), raw, None)
    store = FeatureStore(redis=tier, fallback=None, l1_size=0, l1_ttl_s=1.0)
    user, _ = asyncio.run(store.get(event.user_id))
    assert isinstance(user, dict)
    check_row(FeatureMapper(spec), event, user)


def test_orjson_reads_stored_numbers_as_the_store_writes_them() -> None:
    """The store's reader never hands the mapper a number JSON cannot hold: huge integers are floats."""
    assert orjson.loads(b'{"a": 100000000000000000000000000000}') == {"a": 1e29}
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(b'{"a": 1e400}')


def _event() -> PaymentEvent:
    return decode_event(orjson.dumps(event_body()))


@given(st.data(), specs(), st.lists(events(), min_size=1, max_size=6))
def test_a_batchs_matrix_rows_equal_each_events_own_row(
    data: st.DataObject, spec: ModelSpec, batch: list[PaymentEvent]
) -> None:
    mapper = FeatureMapper(spec)
    users = data.draw(st.none() | st.lists(contexts(spec), min_size=len(batch), max_size=len(batch)))
    together = mapper.rows(batch, users)
    assert len(together) == len(batch)
    for k, event in enumerate(batch):
        alone = mapper.row(event, None if users is None else users[k])
        got = together[k]
        assert got.values.tobytes() == alone.values.tobytes(), (got.values, alone.values)
        assert got.values.dtype == np.float32 and got.values.shape == (spec.width,)
        assert got.defaulted == alone.defaulted and dict(got.why) == dict(alone.why)
