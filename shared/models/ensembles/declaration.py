"""The ensemble declaration: `{name}/{version}/ensemble.json` beside the models, same source.

    {
      "members": [{"name": "fraud"}, {"name": "fraud_gbm", "version": "3"}],
      "method": "weighted_average",          # or "voting", or "stacking"
      "weights": [0.7, 0.3],                 # weighted_average: one per member, >= 0, sum > 0
      "thresholds": [0.5, 0.4],              # voting: a member votes fraud from its threshold up
      "meta_model": "meta.onnx",             # stacking: an ONNX file in the same folder whose
                                             #   serving.features are the member names, in order
      "decision": {"review": 0.5, "decline": 0.8}   # optional: the cut-offs of the ensemble's
    }                                               #   score (default: the first member's, or the meta-model's)

A member without a version follows that model's active version (reloads included); one with
a version stays on it while it is loaded. The ensemble's score is in [0, 1]: the weighted mean,
the share of members voting fraud, or the meta-model's score of the members' scores.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from typing import Any

from shared.domain.answers import Method
from shared.domain.spec import Thresholds
from shared.errors import ModelInvalid
from shared.models.repository import check_ref

__all__ = ["METHODS", "Declaration", "Member", "parse_declaration"]

METHODS: tuple[Method, ...] = ("weighted_average", "voting", "stacking")
_META_FILE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\.onnx\Z")


@dataclass(frozen=True, slots=True)
class Member:
    """A member model, and the version it is held to (None: whichever is active)."""

    name: str
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Declaration:
    """One ensemble as declared."""

    name: str
    version: str
    members: tuple[Member, ...]
    method: Method
    weights: tuple[float, ...] = ()
    thresholds: tuple[float, ...] = ()
    meta_model: str = ""
    decision: Thresholds | None = None


def parse_declaration(name: str, version: str, data: bytes) -> Declaration:
    """Parse and check `ensemble.json`; `ModelInvalid` names what is wrong."""
    check_ref(name, version)
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise ModelInvalid(f"ensemble {name}/{version}: not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelInvalid(f"ensemble {name}/{version}: expected a JSON object")
    members = _members(name, raw.get("members"))
    method = raw.get("method")
    if method not in METHODS:
        raise ModelInvalid(f"ensemble {name}: method must be one of {', '.join(METHODS)}, got {method!r}")
    declaration = Declaration(name, version, members, method, decision=_decision(name, raw.get("decision")))
    if method == "weighted_average":
        weights = _numbers(name, "weights", raw.get("weights"), len(members))
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ModelInvalid(f"ensemble {name}: weights must be >= 0 with a positive sum")
        return replace(declaration, weights=weights)
    if method == "voting":
        thresholds = _numbers(name, "thresholds", raw.get("thresholds"), len(members))
        if not all(0.0 <= t <= 1.0 for t in thresholds):
            raise ModelInvalid(f"ensemble {name}: voting thresholds must be within [0, 1]")
        return replace(declaration, thresholds=thresholds)
    meta = raw.get("meta_model", "meta.onnx")
    if not isinstance(meta, str) or not _META_FILE.match(meta) or meta == "model.onnx":
        # `model.onnx` in the folder would make the ensemble's name a model of its own
        raise ModelInvalid(f"ensemble {name}: meta_model must be a file name like meta.onnx (not model.onnx)")
    return replace(declaration, meta_model=meta)


def _members(name: str, raw: Any) -> tuple[Member, ...]:
    if not isinstance(raw, list) or len(raw) < 2:
        raise ModelInvalid(f"ensemble {name}: members must list at least two models")
    members = []
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ModelInvalid(f"ensemble {name}: bad member {entry!r}: needs a name")
        version = entry.get("version")
        version = None if version is None else str(version)
        check_ref(entry["name"], version or "1")
        if entry["name"] == name:
            raise ModelInvalid(f"ensemble {name}: an ensemble cannot be its own member")
        members.append(Member(entry["name"], version))
    if len(set(members)) != len(members):
        raise ModelInvalid(f"ensemble {name}: a member is listed twice")
    return tuple(members)


def _numbers(name: str, key: str, raw: Any, count: int) -> tuple[float, ...]:
    if not isinstance(raw, list) or len(raw) != count:
        raise ModelInvalid(f"ensemble {name}: {key} needs one number per member ({count})")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in raw):
        raise ModelInvalid(f"ensemble {name}: {key} must be finite numbers")
    return tuple(float(v) for v in raw)


def _decision(name: str, raw: Any) -> Thresholds | None:
    if raw is None:
        return None
    try:
        return Thresholds(float(raw["review"]), float(raw["decline"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelInvalid(f"ensemble {name}: decision needs review and decline numbers") from exc
