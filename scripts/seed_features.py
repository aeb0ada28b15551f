"""Load the demo user features into the online feature store (Redis at REDIS_URL).

REDIS_URL=redis://127.0.0.1:6379/0 make seed
"""

from __future__ import annotations

import asyncio
import sys

from shared.features.store import load_feature_file, seed_redis
from shared.settings import Settings


def main() -> int:
    settings = Settings.from_env()
    if not settings.redis_url:
        print("REDIS_URL is not set: nothing to seed (the embedded default reads the demo file directly)")
        return 1
    users = load_feature_file(settings.features_file or "data/demo_users.json")
    count = asyncio.run(seed_redis(settings.redis_url, users, prefix=settings.redis_prefix))
    print(f"seeded {count} users into {settings.redis_url.split('@')[-1]} (prefix {settings.redis_prefix!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
