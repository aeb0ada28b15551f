"""Feature mapping: a payment event and its user's context → the model's input row.

The model's metadata names its columns in order. Each name is resolved, in order of
precedence, from:
  1. a numeric event feature (`amount`, `log_amount`, `hour`, `weekday`, `has_note`, `note_length`);
  2. a categorical indicator `field=value` over an event field
     (`channel=web`, `country=NG`, `currency=EUR`, `merchant_category=7995`): 1.0 or 0.0;
  3. the user's context from the online feature store, by the same name.
A name found nowhere takes the declared default and is listed in `defaulted`, and so does a
stored value that is no usable float32 (not an int or float, NaN, infinite, or past
±3.4e38), each with why in `FeatureRow.why`: `missing`, `invalid`, or what the store said
(an `Absent` value: `null`, `stale`, `missing`). A row is always `spec.width` finite float32 values, and the same inputs give
the same row. A declared default that float32 cannot hold is `ModelInvalid` at load.

Time features (`hour`, `weekday`) are those of the instant in UTC: the offset a client
writes its timestamp in cannot move a decision (03:12Z and 14:12+11:00 are one instant,
one row). A model that needs local time gets it as a user or merchant feature.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from types import MappingProxyType
from typing import NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from shared.domain.events import PaymentEvent
from shared.domain.spec import ModelSpec
from shared.errors import ModelInvalid

__all__ = [
    "CATEGORICAL_FIELDS",
    "EVENT_FEATURES",
    "Absent",
    "Context",
    "FeatureMapper",
    "FeatureRow",
]

CATEGORICAL_FIELDS = ("channel", "country", "currency", "merchant_category", "merchant_id")
_NUMBERS = (int, float)  # exact types: a bool is not a feature value
# a finite double past float32's range becomes inf in the row: the bound also refuses NaN
# and inf, and compares a huge int exactly (where `math.isfinite` would raise OverflowError).
_F32_MAX = float(np.finfo(np.float32).max)
_F32_RANGE = (-_F32_MAX, _F32_MAX)


class Absent(Enum):
    """Why a store gives no value for a feature (the row then takes the model default)."""

    MISSING = "missing"  # the entity, or this feature of it, was never written
    NULL = "null"  # written as null
    STALE = "stale"  # older than its view's max age


# a store's answer for one event: a number per feature, or why there is none (never a sentinel number)
Context: TypeAlias = Mapping[str, "float | Absent"]
_NO_WHY: Mapping[str, str] = MappingProxyType({})


class FeatureRow(NamedTuple):
    values: npt.NDArray[np.float32]
    defaulted: list[str]
    why: Mapping[str, str] = _NO_WHY  # defaulted name -> missing | null | stale | invalid


def _utc(event: PaymentEvent) -> datetime:
    ts = event.timestamp
    return ts if ts.tzinfo is UTC else ts.astimezone(UTC)  # "Z" decodes to UTC itself: most skip it


# The numeric features an event carries by itself, each computed only where a model asks for it.
EVENT_FEATURE_FNS: dict[str, Callable[[PaymentEvent], float]] = {
    "amount": lambda e: e.amount,
    "log_amount": lambda e: math.log1p(e.amount),
    "hour": lambda e: float(_utc(e).hour),
    "weekday": lambda e: float(_utc(e).weekday()),
    "has_note": lambda e: 1.0 if e.note else 0.0,
    "note_length": lambda e: float(len(e.note or "")),
}
EVENT_FEATURES = tuple(EVENT_FEATURE_FNS)


class FeatureMapper:
    """Builds rows for one model spec; the per-column plan is worked out once."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.columns = tuple(f.name for f in spec.features)  # once: every decision record names them
        self._template = [f.default for f in spec.features]
        self._event_cols: list[tuple[int, Callable[[PaymentEvent], float]]] = []
        self._indicators: dict[str, dict[str, int]] = {}  # field -> value -> column
        self._user_cols: list[tuple[int, str]] = []
        for i, feature in enumerate(spec.features):
            if not -_F32_MAX <= feature.default <= _F32_MAX:
                raise ModelInvalid(f"feature {feature.name!r}: default {feature.default!r} does not fit a float32")
            field, sep, expected = feature.name.partition("=")
            if feature.name in EVENT_FEATURES:
                self._event_cols.append((i, EVENT_FEATURE_FNS[feature.name]))
            elif sep and field in CATEGORICAL_FIELDS:
                self._indicators.setdefault(field, {})[expected] = i
                self._template[i] = 0.0
            else:
                self._user_cols.append((i, feature.name))
        # each column's value when nothing sets it: the declared default, 0.0 for an indicator
        self.defaults = np.array(self._template, dtype=np.float32)
        self.defaults.setflags(write=False)

    def unresolved(self, user_features: Collection[str] | None) -> list[str]:
        """The names nothing provides: an indicator over a field events do not carry, or a
        user feature the store does not serve (when it can say which it serves)."""
        return [
            name
            for _, name in self._user_cols
            if (user_features is not None and name not in user_features) or (user_features is None and "=" in name)
        ]

    @property
    def uses_user_features(self) -> bool:
        return bool(self._user_cols)

    def row(self, event: PaymentEvent, user: Context | None) -> FeatureRow:
        """The input row for `event`, with the names that took their default."""
        values = self._template.copy()  # a list, then one array: numpy item writes cost more
        for i, compute in self._event_cols:
            values[i] = compute(event)
        for field, columns in self._indicators.items():
            column = columns.get(getattr(event, field))
            if column is not None:
                values[column] = 1.0
        defaulted: list[str] = []
        lowest, highest = _F32_RANGE
        for i, name in self._user_cols:
            value = user.get(name) if user is not None else None
            # the exact-type test narrows what mypy cannot see: a number, never an Absent
            if value is not None and type(value) in _NUMBERS and lowest <= value <= highest:  # type: ignore[operator]
                values[i] = value  # type: ignore[assignment]
            else:
                defaulted.append(name)
        if not defaulted:
            return FeatureRow(np.array(values, dtype=np.float32), defaulted)
        return FeatureRow(np.array(values, dtype=np.float32), defaulted, _why(user, defaulted))

    def rows(self, events: Sequence[PaymentEvent], users: Sequence[Context | None] | None) -> list[FeatureRow]:
        """`row` for each event (with `users[k]` its user's context), built as one matrix.

        A batch request's rows: column by column, one list per column written into one
        matrix, instead of a list and an array per event (docs/benchmark.md). Each row is a
        view of that matrix, equal to `row`'s byte for byte (tests/features/test_mapping_properties.py).
        """
        n = len(events)
        matrix = np.empty((n, len(self._template)), dtype=np.float32)
        matrix[:] = self.defaults
        for i, compute in self._event_cols:
            matrix[:, i] = [compute(e) for e in events]
        for field, columns in self._indicators.items():
            for k, event in enumerate(events):
                column = columns.get(getattr(event, field))
                if column is not None:
                    matrix[k, column] = 1.0
        defaulted: list[list[str]] = [[] for _ in range(n)]
        contexts: Sequence[Context | None] = users if users is not None else [None] * n
        if self._user_cols:
            lowest, highest = _F32_RANGE
            for i, name in self._user_cols:
                default = self._template[i]
                column_values = [default] * n
                for k, user in enumerate(contexts):
                    value = user.get(name) if user is not None else None
                    if value is not None and type(value) in _NUMBERS and lowest <= value <= highest:  # type: ignore[operator]
                        column_values[k] = value  # type: ignore[assignment]
                    else:
                        defaulted[k].append(name)
                matrix[:, i] = column_values
        return [
            FeatureRow(matrix[k], names, _why(contexts[k], names) if names else _NO_WHY)
            for k, names in enumerate(defaulted)
        ]


def _why(user: Context | None, defaulted: list[str]) -> dict[str, str]:
    """Why each defaulted name took its default: what the store said, else missing or invalid."""
    found: dict[str, str] = {}
    for name in defaulted:
        value = user.get(name) if user is not None else None
        found[name] = value.value if isinstance(value, Absent) else "missing" if value is None else "invalid"
    return found
