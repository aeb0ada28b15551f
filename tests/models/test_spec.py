import json

import pytest

from shared.domain.spec import FeatureDef, ModelSpec, Thresholds
from shared.errors import ModelInvalid

INPUTS, OUTPUTS = ["features"], ["label", "probabilities"]


def props(**overrides: str) -> dict[str, str]:
    base = {
        "serving.features": json.dumps([{"name": "amount", "default": 0}, {"name": "user_age", "default": 30}]),
        "serving.thresholds": json.dumps({"review": 0.5, "decline": 0.9}),
    }
    base.update(overrides)
    return base


def test_metadata_declares_features_in_order_with_defaults() -> None:
    spec = ModelSpec.from_metadata(props(), INPUTS, OUTPUTS)
    assert spec.features == (FeatureDef("amount", 0.0), FeatureDef("user_age", 30.0))
    assert (spec.input_name, spec.score_output, spec.score_column) == ("features", "probabilities", 1)


def test_round_trip_through_to_metadata() -> None:
    spec = ModelSpec((FeatureDef("a", 1.5),), "x", "y", 0, Thresholds(0.2, 0.4), "d")
    assert ModelSpec.from_metadata(spec.to_metadata(), ["x"], ["y"]) == spec


@pytest.mark.parametrize(
    "bad",
    [
        {"serving.features": "not json"},
        {"serving.features": "[]"},
        {"serving.features": json.dumps([{"name": "a", "default": "x"}])},
        {"serving.features": json.dumps([{"name": "a"}, {"name": "a"}])},
        {"serving.thresholds": json.dumps({"review": 0.9, "decline": 0.5})},
        {"serving.thresholds": json.dumps({"review": 0.5})},
        {"serving.input": "nope"},
        {"serving.score_output": "nope"},
    ],
)
def test_bad_metadata_is_model_invalid(bad: dict[str, str]) -> None:
    with pytest.raises(ModelInvalid):
        ModelSpec.from_metadata(props(**bad), INPUTS, OUTPUTS)


def test_missing_metadata_is_model_invalid() -> None:
    with pytest.raises(ModelInvalid, match=r"serving\.features"):
        ModelSpec.from_metadata({}, INPUTS, OUTPUTS)


@pytest.mark.parametrize(("score", "decision"), [(0.1, "approve"), (0.5, "review"), (0.89, "review"), (0.9, "decline")])
def test_thresholds_decide(score: float, decision: str) -> None:
    assert Thresholds(0.5, 0.9).decide(score) == decision
