"""docs/platform.md's rows: each check cites the rows (P1, P2, ...) it enforces in its docstring,
and every row it cites exists (a check with no source row would be a belief)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

ROW = re.compile(r"^\| (P\d+) \|", re.M)
CITED = re.compile(r"\bP\d+\b")


def rows(root: Path) -> set[str]:
    """The row ids of docs/platform.md."""
    return set(ROW.findall((root / "docs" / "platform.md").read_text()))


def cited(check: Callable[..., object]) -> set[str]:
    """The rows a check's docstring names."""
    return set(CITED.findall(inspect.getdoc(check) or ""))
