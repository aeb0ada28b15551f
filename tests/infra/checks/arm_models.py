"""Resource bodies against the Azure REST models shipped in the `azure-mgmt-*` packages.

Each Azure SDK package is generated from azure-rest-api-specs and keeps the JSON names:
msrest-style models in `_attribute_map` ({"key": "properties.lockDuration", "type": "str"}),
TypeSpec-style models in `rest_field(name="lockDuration")` plus a type annotation. This
module turns either into one small schema walk:

    fields(model) -> {json name: Field(type text, read-only?)}

and checks every literal key (and enum-typed literal value) of a Bicep resource body against
the model of that resource type *at the API version the Bicep file names*. The version
must be one the package carries (a versioned subpackage, or the package's own version);
versions no package carries are allowed only from `tables.UNMODELLED_API_VERSIONS`.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from pkgutil import iter_modules
from types import ModuleType
from typing import Any

from .tables import OPERATION_GROUPS, RESOURCE_MODELS, UNMODELLED_API_VERSIONS

API_VERSION_DEFAULT = re.compile(r"api[-_]version['\"]?,\s*['\"](\d{4}-\d{2}-\d{2}(?:-preview)?)['\"]")

# Keys of a Bicep resource body that are Bicep's, not the resource provider's.
BICEP_RESOURCE_KEYS = frozenset({"name", "parent", "scope", "dependsOn"})
PRIMITIVES = {"str", "int", "long", "float", "bool", "object", "iso-8601", "duration", "date", "any", "datetime"}


@dataclass(frozen=True)
class Field:
    type_text: str  # "str", "int", "[Container]", "{str}", "Scale", "enum:Kind", "obj:<id>"
    readonly: bool


# --- the packages -------------------------------------------------------------------


def _version_module_name(api_version: str) -> str:
    return "v" + api_version.replace("-", "_")


@cache
def package_api_versions(package: str, operation_group: str | None = None) -> frozenset[str]:
    """API versions a package carries: its versioned subpackages, else the versions its
    operations send (only `operation_group`'s where the package mixes versions)."""
    pkg = importlib.import_module(package)
    versions = {
        m.name[1:].replace("_", "-")
        for m in iter_modules(pkg.__path__)
        if re.fullmatch(r"v\d{4}_\d{2}_\d{2}(_preview)?", m.name)
    }
    if versions:
        return frozenset(versions)
    found: set[str] = set()
    for path in pkg.__path__:
        for py in Path(path).glob("operations/*.py" if operation_group else "_configuration.py"):
            if operation_group is None or py.stem == operation_group:
                found |= set(API_VERSION_DEFAULT.findall(py.read_text()))
    return frozenset(found)


def models_module(package: str, api_version: str, operation_group: str | None = None) -> ModuleType | None:
    """The models of `package` at `api_version`, or None when the package lacks it."""
    if api_version not in package_api_versions(package, operation_group):
        return None
    try:
        return importlib.import_module(f"{package}.{_version_module_name(api_version)}.models")
    except ModuleNotFoundError:
        return importlib.import_module(f"{package}.models")


# --- one model's fields -----------------------------------------------------------------


def _annotation_kind(text: str) -> str:
    """Normalise a TypeSpec/msrest annotation to the msrest type notation."""
    text = re.sub(r"ForwardRef\('([^']*)'\)", r"\1", text).replace("'", "").replace('"', "")
    text = text.replace("typing.", "").replace("~azure.mgmt.", "")
    while True:
        m = re.fullmatch(r"Optional\[(.*)\]", text)
        if not m:
            break
        text = m.group(1)
    text = re.sub(r",\s*NoneType\]$", "]", text)
    if m := re.fullmatch(r"(?:list|List)\[(.*)\]", text):
        return f"[{_annotation_kind(m.group(1))}]"
    if m := re.fullmatch(r"(?:dict|Dict)\[str,\s*(.*)\]", text):
        return "{" + _annotation_kind(m.group(1)) + "}"
    if m := re.fullmatch(r"Union\[str,\s*_models\.(\w+)\]", text):
        return f"enum:{m.group(1)}"
    if m := re.fullmatch(r"Literal\[(.*)\]", text):
        return "str"
    if m := re.fullmatch(r"_models\.(\w+)", text):
        return m.group(1)
    return {"Any": "any", "datetime.datetime": "iso-8601", "datetime.timedelta": "duration"}.get(text, text)


def _init_enum(cls: type, attr: str) -> str | None:
    """The enum an msrest model names for `attr` in its __init__ annotation, if any."""
    try:
        ann = inspect.signature(cls.__init__).parameters[attr].annotation
    except (KeyError, ValueError):
        return None
    m = re.search(r"_models\.(\w+)", str(ann))
    return m.group(1) if m else None


@cache
def fields(models: ModuleType, class_name: str) -> dict[str, Field]:
    """JSON name -> Field for one model class; flattened msrest paths become nested objects."""
    cls = getattr(models, class_name)
    out: dict[str, Any] = {}
    if hasattr(cls, "_attribute_map"):
        validation = getattr(cls, "_validation", {})
        for attr, spec in cls._attribute_map.items():
            key = spec["key"]
            if not key:  # additional_properties: treated as closed on purpose (catch misspellings)
                continue
            type_text = spec["type"]
            if type_text == "str" and (enum_name := _init_enum(cls, attr)) and _is_enum(models, enum_name):
                type_text = f"enum:{enum_name}"
            path = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key)]
            _insert(out, path, Field(type_text, bool(validation.get(attr, {}).get("readonly"))))
    else:
        for klass in reversed(cls.__mro__):
            notes = inspect.get_annotations(klass)
            for attr, value in klass.__dict__.items():
                if attr.startswith("_") or not hasattr(value, "_rest_name_input"):
                    continue
                name = value._rest_name_input or attr
                kind = _annotation_kind(str(notes.get(attr, "any")))
                readonly = list(getattr(value, "_visibility", None) or []) == ["read"]
                out[name] = Field(kind, readonly)
    return out


def _insert(tree: dict[str, Any], path: list[str], leaf: Field) -> None:
    head, *rest = path
    if not rest:
        tree[head] = leaf
        return
    node = tree.setdefault(head, {})
    if isinstance(node, Field):  # a flattened container that is also typed: keep the nested map
        node = tree[head] = {}
    _insert(node, rest, leaf)


def _is_enum(models: ModuleType, name: str) -> bool:
    obj = getattr(models, name, None)
    return isinstance(obj, type) and issubclass(obj, enum.Enum)


def _subtype(models: ModuleType, class_name: str, body: dict[str, Any]) -> str:
    """Follow a discriminator (msrest `_subtype_map`, TypeSpec `__mapping__`) to the subclass."""
    cls = getattr(models, class_name)
    body = {str(k).strip("'"): v for k, v in body.items()}
    for attr, mapping in getattr(cls, "_subtype_map", {}).items():
        key = cls._attribute_map[attr]["key"].replace("\\.", ".")
        value = body.get(key)
        if isinstance(value, str) and mapping.get(value, class_name) != class_name:
            return _subtype(models, mapping[value], body)
    mapping = getattr(cls, "__mapping__", None)
    if mapping:
        for value in body.values():
            if isinstance(value, str) and value in mapping:
                return mapping[value].__name__
    return class_name


# --- the walk ---------------------------------------------------------------------------


class Walker:
    """Checks one resource body; `resolve` turns a Bicep identifier into a var's value."""

    def __init__(self, models: ModuleType, where: str, symbols: dict[str, Any]) -> None:
        self.models, self.where, self.symbols = models, where, symbols
        self.findings: list[str] = []
        self._seen: set[str] = set()

    def body(self, value: Any, type_text: str, path: str) -> None:
        for v in self._alternatives(value):
            self._one(v, type_text, path)

    def _alternatives(self, value: Any, depth: int = 0) -> list[Any]:
        """A value, or the values it may take: a var's value, both ternary branches, concat args, a loop's body."""
        if depth > 8:
            return []
        if isinstance(value, str) and value in self.symbols:
            return self._alternatives(self.symbols[value], depth + 1)
        if isinstance(value, dict) and set(value) == {"operator"} and value["operator"]["type"] == "conditional":
            ops = value["operator"]["operands"]
            return self._alternatives(ops["true_value"], depth + 1) + self._alternatives(ops["false_value"], depth + 1)
        if isinstance(value, dict) and "loop_type" in value and isinstance(value.get("config"), dict):
            return [[value["config"]]]  # `[for ...]`: an array of its body
        if isinstance(value, dict) and set(value) == {"function"} and value["function"]["type"] in ("concat", "union"):
            args = [a for a in value["function"]["parameters"].values() if a is not None]
            items: list[Any] = []
            for a in args:
                for alt in self._alternatives(a, depth + 1):
                    items += alt if isinstance(alt, list) else [alt]
            return [items] if value["function"]["type"] == "concat" else items
        return [value]

    def _one(self, value: Any, type_text: str, path: str) -> None:
        if value is None or (isinstance(value, dict) and set(value) in ({"function"}, {"operator"})):
            return  # an expression: its type is the Bicep compiler's business
        if type_text.startswith("[") and isinstance(value, list):
            for i, item in enumerate(value):
                self.body(item, type_text[1:-1], f"{path}[{i}]")
        elif type_text.startswith("{") and isinstance(value, dict):
            for k, item in value.items():
                self.body(item, type_text[1:-1], f"{path}.{k}")
        elif type_text.startswith("enum:"):
            self._enum(value, type_text[5:], path)
        elif type_text in PRIMITIVES:
            self._primitive(value, type_text, path)
        elif isinstance(value, dict) and hasattr(self.models, type_text):
            name = _subtype(self.models, type_text, value)
            self.object(value, fields(self.models, name), path, name)

    def object(self, value: dict[str, Any], spec: dict[str, Any], path: str, model: str, top: bool = False) -> None:
        for key, item in value.items():
            key = key.strip("'")
            if top and key in BICEP_RESOURCE_KEYS:
                continue
            if key not in spec:
                self.findings.append(f"{self.where}: {path}.{key}: no such property in {model}")
                continue
            field = spec[key]
            if isinstance(field, dict):
                if isinstance(item, dict):
                    self.object(item, field, f"{path}.{key}", model)
                continue
            if field.readonly and not (top and key in ("name", "id")):
                self.findings.append(f"{self.where}: {path}.{key}: read-only in {model}")
            self.body(item, field.type_text, f"{path}.{key}")

    def _enum(self, value: Any, enum_name: str, path: str) -> None:
        if not isinstance(value, str) or value in self.symbols or "${" in value:
            return
        allowed = {str(m.value).lower() for m in getattr(self.models, enum_name)}
        if value.lower() not in allowed:
            self.findings.append(f"{self.where}: {path}: {value!r} is not a {enum_name} ({sorted(allowed)})")

    def _primitive(self, value: Any, type_text: str, path: str) -> None:
        expected = {"int": (int,), "long": (int,), "float": (int, float), "bool": (bool,)}.get(type_text)
        if expected is None or (isinstance(value, str) and value in self.symbols):
            return
        if isinstance(value, str) and "${" not in value:  # not a symbol (checked above): a string literal
            self.findings.append(f"{self.where}: {path}: string {value!r} where the model wants {type_text}")
        elif isinstance(value, bool) and bool not in expected:
            self.findings.append(f"{self.where}: {path}: bool where the model wants {type_text}")
        elif isinstance(value, (list, dict)):
            self.findings.append(f"{self.where}: {path}: {type(value).__name__} where the model wants {type_text}")


def check_resource(file: str, name: str, resource: dict[str, Any], symbols: dict[str, Any]) -> list[str]:
    """Findings for one pycep resource entry (API version, keys, enum literals)."""
    type_, version = resource["type"], resource.get("api_version", "")
    where = f"{file}: resource {name} ({type_}@{version})"
    entry = RESOURCE_MODELS.get(type_.lower())
    if entry is None:
        return [f"{where}: resource type not in tables.RESOURCE_MODELS (add its package and model)"]
    package, model = entry
    if package is None:
        if (type_.lower(), version) not in UNMODELLED_API_VERSIONS:
            return [f"{where}: API version not in tables.UNMODELLED_API_VERSIONS"]
        return []
    group = OPERATION_GROUPS.get(type_.lower())
    models = models_module(package, version, group)
    if models is None:
        if (type_.lower(), version) in UNMODELLED_API_VERSIONS:
            return []
        known = sorted(package_api_versions(package, group))[-6:]
        return [f"{where}: {package} knows no API version {version} (latest known: {known})"]
    if resource.get("existing"):
        return []
    config = resource["config"]
    while isinstance(config.get("config"), dict) and ("loop_type" in config or "condition" in config):
        config = config["config"]
    walker = Walker(models, where, symbols)
    walker.object(config, fields(models, model), type_.rsplit("/", 1)[-1], model, top=True)
    return walker.findings
