"""What a model declares to read its user context from a Feast online store.

    serving.feast  JSON, e.g.
        {"views": {"user_stats": {"entities": {"user_id": "string"}, "max_age_s": 86400},
                   "merchant_stats": {"entities": {"merchant_id": {"type": "int64", "field": "merchant_id"}}}},
         "features": {"user_txn_count_24h": "user_stats:txn_count_24h",
                      "merchant_fraud_rate": "merchant_stats:fraud_rate_30d"}}

`views`: each Feast feature view the model reads (its name as Feast stores it: with
`_v{N}` when Feast's online versioning is on), its entities' join keys with the Feast
value type of each (`string` or `int64`, as the Feast `Entity` declares it) and the event
field that carries the value (the join key's own name by default; a text field every event
carries: an id, the currency, country or channel), and optionally
`max_age_s`: past that age a view's values take the model defaults (`stale`); absent or
0 means no limit (Feast's `ttl=0`). `features`: each model column (a name of
`serving.features`) and the `view:feature` it reads; a list of `view:feature` names
instead means the columns are named so.

Under the Feast store (FEATURE_STORE=feast) `serving.feast` is the only source of a model's
user columns: the store's catalogue is `FROM_SERVING_FEAST`, and the registry rejects at load
a model with a user column no `view:feature` here fills (shared/models/registry.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from shared.domain.events import PaymentEvent
from shared.errors import ModelInvalid

__all__ = [
    "FROM_SERVING_FEAST",
    "EntityType",
    "FeastEntity",
    "FeastSpec",
    "FeastView",
    "FromServingFeast",
    "parse_feast",
]

EntityType = Literal["string", "int64"]
_TYPES: tuple[EntityType, ...] = ("string", "int64")


def _text_fields() -> frozenset[str]:
    """The event fields every event carries as text: the only values an entity key is built from.

    `amount` (a float), `timestamp` and the optional `note` cannot key a Feast entity: a
    join key over one would fail at request time, so a model declaring it is refused at load."""
    info = msgspec.inspect.type_info(PaymentEvent)
    assert isinstance(info, msgspec.inspect.StructType)  # noqa: S101 narrows the type for mypy
    return frozenset(
        f.name
        for f in info.fields
        if f.required
        and (
            isinstance(f.type, msgspec.inspect.StrType)
            or (isinstance(f.type, msgspec.inspect.LiteralType) and all(isinstance(v, str) for v in f.type.values))
        )
    )


_KEY_FIELDS = _text_fields()


class FromServingFeast(frozenset[str]):
    """A feature store's catalogue that is each model's own `serving.feast` (the Feast store's): the
    user columns a model may read are the ones its `view:feature`s fill, none without one.

    NOTE: a frozenset (the store seam's catalogue type), empty: anything that does not know the
    marker reads it as "serves nothing" and so rejects, never lets a column through unchecked."""

    __slots__ = ()


FROM_SERVING_FEAST = FromServingFeast()


@dataclass(frozen=True, slots=True)
class FeastEntity:
    """One join key of a feature view, its Feast value type, and the event field carrying it."""

    join_key: str
    type: EntityType
    field: str


@dataclass(frozen=True, slots=True)
class FeastView:
    """A feature view: its join keys (sorted, as Feast serialises them) and its max age."""

    name: str
    entities: tuple[FeastEntity, ...]
    max_age_s: float | None = None


@dataclass(frozen=True, slots=True)
class FeastSpec:
    """The views a model reads and which `view:feature` fills each of its columns."""

    views: tuple[FeastView, ...]
    features: tuple[tuple[str, str, str], ...]  # (column, view, feature)

    @property
    def columns(self) -> frozenset[str]:
        """The model columns a `view:feature` fills."""
        return frozenset(column for column, _, _ in self.features)

    def to_json(self) -> dict[str, Any]:
        views = {
            v.name: {
                "entities": {e.join_key: {"type": e.type, "field": e.field} for e in v.entities},
                **({"max_age_s": v.max_age_s} if v.max_age_s else {}),
            }
            for v in self.views
        }
        return {"views": views, "features": {column: f"{view}:{name}" for column, view, name in self.features}}

    @staticmethod
    def union(specs: Iterable[FeastSpec | None]) -> FeastSpec | None:
        """The views and columns of several specs (an ensemble's members); the first mapping of a column wins."""
        views: dict[str, FeastView] = {}
        features: dict[str, tuple[str, str, str]] = {}
        for spec in specs:
            if spec is None:
                continue
            for view in spec.views:
                views.setdefault(view.name, view)
            for entry in spec.features:
                features.setdefault(entry[0], entry)
        return FeastSpec(tuple(views.values()), tuple(features.values())) if views else None


def parse_feast(raw: Any, columns: Iterable[str]) -> FeastSpec:
    """Parse and check `serving.feast` against the model's columns."""
    if not isinstance(raw, dict) or not isinstance(raw.get("views"), dict) or not raw["views"]:
        raise ModelInvalid("serving.feast needs a non-empty object of views")
    views = tuple(_view(name, body) for name, body in raw["views"].items())
    known = {v.name for v in views}
    refs = raw.get("features")
    pairs: Iterable[tuple[Any, Any]]
    if isinstance(refs, list):
        pairs = ((ref, ref) for ref in refs)
    elif isinstance(refs, dict):
        pairs = refs.items()
    else:
        raise ModelInvalid("serving.feast.features must map columns to 'view:feature' (or list them)")
    names = set(columns)
    features: list[tuple[str, str, str]] = []
    for column, ref in pairs:
        view, sep, feature = ref.partition(":") if isinstance(ref, str) else ("", "", "")
        if not sep or not feature or view not in known:
            raise ModelInvalid(f"serving.feast: {ref!r} is not 'view:feature' over a declared view")
        if column not in names:
            raise ModelInvalid(f"serving.feast maps {column!r}, which is not a column of serving.features")
        features.append((column, view, feature))
    if not features:
        raise ModelInvalid("serving.feast.features is empty")
    return FeastSpec(views, tuple(features))


def _view(name: Any, body: Any) -> FeastView:
    if not isinstance(name, str) or not name or not isinstance(body, dict):
        raise ModelInvalid(f"serving.feast: view {name!r} needs an object")
    entities = body.get("entities")
    if not isinstance(entities, dict) or not entities:
        raise ModelInvalid(f"serving.feast: view {name!r} needs its entities' join keys")
    max_age = body.get("max_age_s", 0)
    if isinstance(max_age, bool) or not isinstance(max_age, int | float) or not math.isfinite(max_age) or max_age < 0:
        raise ModelInvalid(f"serving.feast: view {name!r}: max_age_s must be a number of seconds >= 0")
    return FeastView(
        name, tuple(sorted((_entity(name, k, v) for k, v in entities.items()), key=_by_key)), float(max_age) or None
    )


def _by_key(entity: FeastEntity) -> str:
    return entity.join_key


def _entity(view: str, join_key: str, body: Any) -> FeastEntity:
    declared: Mapping[str, Any] = {"type": body} if isinstance(body, str) else body if isinstance(body, dict) else {}
    kind, field = declared.get("type"), declared.get("field", join_key)
    if kind not in _TYPES:
        raise ModelInvalid(f"serving.feast: view {view!r}: join key {join_key!r} needs a type, string or int64")
    if field not in _KEY_FIELDS:
        raise ModelInvalid(
            f"serving.feast: view {view!r}: join key {join_key!r} reads {field!r}, which is no text field every "
            f"event carries (one of {', '.join(sorted(_KEY_FIELDS))})"
        )
    return FeastEntity(join_key, kind, field)
