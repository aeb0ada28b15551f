"""Rewrite the settings table of docs/settings.md from the declarations in shared/settings.py (`make readme`)."""

from __future__ import annotations

import sys
from pathlib import Path

from shared.setting import markdown_table
from shared.settings import Settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "settings.md"


def main() -> int:
    text = PAGE.read_text()
    start = text.index("| setting | type | default | meaning |")
    end = text.index("\n\n", start) if "\n\n" in text[start:] else len(text.rstrip("\n"))
    PAGE.write_text(text[:start] + markdown_table(Settings) + text[end:].rstrip("\n") + "\n")
    print(f"docs/{PAGE.name}: settings table rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
