"""What the Bicep compiler would reject, checked from tokens: unknown symbols, module
arguments that are not the module's parameters (or required ones left out), literals
of the wrong type passed to a module parameter, and `int()` of a non-integer literal.

pycep gives identifiers and string literals alike as Python `str`, so these checks
tokenize the source themselves. The lexer knows comments, strings (with `${...}`
interpolation), multi-line strings, numbers, identifiers and punctuation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .tables import BICEP_DECORATORS, BICEP_FUNCTIONS, BICEP_KEYWORDS, BICEP_NAMESPACES, BICEP_TYPES


@dataclass(frozen=True)
class Token:
    kind: str  # "id", "str" (no interpolation), "istr" (interpolated), "num", "punct", "nl"
    text: str
    line: int


PUNCT = re.compile(r"=>|\?\?|\?\.|::|==|!=|<=|>=|&&|\|\||[{}\[\]().,:?=!<>+\-*/%@]")


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    i, line, n = 0, 1, len(source)
    depth_stack: list[int] = []  # brace depth at each open interpolation
    brace = 0

    def read_string(start: int, continued: bool = False) -> int:
        """Read from after an opening quote (or an interpolation's `}`) to its end."""
        nonlocal line
        j, text = start, ""
        while j < n:
            c = source[j]
            if c == "\\":
                text += source[j : j + 2]
                j += 2
                continue
            if c == "'":
                tokens.append(Token("istr" if continued else "str", text, line))
                return j + 1
            if source.startswith("${", j):
                tokens.append(Token("istr", text, line))
                depth_stack.append(brace)
                return j + 2
            if c == "\n":
                line += 1
            text += c
            j += 1
        raise SyntaxError(f"unterminated string at line {line}")

    while i < n:
        c = source[i]
        if c == "\n":
            tokens.append(Token("nl", "\n", line))
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif source.startswith("//", i):
            i = source.find("\n", i) if "\n" in source[i:] else n
        elif source.startswith("/*", i):
            end = source.index("*/", i)
            line += source.count("\n", i, end)
            i = end + 2
        elif source.startswith("'''", i):
            end = source.index("'''", i + 3)
            tokens.append(Token("str", source[i + 3 : end], line))
            line += source.count("\n", i, end)
            i = end + 3
        elif c == "'":
            i = read_string(i + 1)
        elif c == "}" and depth_stack and depth_stack[-1] == brace:
            depth_stack.pop()
            i = read_string(i + 1, continued=True)
        elif c.isalpha() or c == "_":
            m = re.compile(r"[A-Za-z_]\w*").match(source, i)
            assert m
            tokens.append(Token("id", m.group(0), line))
            i = m.end()
        elif c.isdigit():
            m = re.compile(r"\d+(\.\d+)?").match(source, i)
            assert m
            tokens.append(Token("num", m.group(0), line))
            i = m.end()
        else:
            m = PUNCT.match(source, i)
            if not m:
                raise SyntaxError(f"unexpected {c!r} at line {line}")
            brace += {"{": 1, "}": -1}.get(m.group(0), 0)
            tokens.append(Token("punct", m.group(0), line))
            i = m.end()
    return tokens


@dataclass
class BicepFile:
    path: Path
    tokens: list[Token]
    params: dict[str, tuple[str, bool, list[Token]]]  # name -> (type, has default, default tokens)
    variables: dict[str, list[Token]]
    declared: set[str]
    modules: dict[str, tuple[str, dict[str, list[Token]]]]  # name -> (path, {arg: value tokens})
    resources: dict[str, str]  # name -> 'Type@version'
    outputs: dict[str, list[Token]]

    @classmethod
    def load(cls, path: Path) -> BicepFile:
        tokens = tokenize(path.read_text())
        f = cls(path, tokens, {}, {}, set(), {}, {}, {})
        f._declarations()
        return f

    def _declarations(self) -> None:
        t = self.tokens
        for i, tok in enumerate(t):
            start_of_line = i == 0 or t[i - 1].kind == "nl"
            if not (start_of_line and tok.kind == "id" and i + 1 < len(t) and t[i + 1].kind == "id"):
                continue
            name = t[i + 1].text
            if tok.text == "param":
                type_ = t[i + 2].text
                default = _line_rest(t, i + 3)
                has_default = bool(default) and default[0].text == "="
                self.params[name] = (type_, has_default, _expression(t, i + 4) if has_default else [])
            elif tok.text == "var":
                self.variables[name] = _expression(t, i + 3)
            elif tok.text == "module":
                self.modules[name] = (t[i + 2].text, _module_params(t, i))
            elif tok.text == "resource":
                self.resources[name] = t[i + 2].text
            elif tok.text == "output":
                self.outputs[name] = _expression(t, i + 4)
            elif tok.text not in ("type", "func"):
                continue
            self.declared.add(name)
        # Loop variables: `for x in` and `for (x, i) in`; lambda parameters: `x =>`, `(a, b) =>`.
        for i, tok in enumerate(t):
            if tok.kind == "id" and tok.text == "for":
                j = i + 1
                while j < len(t) and t[j].text != "in":
                    if t[j].kind == "id":
                        self.declared.add(t[j].text)
                    j += 1
            if tok.text == "=>":
                j = i - 1
                if t[j].text == ")":
                    while t[j].text != "(":
                        if t[j].kind == "id":
                            self.declared.add(t[j].text)
                        j -= 1
                elif t[j].kind == "id":
                    self.declared.add(t[j].text)


def _line_rest(t: list[Token], i: int) -> list[Token]:
    out = []
    while i < len(t) and t[i].kind != "nl":
        out.append(t[i])
        i += 1
    return out


def _expression(t: list[Token], i: int) -> list[Token]:
    """Tokens of one expression starting at i: to the end of the line, or of its brackets."""
    out, depth = [], 0
    while i < len(t):
        tok = t[i]
        if tok.kind == "nl" and depth == 0:
            break
        if tok.text in "([{" and tok.kind == "punct":
            depth += 1
        elif tok.text in ")]}" and tok.kind == "punct":
            depth -= 1
        if tok.kind != "nl":
            out.append(tok)
        i += 1
    return out


def _module_params(t: list[Token], i: int) -> dict[str, list[Token]]:
    """The `params: { key: value }` object of the module declared at token i."""
    depth, j = 0, i
    while t[j].text != "{":  # skip `module x 'path' = if (cond)` to the body
        j += 1
    while j < len(t):
        tok = t[j]
        if tok.kind == "punct" and tok.text in "{[(":
            depth += 1
        elif tok.kind == "punct" and tok.text in "}])":
            depth -= 1
            if depth == 0:
                return {}
        if tok.kind == "id" and tok.text == "params" and t[j + 1].text == ":" and t[j + 2].text == "{":
            break
        j += 1
    args: dict[str, list[Token]] = {}
    j, depth = j + 3, 1
    while j < len(t) and depth > 0:
        tok = t[j]
        if depth == 1 and tok.kind in ("id", "str") and (j == 0 or t[j - 1].kind == "nl") and t[j + 1].text == ":":
            args[tok.text] = _expression(t, j + 2)
        if tok.kind == "punct" and tok.text in "{[(":
            depth += 1
        elif tok.kind == "punct" and tok.text in "}])":
            depth -= 1
        j += 1
    return args


# --- the checks -------------------------------------------------------------------------


def undefined_symbols(f: BicepFile) -> list[str]:
    """Identifiers that are neither declared nor Bicep's own (functions, types, keywords)."""
    findings, t = [], f.tokens
    for i, tok in enumerate(t):
        if tok.kind != "id":
            continue
        prev = t[i - 1] if i else Token("nl", "\n", 0)
        nxt = t[i + 1] if i + 1 < len(t) else Token("nl", "\n", 0)
        name = tok.text
        if prev.text in (".", "?.", "::") and prev.kind == "punct":
            continue  # a property or member access
        if nxt.text == ":" and (prev.kind == "nl" or prev.text in ("{", ",")):
            continue  # an object key
        if name in BICEP_KEYWORDS or name in BICEP_TYPES or name in BICEP_NAMESPACES:
            continue
        if prev.text == "@":
            if name not in BICEP_DECORATORS:
                findings.append(f"{f.path.name}:{tok.line}: unknown decorator @{name}")
            continue
        if nxt.text == "(" and nxt.kind == "punct":
            if name not in BICEP_FUNCTIONS and name not in f.declared:
                findings.append(f"{f.path.name}:{tok.line}: unknown function {name}()")
            continue
        if prev.kind == "id" and prev.text in ("param", "var", "resource", "module", "output", "type", "func"):
            continue  # the declared name itself
        if i >= 2 and t[i - 2].text in ("param", "output") and t[i - 2].kind == "id" and prev.kind == "id":
            continue  # the declared type
        if name in f.declared or name in f.params or name in f.variables:
            continue
        findings.append(f"{f.path.name}:{tok.line}: undefined symbol {name!r}")
    return findings


def literal_type(f: BicepFile, expr: list[Token], depth: int = 0) -> str | None:
    """The Bicep type of a simple expression, or None when it takes the compiler to tell."""
    if depth > 5 or not expr:
        return None
    if len(expr) == 1:
        tok = expr[0]
        if tok.kind in ("str", "istr"):
            return "string"
        if tok.kind == "num":
            return "int"
        if tok.text in ("true", "false"):
            return "bool"
        if tok.text in f.params:
            return f.params[tok.text][0]
        if tok.text in f.variables:
            return literal_type(f, f.variables[tok.text], depth + 1)
        return None
    if expr[0].kind == "istr" and expr[-1].kind == "istr":
        return "string"
    first = expr[0]
    if first.kind == "id" and len(expr) > 2 and expr[1].text == "(" and expr[-1].text == ")" and _one_call(expr):
        return {
            "int": "int",
            "string": "string",
            "bool": "bool",
            "length": "int",
            "empty": "bool",
            "toLower": "string",
            "toUpper": "string",
            "uniqueString": "string",
            "guid": "string",
            "format": "string",
            "concat": None,
            "min": "int",
            "max": "int",
        }.get(first.text)
    if first.kind == "punct" and first.text == "[":
        return "array"
    if first.kind == "punct" and first.text == "{":
        return "object"
    if "?" in [t.text for t in expr if t.kind == "punct"]:
        q = next(i for i, t in enumerate(expr) if t.text == "?")
        colon = _top_level_colon(expr, q)
        if colon is not None:
            a, b = literal_type(f, expr[q + 1 : colon], depth + 1), literal_type(f, expr[colon + 1 :], depth + 1)
            return a if a == b else None
    return None


def _one_call(expr: list[Token]) -> bool:
    depth = 0
    for k, tok in enumerate(expr[1:], start=1):
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
            if depth == 0 and k != len(expr) - 1:
                return False
    return True


def _top_level_colon(expr: list[Token], start: int) -> int | None:
    depth = 0
    for k in range(start + 1, len(expr)):
        tok = expr[k]
        if tok.kind == "punct" and tok.text in "([{":
            depth += 1
        elif tok.kind == "punct" and tok.text in ")]}":
            depth -= 1
        elif tok.text == ":" and depth == 0:
            return k
    return None


def module_arguments(files: dict[Path, BicepFile]) -> list[str]:
    """Every module call passes only the callee's params, every required one, of its type."""
    findings = []
    for path, f in files.items():
        for name, (rel, args) in f.modules.items():
            target = (path.parent / rel).resolve()
            callee = files.get(target)
            if callee is None:
                findings.append(f"{path.name}: module {name}: {rel} not found")
                continue
            for arg in sorted(set(args) - set(callee.params)):
                findings.append(f"{path.name}: module {name}: {rel} has no parameter {arg!r}")
            for p, (_, has_default, _) in callee.params.items():
                if not has_default and p not in args:
                    findings.append(f"{path.name}: module {name}: required parameter {p!r} not passed")
            for arg, expr in args.items():
                if arg not in callee.params:
                    continue
                want, got = callee.params[arg][0], literal_type(f, expr)
                if got is not None and want in BICEP_TYPES and got != want:
                    findings.append(f"{path.name}: module {name}: {arg} is {want} in {rel}, passed a {got}")
    return findings


def module_outputs(files: dict[Path, BicepFile]) -> list[str]:
    """`mod.outputs.x` names an output the module declares."""
    findings = []
    for path, f in files.items():
        t = f.tokens
        for i, tok in enumerate(t[:-4]):
            if tok.kind == "id" and tok.text in f.modules and t[i + 1].text == "." and t[i + 2].text == "outputs":
                if i and t[i - 1].text in (".", "?."):
                    continue
                callee = files.get((path.parent / f.modules[tok.text][0]).resolve())
                name = t[i + 4].text
                if callee is not None and name not in callee.outputs:
                    findings.append(f"{path.name}:{tok.line}: module {tok.text} has no output {name!r}")
    return findings


def int_conversions(f: BicepFile) -> list[str]:
    """`int(x)` where x is (or defaults to) a string literal that is not an integer: ARM fails."""
    findings, t = [], f.tokens
    for i, tok in enumerate(t):
        if tok.kind == "id" and tok.text == "int" and i + 3 < len(t) and t[i + 1].text == "(" and t[i + 3].text == ")":
            arg = t[i + 2]
            values = [arg]
            if arg.text in f.params:
                values = f.params[arg.text][2]
            elif arg.text in f.variables:
                values = f.variables[arg.text]
            if len(values) == 1 and values[0].kind == "str" and not re.fullmatch(r"-?\d+", values[0].text):
                findings.append(
                    f"{f.path.name}:{tok.line}: int({arg.text}) of {values[0].text!r}: ARM int() takes integer strings only"
                )
    return findings


def resource_type_of(files: dict[Path, BicepFile], caller: Path, param: str) -> str | None:
    """The resource type a module parameter carries (`x: mod.outputs.id` -> `res.id` in mod)."""
    callee = files[caller.resolve()]
    for f in files.values():
        for _, (rel, args) in f.modules.items():
            if (f.path.parent / rel).resolve() != callee.path.resolve() or param not in args:
                continue
            text = "".join(t.text for t in args[param])
            m = re.fullmatch(r"(\w+)\.outputs\.(\w+)", text)
            if not m or m.group(1) not in f.modules:
                return None
            source = files[(f.path.parent / f.modules[m.group(1)][0]).resolve()]
            out = "".join(t.text for t in source.outputs.get(m.group(2), []))
            res = re.fullmatch(r"(\w+)\.id", out)
            if res and res.group(1) in source.resources:
                return source.resources[res.group(1)].split("@")[0]
    return None


def load_all(infra: Path) -> dict[Path, BicepFile]:
    return {p.resolve(): BicepFile.load(p) for p in sorted(infra.rglob("*.bicep"))}


def check_language(infra: Path) -> list[str]:
    """Symbols, module arguments and outputs, literal types and int() as Bicep defines them (P25)."""
    files = load_all(infra)
    findings = module_arguments(files) + module_outputs(files)
    for f in files.values():
        findings += undefined_symbols(f) + int_conversions(f)
    return findings
