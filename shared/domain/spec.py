"""What an ONNX file must declare, in its own `metadata_props`, to be servable.

    serving.features     JSON list of {"name": str, "default": number}, in input column order
    serving.input        name of the float32 input tensor (default: the model's only input)
    serving.score_output name of the output holding the score (default: the last output)
    serving.score_column column of a 2-D score output (default 1: the positive class)
    serving.thresholds   JSON {"review": r, "decline": d} with 0 <= r <= d <= 1
    serving.description  free text (optional)
    serving.feast        JSON: the Feast feature views and features the user columns read (optional;
                         `shared/domain/feast_spec.py`), used when FEATURE_STORE=feast
    serving.golden       JSON {"rows": [[...], ...], "scores": [...], "tolerance": 1e-4} (optional):
                         the scores these rows must get; checked before a version serves

The service hard-codes no feature list: any model carrying this metadata is served.
`ModelSpec.to_metadata()` writes the same keys, so the training script and the
server share one definition of the format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from shared.domain.answers import Decision
from shared.domain.feast_spec import FeastSpec, parse_feast
from shared.errors import ModelInvalid

__all__ = ["Decision", "FeatureDef", "Golden", "ModelSpec", "Thresholds"]

PREFIX = "serving."


@dataclass(frozen=True, slots=True)
class FeatureDef:
    """One input column: its name and the value used when the request lacks it."""

    name: str
    default: float


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Score cut-offs: below `review` approve, from `decline` up decline."""

    review: float
    decline: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.review <= self.decline <= 1.0:
            raise ModelInvalid(f"thresholds need 0 <= review <= decline <= 1, got {self.review}, {self.decline}")

    def decide(self, score: float) -> Decision:
        if score >= self.decline:
            return "decline"
        if score >= self.review:
            return "review"
        return "approve"

    def reason(self, decision: Decision) -> str:
        """Why a score got `decision` under these thresholds."""
        if decision == "decline":
            return f"score >= decline threshold {self.decline}"
        if decision == "review":
            return f"score >= review threshold {self.review}"
        return f"score < review threshold {self.review}"


class Golden(NamedTuple):
    """Rows and the scores the model must give them (within `tolerance`) before it serves."""

    rows: list[list[float]]
    scores: list[float]
    tolerance: float = 1e-4


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """How to feed a model and read its answer, parsed from its metadata."""

    features: tuple[FeatureDef, ...]
    input_name: str
    score_output: str
    score_column: int
    thresholds: Thresholds
    description: str = ""
    golden: Golden | None = None
    feast: FeastSpec | None = None

    @property
    def width(self) -> int:
        return len(self.features)

    @classmethod
    def from_metadata(
        cls, props: Mapping[str, str], input_names: Sequence[str], output_names: Sequence[str]
    ) -> ModelSpec:
        """Parse and check the `serving.*` metadata against the model's real inputs and outputs."""
        features = _parse_features(_json(props, "features", required=True))
        input_name = props.get(PREFIX + "input") or (input_names[0] if len(input_names) == 1 else "")
        if input_name not in input_names:
            raise ModelInvalid(f"input {input_name!r} not among the model inputs {list(input_names)}")
        score_output = props.get(PREFIX + "score_output") or output_names[-1]
        if score_output not in output_names:
            raise ModelInvalid(f"score output {score_output!r} not among the model outputs {list(output_names)}")
        raw_thresholds = _json(props, "thresholds", required=True)
        if not isinstance(raw_thresholds, dict):
            raise ModelInvalid("serving.thresholds must be an object")
        try:
            thresholds = Thresholds(float(raw_thresholds["review"]), float(raw_thresholds["decline"]))
            score_column = int(props.get(PREFIX + "score_column", "1"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelInvalid(f"bad serving metadata: {exc}") from exc
        golden = _parse_golden(_json(props, "golden", required=False), len(features))
        raw_feast = _json(props, "feast", required=False)
        feast = parse_feast(raw_feast, (f.name for f in features)) if raw_feast is not None else None
        description = props.get(PREFIX + "description", "")
        return cls(features, input_name, score_output, score_column, thresholds, description, golden, feast)

    def to_metadata(self) -> dict[str, str]:
        """The `metadata_props` entries that declare this spec."""
        return {
            PREFIX + "features": json.dumps([{"name": f.name, "default": f.default} for f in self.features]),
            PREFIX + "input": self.input_name,
            PREFIX + "score_output": self.score_output,
            PREFIX + "score_column": str(self.score_column),
            PREFIX + "thresholds": json.dumps({"review": self.thresholds.review, "decline": self.thresholds.decline}),
            PREFIX + "description": self.description,
            **({PREFIX + "golden": json.dumps(self.golden._asdict())} if self.golden else {}),
            **({PREFIX + "feast": json.dumps(self.feast.to_json())} if self.feast else {}),
        }


def _json(props: Mapping[str, str], key: str, *, required: bool) -> Any:
    raw = props.get(PREFIX + key)
    if raw is None:
        if required:
            raise ModelInvalid(f"model metadata lacks {PREFIX + key}")
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ModelInvalid(f"{PREFIX + key} is not valid JSON: {exc}") from exc


def _parse_features(raw: Any) -> tuple[FeatureDef, ...]:
    if not isinstance(raw, list) or not raw:
        raise ModelInvalid("serving.features must be a non-empty list")
    features: list[FeatureDef] = []
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ModelInvalid(f"bad feature entry {entry!r}: needs a string name")
        default = entry.get("default", 0.0)
        if isinstance(default, bool) or not isinstance(default, int | float) or not math.isfinite(default):
            raise ModelInvalid(f"feature {entry['name']!r} needs a finite numeric default")
        features.append(FeatureDef(entry["name"], float(default)))
    names = [f.name for f in features]
    if len(set(names)) != len(names):
        raise ModelInvalid("serving.features has duplicate names")
    return tuple(features)


def _parse_golden(raw: Any, width: int) -> Golden | None:
    if raw is None:
        return None
    try:
        golden = Golden([[float(v) for v in row] for row in raw["rows"]], [float(s) for s in raw["scores"]],
                        float(raw.get("tolerance", 1e-4)))  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ModelInvalid(f"serving.golden needs rows, scores and an optional tolerance: {exc}") from exc
    if not golden.rows or len(golden.rows) != len(golden.scores) or any(len(r) != width for r in golden.rows):
        raise ModelInvalid(f"serving.golden needs as many rows as scores, each of {width} features")
    return golden
