"""`serving.feast`: what a model may declare to read its user columns from a Feast online store."""

from __future__ import annotations

from typing import Any

import pytest

from shared.domain.feast_spec import FROM_SERVING_FEAST, FeastSpec, parse_feast
from shared.errors import ModelInvalid

COLUMNS = ("log_amount", "user_txn", "merchant_rate")
GOOD: dict[str, Any] = {
    "views": {
        "user_stats": {"entities": {"user_id": "string"}, "max_age_s": 86_400},
        "merchant_stats": {"entities": {"merchant": {"type": "int64", "field": "merchant_id"}}},
    },
    "features": {"user_txn": "user_stats:txn_count_24h", "merchant_rate": "merchant_stats:fraud_rate_30d"},
}


def test_a_spec_names_the_columns_its_view_features_fill_and_survives_its_own_json() -> None:
    spec = parse_feast(GOOD, COLUMNS)
    assert spec.columns == {"user_txn", "merchant_rate"}
    assert parse_feast(spec.to_json(), COLUMNS) == spec


@pytest.mark.parametrize("field", ["amount", "timestamp", "note", "device_id"])
def test_a_join_key_over_a_field_no_event_carries_as_text_is_refused(field: str) -> None:
    broken = {**GOOD, "views": {**GOOD["views"], "user_stats": {"entities": {"user_id": {"type": "string",
                                                                                          "field": field}}}}}  # fmt: skip
    with pytest.raises(ModelInvalid, match=rf"reads '{field}', which is no text field every event carries"):
        parse_feast(broken, COLUMNS)


@pytest.mark.parametrize("field", ["user_id", "merchant_id", "event_id", "channel", "country", "currency"])
def test_a_join_key_over_an_event_text_field_is_taken(field: str) -> None:
    spec = parse_feast({**GOOD, "views": {**GOOD["views"], "user_stats": {"entities": {"k": {"type": "string",
                                                                                               "field": field}}}}},
                       COLUMNS)  # fmt: skip
    assert spec.views[0].entities[0].field == field


def test_the_feast_catalogue_marker_serves_nothing_to_whoever_does_not_know_it() -> None:
    # NOTE: fail closed: read as a plain catalogue, every user column is unknown
    assert isinstance(FROM_SERVING_FEAST, frozenset) and "user_txn" not in FROM_SERVING_FEAST
    assert FeastSpec.union([None, parse_feast(GOOD, COLUMNS)]) is not None
