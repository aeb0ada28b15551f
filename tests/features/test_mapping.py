import json
import math

import numpy as np

from shared.domain.events import decode_event
from shared.domain.spec import FeatureDef, ModelSpec, Thresholds
from shared.features.mapping import FeatureMapper
from tests.conftest import event


def spec(*names_defaults: tuple[str, float]) -> ModelSpec:
    return ModelSpec(tuple(FeatureDef(n, d) for n, d in names_defaults), "x", "y", 1, Thresholds(0.5, 0.9))


def parsed(**overrides: object):
    return decode_event(json.dumps(event(**overrides)).encode())


def test_columns_follow_the_declared_order_from_every_source() -> None:
    mapper = FeatureMapper(
        spec(("user_txn_count_24h", 1.0), ("channel=web", 0.0), ("log_amount", 0.0), ("hour", 0.0), ("country=US", 0.0))
    )
    row = mapper.row(parsed(amount=99.0), {"user_txn_count_24h": 7})
    assert row.values.dtype == np.float32
    assert row.values.tolist() == [7.0, 1.0, np.float32(math.log1p(99.0)), 3.0, 0.0]
    assert row.defaulted == []


def test_missing_user_takes_defaults_and_lists_them() -> None:
    mapper = FeatureMapper(spec(("amount", 0.0), ("user_avg_amount_30d", 60.0), ("user_age", 30.0)))
    row = mapper.row(parsed(amount=5.0), None)
    assert row.values.tolist() == [5.0, 60.0, 30.0]
    assert row.defaulted == ["user_avg_amount_30d", "user_age"]


def test_partial_or_bad_user_values_default_individually() -> None:
    mapper = FeatureMapper(spec(("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)))
    row = mapper.row(parsed(), {"a": 10, "b": "oops", "c": float("nan"), "d": True})
    assert row.values.tolist() == [10.0, 2.0, 3.0, 4.0]
    assert row.defaulted == ["b", "c", "d"]


def test_model_without_user_features_needs_no_lookup() -> None:
    assert not FeatureMapper(spec(("amount", 0.0), ("channel=app", 0.0))).uses_user_features
    assert FeatureMapper(spec(("amount", 0.0), ("user_x", 0.0))).uses_user_features


def test_the_client_offset_cannot_choose_the_hour() -> None:
    """One instant written with two offsets is one row (the README example: review either way)."""
    mapper = FeatureMapper(spec(("hour", 0.0), ("weekday", 0.0)))
    rows = [
        mapper.row(decode_event(json.dumps(event(timestamp=ts)).encode()), None).values.tolist()
        for ts in ("2026-11-29T03:12:00Z", "2026-11-29T14:12:00+11:00", "2026-11-28T22:12:00-05:00")
    ]
    assert rows == [[3.0, 6.0]] * 3
