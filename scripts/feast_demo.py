"""The Feast example of docs/feast.md: Feast materialises the demo users into Redis; the demo model learns to read them.

    .venv/bin/python scripts/feast_demo.py [--project fraud_demo] [--models .run/feast-models]

1. Feast itself (.venv-feast: `make .venv-feast/.installed`) applies a repo (entity `user`, join key
   `user_id`; feature view `demo_user` over a parquet file of data/demo_users.json, ttl 0) and
   materialises it into the Redis at REDIS_URL (default redis://127.0.0.1:6379/0) under --project.
2. The demo model (models/fraud/1) is copied to --models/fraud/1 with `serving.feast` added: its five
   user columns read `demo_user:<column>`, at most 30 days old.
Then: FEATURE_STORE=feast FEAST_PROJECT=<project> REDIS_URL=... MODELS_DIR=<models> make run
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.feast import write_demo_model  # noqa: E402  (after the path: a script run from anywhere)
from tests.feast import harness  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", default="fraud_demo")
    parser.add_argument("--models", type=Path, default=ROOT / ".run" / "feast-models")
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"
    users = json.loads((ROOT / "data" / "demo_users.json").read_text())
    now = time.time()
    spec = {
        "redis": harness.feast_connection(url),
        "project": args.project,
        "rows": {"demo_user": [{"user_id": u, "event_timestamp": now - 60, **f} for u, f in users.items()]},
    }
    with tempfile.TemporaryDirectory() as workdir:
        harness.run_feast(spec, Path(workdir), timeout_s=600)
    print(f"feast: {len(users)} users of view demo_user materialised into {url} (project {args.project})")
    target = write_demo_model(args.models)  # the same model `make bench` serves from Feast's layout
    print(f"model: {target} reads its user columns from Feast")
    print(f"now: FEATURE_STORE=feast FEAST_PROJECT={args.project} REDIS_URL={url} MODELS_DIR={args.models} make run")


if __name__ == "__main__":
    main()
