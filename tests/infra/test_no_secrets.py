"""No secret, key, password or connection string appears in the infrastructure files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import BICEP_FILES, INFRA, REPO, parse_bicep

SCANNED = [
    *sorted(p for p in INFRA.rglob("*") if p.is_file()),
    REPO / "azure.yaml",
    REPO / "Dockerfile",
    REPO / ".dockerignore",
]

SECRET_PATTERNS = {
    "storage/service bus key in a connection string": re.compile(
        r"(AccountKey|SharedAccessKey|SharedAccessSignature)\s*=", re.I
    ),
    "instrumentation key literal": re.compile(r"InstrumentationKey\s*=\s*[0-9a-f-]{8}", re.I),
    "password assignment": re.compile(r"(password|passwd|pwd)\s*[:=]\s*['\"][^'\"$]", re.I),
    "redis URL with credentials": re.compile(r"rediss?://[^/\s'\"]*:[^/\s'\"@]*@"),
    "private key block": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "SAS token": re.compile(r"[?&]sig=[A-Za-z0-9%+/=]{20,}"),
    "long base64 literal": re.compile(r"['\"][A-Za-z0-9+/]{40,}={0,2}['\"]"),
    "key-listing function": re.compile(r"\.?list(Keys|ConnectionStrings|AccountSas|ServiceSas|Secrets)\s*\(", re.I),
}

NO_SECRET_WORDS = re.compile(r"(key|secret|password|connectionstring)", re.I)


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(REPO)))
def test_no_secret_looking_literal(path: Path) -> None:
    text = path.read_text()
    hits = [f"{label}: {m.group(0)!r}" for label, rx in SECRET_PATTERNS.items() for m in rx.finditer(text)]
    assert not hits, f"{path.relative_to(REPO)}: {hits}"


@pytest.mark.parametrize("path", BICEP_FILES, ids=lambda p: str(p.relative_to(INFRA)))
def test_no_secure_params_or_secret_outputs(path: Path) -> None:
    tree = parse_bicep(path)
    secure = [n for n, p in tree.get("parameters", {}).items() if any(d["type"] == "secure" for d in p["decorators"])]
    assert not secure, f"{path.name}: @secure() params mean a secret is passed in: {secure}"
    outputs = [n for n in tree.get("outputs", {}) if NO_SECRET_WORDS.search(n)]
    assert not outputs, f"{path.name}: outputs that look like secrets: {outputs}"


def test_container_app_holds_no_secrets() -> None:
    text = (INFRA / "modules" / "app.bicep").read_text()
    assert not re.search(r"^\s*secrets\s*:", text, re.M), "configuration.secrets must stay empty"
    assert "secretRef" not in text and "passwordSecretRef" not in text


def test_event_grid_key_is_never_printed_nor_on_a_command_line() -> None:
    hook = (INFRA / "hooks" / "eventgrid-subscription.sh").read_text()
    assert "set -x" not in hook
    for line in hook.splitlines():
        uses_key = "$key" in line or "${key}" in line
        if re.match(r"\s*echo\b", line):
            assert not uses_key and "endpoint" not in line, line
        elif re.match(r"\s*printf\b", line) and uses_key:
            # printf is a shell builtin (no argv in `ps`); its output goes to the private file only
            assert line.rstrip().endswith('>"$endpoint_file"'), line
        elif uses_key:
            # only the shell's own tests (`[` is a builtin) and the assignment from az's output
            assert re.match(r'\s*((while |if )?\[ -[nz] "\$key" \]|key=)', line), (
                f"the key reaches a command line: {line}"
            )
    assert "umask 077" in hook and "trap 'rm -f \"$endpoint_file\"' EXIT" in hook
    assert '--endpoint "@$endpoint_file"' in hook, "az must read the endpoint (with its key) from the file"
