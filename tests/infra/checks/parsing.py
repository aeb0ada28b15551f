"""pycep parsing, shared and cached by file content.

Building a pycep parser loads its grammar (about a second); parsing is fast. One parser
serves every check, and a file whose text was parsed before is not parsed again (the
mutation test changes one file of a copied tree at a time). Callers must not mutate
the returned trees.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pycep import BicepParser


@cache
def _parser() -> BicepParser:
    return BicepParser()


@cache
def parse_text(text: str) -> dict[str, Any]:
    return _parser().parse(text=text)


def parse(path: Path) -> dict[str, Any]:
    """Parse one Bicep file; a syntax error raises."""
    return parse_text(path.read_text())
