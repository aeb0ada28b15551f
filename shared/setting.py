"""What one setting is: its declaration, its bounds, how its env value parses, and what derives from them.

    setting(ENV, default, doc, ge=, gt=, le=, ...)   a dataclass field carrying its `SettingDoc`
    fixed(default, ge=, le=, ...)                    a field fixed by design, bounded all the same
    checked(obj)                                     every field of a built object within its bounds
                                                     and its choices (a `Literal`), else `SettingsError`
    parse(cls, environ)                              an object of `cls` from env values (nested walked)
    declared(cls), markdown_table(cls)               every setting, and docs/settings.md's table
    unknown_settings(environ, cls)                   a line for each variable that looks like a typo

A bad value is a `SettingsError` whose message is one line naming the setting once and what it
expects (never the value of a secret). shared/settings.py declares every setting with these.
Standard library only: the infra checks' own venv and the Functions cold path import it.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from shared.errors import SettingsError

__all__ = [
    "Bounds",
    "SettingDoc",
    "checked",
    "declared",
    "fail",
    "fixed",
    "markdown_table",
    "parse",
    "setting",
    "unknown_settings",
]

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class Bounds:
    """A number's range: at least `ge` (or above `gt`), at most `le`; `off`: what 0 means when 0 is allowed apart."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    off: str = ""  # e.g. "no drift": 0 is allowed outside the range, and means that
    noun: str = ""  # how the message names the value ("a TCP port", "a share"); else an integer or a number
    why: str = ""  # said after the range, in parentheses

    def holds(self, value: float) -> bool:
        if self.off and value == 0:
            return True
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
        )

    def expected(self, value: float) -> str:
        """What a message says is expected: `an integer within 1..1024, got 5000`."""
        noun = self.noun or ("an integer" if isinstance(value, int) else "a number")
        lo, hi = _n(self.ge if self.gt is None else self.gt), _n(self.le)
        if hi and lo:
            span = f"within {lo}..{hi}" if self.gt is None else f"within ({lo}, {hi}]"
        else:
            span = f"<= {hi}" if hi else (f">= {lo}" if self.gt is None else f"> {lo}")
        said = f"{noun} {span}" + (f" ({self.why})" if self.why else "")
        return (f"0 ({self.off}) or {said}" if self.off else said) + f", got {_n(value)}"


def _n(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class SettingDoc:
    """What one field declares: the env name, its doc, its bounds, and how it may be shown."""

    env: str
    doc: str
    local_only: bool = False  # not an app setting in Azure (the host or an identity replaces it)
    secret: bool = False  # never echoed in an error message
    shown_default: str | None = None  # how the README shows the default, when not the plain value
    bounds: Bounds | None = None


def setting(
    env: str,
    default: Any,
    doc: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    off: str = "",
    noun: str = "",
    why: str = "",
    **options: Any,
) -> Any:
    """Declare one setting (a dataclass field carrying its `SettingDoc`, bounds included when given)."""
    bounds = Bounds(ge, gt, le, off, noun, why) if (ge, gt, le) != (None, None, None) else None
    return field(default=default, metadata={"setting": SettingDoc(env, doc, bounds=bounds, **options)})


def fixed(default: Any, **bounds: Any) -> Any:
    """A field fixed by design (no env name; tests vary it), within `bounds` all the same."""
    return field(default=default, metadata={"bounds": Bounds(**bounds)})


def fail(env: str, expected: str) -> SettingsError:
    """The one-line error of a setting: `ENV: expected ...`."""
    return SettingsError(f"{env}: expected {expected}")


Rule = tuple[str, str, Bounds | None, tuple[str, ...]]  # a field, its name in messages, its bounds, its choices
_RULES: dict[type[Any], tuple[Rule, ...]] = {}


def _rules(cls: type[Any]) -> tuple[Rule, ...]:
    """The rule of each checked field of `cls` (worked out once per class)."""
    if cls in _RULES:
        return _RULES[cls]
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        doc: SettingDoc | None = f.metadata.get("setting")
        bounds = doc.bounds if doc is not None else f.metadata.get("bounds")
        choices = typing.get_args(hints[f.name]) if typing.get_origin(hints[f.name]) is Literal else ()
        if bounds is not None or choices:
            found.append((f.name, doc.env if doc is not None else f"{cls.__name__}.{f.name}", bounds, choices))
    _RULES[cls] = tuple(found)
    return _RULES[cls]


def checked(obj: Any) -> None:
    """Raise `SettingsError` for the first field of `obj` outside its bounds or choices."""
    for name, shown, bounds, choices in _rules(type(obj)):
        value = getattr(obj, name)
        if choices and value not in choices:
            raise fail(shown, f"one of {'|'.join(choices)}")
        if bounds is not None and not bounds.holds(value):
            raise fail(shown, bounds.expected(value))


def parse(cls: type[Any], env: Mapping[str, str]) -> Any:
    """An object of `cls` from the env values its settings name (nested policy objects parsed the same way)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        doc: SettingDoc | None = f.metadata.get("setting")
        if doc is None:
            if dataclasses.is_dataclass(hints[f.name]):  # a nested policy object; else a field fixed by design
                values[f.name] = parse(hints[f.name], env)
            continue
        raw = env.get(doc.env, "")
        if raw != "":
            values[f.name] = _parser(hints[f.name])(raw, doc)
        elif doc.env in env and type(None) in typing.get_args(hints[f.name]):
            values[f.name] = None  # set but empty turns an optional setting off
    try:
        return cls(**values)
    except SettingsError:
        raise
    except (TypeError, ValueError) as exc:  # pragma: no cover - a declaration mistake, not a user's
        raise SettingsError(f"{cls.__name__}: {exc}") from None


def _parser(hint: Any) -> Callable[[str, SettingDoc], Any]:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is Literal:
        return lambda raw, doc: _choice(raw, doc, tuple(typing.get_args(hint)))
    if args:  # Optional[X]
        return _parser(args[0])
    return {bool: _bool, int: _int, float: _float}.get(hint, _str)


def _shown(raw: str, doc: SettingDoc) -> str:
    return "" if doc.secret else f", got {raw!r}"


def _bool(raw: str, doc: SettingDoc) -> bool:
    lowered = raw.strip().lower()
    if lowered in _TRUE or lowered in _FALSE:
        return lowered in _TRUE
    raise fail(doc.env, f"true or false{_shown(raw, doc)}")


def _int(raw: str, doc: SettingDoc) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise fail(doc.env, f"an integer{_shown(raw, doc)}") from None


def _float(raw: str, doc: SettingDoc) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise fail(doc.env, f"a number{_shown(raw, doc)}") from None


def _str(raw: str, doc: SettingDoc) -> str:
    return raw.strip().upper() if doc.env == "LOG_LEVEL" else raw


def _choice(raw: str, doc: SettingDoc, choices: tuple[str, ...]) -> str:
    value = raw.strip().lower()
    if value not in choices:
        raise fail(doc.env, f"one of {'|'.join(choices)}{_shown(raw, doc)}")
    return value


def declared(cls: type[Any]) -> Iterator[tuple[SettingDoc, str, Any]]:
    """Every declared setting: its doc, its type as written, and its default (nested objects walked)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        doc: SettingDoc | None = f.metadata.get("setting")
        if doc is None:
            if dataclasses.is_dataclass(hints[f.name]):
                yield from declared(hints[f.name])
        else:
            yield doc, _type_name(hints[f.name]), f.default


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " / ".join(typing.get_args(hint))
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return str(args[0].__name__ if args else hint.__name__)


def _default_text(doc: SettingDoc, default: Any) -> str:
    if doc.shown_default is not None:
        return doc.shown_default
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return f'`"{default}"`' if default == "" else f"`{default}`"


def markdown_table(cls: type[Any]) -> str:
    """docs/settings.md's settings table, derived from the declarations of `cls`."""
    lines = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    for doc, type_name, default in declared(cls):
        where = " (local only)" if doc.local_only else ""
        lines.append(f"| `{doc.env}` | {type_name} | {_default_text(doc, default)} | {doc.doc}{where} |")
    return "\n".join(lines)


# First words of our names that other software's variables share (AZURE_CLIENT_ID, GRPC_TRACE): no
# typo is guessed from them alone.
_SHARED_WORDS = frozenset({"AZURE", "APPLICATIONINSIGHTS", "GRPC"})  # GRPC_: gRPC core's own (GRPC_VERBOSITY)


def unknown_settings(environ: Mapping[str, str], cls: type[Any]) -> list[str]:
    """A line for each variable of `environ` that looks like one of the settings of `cls` but is none: a
    first word two or more of ours share (`BATCH_`, `REDIS_`, ...), or within two edits of one of
    our names (case aside). Each names the variable, its value (not a secret's) and the nearest name."""
    docs = {doc.env: doc for doc, _, _ in declared(cls)}
    words = {n.split("_")[0] for n in docs if sum(m.split("_")[0] == n.split("_")[0] for m in docs) > 1}
    lines = []
    for name in sorted(set(environ) - set(docs)):
        upper, word = name.upper(), name.split("_")[0]
        # NOTE: cheap first: a name two edits away has a length within two, and (we assume) its first 3 letters
        near = [k for k in docs if k[:3].upper() == upper[:3] and abs(len(k) - len(name)) <= 2 and len(name) >= 5]
        close = [k for k in near if _edits(upper, k.upper()) <= 2]
        if not close and word not in words - _SHARED_WORDS:
            continue
        family = close or [k for k in docs if k.split("_")[0] == word]
        nearest = min(family, key=lambda known: _edits(upper, known.upper()))
        value = "" if docs[nearest].secret else f"={environ[name][:40]!r}"
        lines.append(
            f"unknown setting {name}{value} is ignored: did you mean {nearest}? "
            "(every setting: docs/settings.md; `python -m shared.settings` lists them)"
        )
    return lines


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions from `a` to `b`."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]
