"""Rewrite the README's settings table from the declarations in shared/settings.py (`make readme`)."""

from __future__ import annotations

import sys
from pathlib import Path

from shared.settings import markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"


def main() -> int:
    text = README.read_text()
    start = text.index("| setting | type | default | meaning |")
    end = text.index("\n\n", start)
    README.write_text(text[:start] + markdown_table() + text[end:])
    print(f"{README.name}: settings table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
