"""The sale calendar's KEDA cron rules: what app.bicep builds equals what the preprovision hook
checked and printed (infra/hooks/sale_calendar.py), and the rules reach the PATCHed scale block.

app.bicep turns each window's local times into cron strings with `substring` and `int` inside an
interpolated string. The Bicep compiler cannot run here, so `evaluate` is a small evaluator of
exactly that subset of Bicep expressions (identifiers, `a.b`, integer and string literals, and the
calls `int`, `string`, `substring`), applied to the real app.bicep text: an offset changed there
changes the strings it yields, and the comparison with the hook fails.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from .bicep_lang import BicepFile
from .contract import _var_text
from .parsing import parse

# Windows whose fields differ in every digit position the substrings read (one- and two-digit
# minutes, hours, days and months), so an offset moved by one yields a different string.
SAMPLE_WINDOWS = (
    {"start": "2026-12-11T08:45", "end": "2026-12-11T11:00", "timezone": "Europe/London", "replicas": 30},
    {"start": "2027-01-02T03:04", "end": "2027-10-29T23:59", "timezone": "America/New_York", "replicas": 7},
)
CRON_METADATA = ("timezone", "start", "end", "desiredReplicas")

_TOKEN = re.compile(r"\s*(?:(\d+)|'([^']*)'|([A-Za-z_]\w*)|([().,]))")


def hook_module(root: Path) -> ModuleType:
    """infra/hooks/sale_calendar.py of `root` (standard library only: importable from any venv)."""
    path = root / "infra" / "hooks" / "sale_calendar.py"
    spec = importlib.util.spec_from_file_location(f"sale_calendar_{abs(hash(str(root)))}", path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NOTE: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _tokens(text: str) -> list[tuple[str, str]]:
    out, i = [], 0
    while i < len(text.rstrip()):
        m = _TOKEN.match(text, i)
        if not m:
            raise ValueError(f"cannot read Bicep expression {text!r} at {text[i:]!r}")
        kind = ("num", "str", "id", "punct")[next(k for k in range(4) if m.group(k + 1) is not None)]
        out.append((kind, m.group(m.lastindex or 0)))
        i = m.end()
    return out


def evaluate(text: str, scope: dict[str, Any]) -> Any:
    """One Bicep expression of the subset above, in `scope` (loop variables)."""
    tokens = _tokens(text)
    value, rest = _expression(tokens, scope)
    if rest:
        raise ValueError(f"unexpected {rest[0][1]!r} in {text!r}")
    return value


def _expression(tokens: list[tuple[str, str]], scope: dict[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    if not tokens:
        raise ValueError("an expression ends early")
    (kind, text), rest = tokens[0], tokens[1:]
    if kind == "num":
        return int(text), rest
    if kind == "str":
        return text, rest
    if kind != "id":
        raise ValueError(f"unexpected {text!r}")
    if rest and rest[0] == ("punct", "("):
        args, rest = _arguments(rest[1:], scope)
        value: Any = _call(text, args)
    elif text in scope:
        value = scope[text]
    else:
        raise ValueError(f"unknown symbol {text!r}")
    while rest and rest[0] == ("punct", "."):
        value, rest = value[rest[1][1]], rest[2:]
    return value, rest


def _arguments(tokens: list[tuple[str, str]], scope: dict[str, Any]) -> tuple[list[Any], list[tuple[str, str]]]:
    args: list[Any] = []
    while tokens and tokens[0] != ("punct", ")"):
        value, tokens = _expression(tokens, scope)
        args.append(value)
        if tokens and tokens[0] == ("punct", ","):
            tokens = tokens[1:]
    return args, tokens[1:]


def _call(name: str, args: list[Any]) -> Any:
    """Bicep's own semantics: int() takes integer strings only; substring(s, start, length)."""
    if name == "int":
        if not re.fullmatch(r"-?\d+", str(args[0])):
            raise ValueError(f"int({args[0]!r}): ARM int() takes integer strings only")
        return int(args[0])
    if name == "string":
        return str(args[0]).lower() if isinstance(args[0], bool) else str(args[0])
    if name == "substring":
        text, start, length = args
        if start + length > len(text):
            raise ValueError(f"substring({text!r}, {start}, {length}) runs past the end")
        return text[start : start + length]
    raise ValueError(f"the evaluator knows no function {name}()")


def interpolate(value: Any, scope: dict[str, Any]) -> Any:
    """A pycep value of the loop body, evaluated: interpolated strings, `a.b`, `string(a.b)`."""
    if isinstance(value, dict) and "operator" in value:
        operator = value["operator"]
        assert operator["type"] == "property_accessor", operator
        operands = operator["operands"]
        return interpolate(operands["operand_1"], scope)[operands["operand_2"]]
    if isinstance(value, dict) and "function" in value:
        function = value["function"]
        return _call(function["type"], [interpolate(v, scope) for v in function["parameters"].values()])
    if isinstance(value, dict):
        return {key: interpolate(v, scope) for key, v in value.items()}
    if isinstance(value, str) and value in scope:
        return scope[value]
    if isinstance(value, str):
        return re.sub(r"\$\{([^}]*)\}", lambda m: str(evaluate(m.group(1), scope)), value)
    return value


def bicep_sale_rules(app_tree: dict[str, Any], windows: list[dict[str, Any]]) -> list[Any]:
    """app.bicep's `saleRules` for these windows, as ARM would build them."""
    loop = app_tree["variables"]["saleRules"]["value"]
    detail = loop["loop_type"]["detail"]
    return [
        interpolate(loop["config"], {detail["item_name"]: window, detail["index_name"]: i})
        for i, window in enumerate(windows)
    ]


def _sale_loop_findings(app: dict[str, Any]) -> list[str]:
    loop = app.get("variables", {}).get("saleRules", {}).get("value")
    if not isinstance(loop, dict) or "loop_type" not in loop:
        return ["app.bicep: no `var saleRules = [for ...]` (one KEDA cron rule a sale window)"]
    if loop["loop_type"]["detail"].get("array_name") != "saleWindows" or "saleWindows" not in app.get("parameters", {}):
        return ["app.bicep: saleRules does not loop over the saleWindows parameter"]
    return []


def _scale_findings(root: Path, app: dict[str, Any]) -> list[str]:
    """The sale rules are among the rules the hook PATCHes (P11) and main.bicep feeds them."""
    findings = []
    scale_rules = BicepFile.load(root / "infra" / "modules" / "app.bicep").variables.get("scaleRules", [])
    text = "".join(t.text for t in scale_rules)
    if not re.fullmatch(r"concat\((\w+,)*saleRules(,\w+)*\)", text):
        findings.append(f"app.bicep: scaleRules is {text!r}, not a concat() that includes saleRules")
    if app.get("outputs", {}).get("scale", {}).get("value", {}).get("rules") != "scaleRules":
        findings.append("app.bicep: the scale output (PATCHed by keda-scale-rules.sh) does not carry scaleRules")
    main = BicepFile.load(root / "infra" / "main.bicep")
    passed = "".join(t.text for t in main.modules.get("app", ("", {}))[1].get("saleWindows", []))
    if passed != "saleWindows":
        findings.append(f"main.bicep: module app gets saleWindows {passed!r}, not the parsed calendar saleWindows")
    parsed = "".join(t.text for t in main.variables.get("saleWindows", []))
    if parsed != "saleCalendar":
        findings.append(f"main.bicep: saleWindows is {parsed!r}, not the saleCalendar parameter")
    if main.params.get("saleCalendar", ("",))[0] != "array":
        # P84: azd pastes a string parameter's value into the parameters file unescaped (the calendar's
        # quotes break it) and parses an array parameter's value as JSON.
        findings.append("main.bicep: saleCalendar must be an array parameter (P84), not a JSON string")
    return findings


def _settings_findings(root: Path, hook: ModuleType) -> list[str]:
    """The azd variables the hook reads are the ones main.parameters.json feeds each parameter."""
    azd = json.loads((root / "infra" / "main.parameters.json").read_text())["parameters"]
    findings = []
    for param, variable in hook.SETTINGS.items():
        value = str(azd.get(param, {}).get("value", ""))
        if not re.fullmatch(rf"\$\{{{variable}(=[^}}]*)?\}}", value):
            findings.append(f"main.parameters.json: {param} is {value!r}; the sale-calendar hook reads {variable}")
    calendar = re.fullmatch(r"\$\{\w+=([^}]*)\}", str(azd.get("saleCalendar", {}).get("value", "")))
    if not calendar or calendar.group(1) != "[]":
        findings.append(
            "main.parameters.json: saleCalendar needs the default [] (azd parses an array's value as JSON: P84)"
        )
    bicep_profiles = _var_text(parse(root / "infra" / "main.bicep"), "profiles")
    if hook.read_profiles((root / "infra" / "main.bicep").read_text()) != bicep_profiles:
        findings.append("infra/hooks/sale_calendar.py reads main.bicep's profiles otherwise than Bicep does")
    return findings


def check_sale_rules(root: Path) -> list[str]:
    """The sale calendar's KEDA cron rules (P80): app.bicep makes one `cron` rule a window, with
    timezone, start, end and desiredReplicas from that window only, the same strings the
    preprovision hook checked and printed; they are concatenated into the scale block the
    postprovision hook PATCHes (P11); the calendar reaches main.bicep as an array azd parses (P84);
    and the hook reads the azd variables main.bicep does (P67)."""
    app = parse(root / "infra" / "modules" / "app.bicep")
    findings = _sale_loop_findings(app)
    if findings:
        return findings
    hook = hook_module(root)
    windows = [dict(w) for w in SAMPLE_WINDOWS]
    try:
        built = bicep_sale_rules(app, windows)
    except (KeyError, ValueError, TypeError) as exc:
        return [f"app.bicep: saleRules cannot be evaluated for {windows}: {exc}"]
    for window, rule, wanted in zip(windows, built, hook.cron_rules(windows), strict=True):
        custom = rule.get("custom", {})
        if custom.get("type") != "cron":
            findings.append(f"app.bicep: sale rule {rule.get('name')} is of type {custom.get('type')!r}, not 'cron'")
        metadata = custom.get("metadata", {})
        if sorted(metadata) != sorted(CRON_METADATA):
            findings.append(f"app.bicep: sale rule metadata {sorted(metadata)}, not {sorted(CRON_METADATA)} (P80)")
        for key in CRON_METADATA:
            if key in metadata and metadata[key] != wanted["custom"]["metadata"][key]:
                findings.append(
                    f"app.bicep: for window {window}, {key} is {metadata[key]!r}; "
                    f"the hook printed {wanted['custom']['metadata'][key]!r}"
                )
        if rule.get("name") != wanted["name"]:
            findings.append(f"app.bicep: sale rule named {rule.get('name')!r}, the hook says {wanted['name']!r}")
    return findings + _scale_findings(root, app) + _settings_findings(root, hook)
