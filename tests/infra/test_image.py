"""The image holds what the app needs at run time and nothing else (.dockerignore, Dockerfile)."""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch

from conftest import REPO

RUNTIME = {"function_app.py", "host.json", "requirements.txt", "shared", "models", "data"}


def _included(path: str) -> bool:
    """Docker's rule: the last matching .dockerignore pattern decides; `!` re-includes."""
    included = True
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate, pattern = line.startswith("!"), line.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch(p, pattern) or fnmatch(p, pattern.replace("**/", "")) for p in prefixes):
            included = negate
    return included


def test_only_the_runtime_set_goes_into_the_image() -> None:
    top = {p.name for p in REPO.iterdir()}
    assert {name for name in top if _included(name)} == RUNTIME & top


def test_bytecode_and_caches_stay_out() -> None:
    assert not _included("shared/__pycache__/settings.cpython-311.pyc")
    assert not _included("shared/x.pyc")
    assert _included("shared/settings.py") and _included("models/fraud/1/model.onnx")


def test_dockerfile_copies_only_what_is_sent() -> None:
    text = (REPO / "Dockerfile").read_text()
    sources = [s for line in re.findall(r"^COPY\s+(.+)$", text, re.M) for s in line.split()[:-1]]
    assert sources, "the Dockerfile copies nothing"
    for source in sources:
        assert source == "." or _included(source), f"COPY {source}: excluded by .dockerignore"


def test_repo_files_the_package_names_are_in_the_image() -> None:
    # Any string in shared/ that is a path into a top-level folder of the repo (e.g. the
    # settings default data/demo_users.json) is read at run time, so it must ship.
    folders = {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")}
    paths = {
        node.value
        for source in sorted((REPO / "shared").rglob("*.py"))
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"[\w.-]+/[\w./-]+", node.value)
        and node.value.split("/", 1)[0] in folders
    }
    for path in sorted(paths):
        assert _included(path), f"shared/ reads {path}, which .dockerignore leaves out of the image"
