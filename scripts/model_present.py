"""Is a model version in the configured source already? For the deploy hooks' seed step (infra/hooks).

    .venv/bin/python scripts/model_present.py fraud 1

Exit 0: it is there; 1: it is not (or the container does not exist yet); 2: the source cannot be
read (yet: a role just granted takes a while to apply), with the reason on stderr.
"""

from __future__ import annotations

import sys

from shared.core.wiring import model_repository
from shared.errors import ScoringError
from shared.models.repository import ModelRef
from shared.settings import Settings


def main(argv: list[str]) -> int:
    name, version = argv
    try:
        refs = model_repository(Settings.from_env()).list()
    except ScoringError as exc:
        print(f"model-present: {exc.detail}", file=sys.stderr)
        return 1 if "ResourceNotFound" in exc.detail else 2
    return 0 if ModelRef(name, version) in refs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
