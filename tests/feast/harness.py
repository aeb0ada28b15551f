"""Running Feast (tests/feast/feast_child.py in .venv-feast) against a Redis, and the data it materialises."""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
FEAST_PYTHON = REPO / ".venv-feast" / "bin" / "python"
CHILD = Path(__file__).with_name("feast_child.py")
FEATURES = [
    "user_stats:txn_count_24h",
    "user_stats:avg_amount_30d",
    "user_stats:chargeback_rate",
    "user_stats:is_verified",
    "user_stats:segment",
    "merchant_risk:fraud_rate_30d",
    "merchant_risk:txn_count_7d",
    "user_merchant:txn_count_90d",
]
VIEWS = {
    "user_stats": {"user_id": "string"},
    "merchant_risk": {"merchant_id": "int64"},
    "user_merchant": {"user_id": "string", "merchant_id": "int64"},
}


def feast_python() -> Path:
    """.venv-feast's python; skips (fails under CI=true) when it is not built."""
    if not FEAST_PYTHON.exists():
        why = "Feast is not installed: `make .venv-feast/.installed` (make test builds it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return FEAST_PYTHON


def feast_connection(redis_url: str) -> str:
    """Feast's `connection_string` ("host:port,db=N") for a redis:// URL."""
    parts = urlsplit(redis_url)
    db = parts.path.strip("/") or "0"
    return f"{parts.hostname}:{parts.port or 6379},db={db}"


def new_project() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


def run_feast(spec: dict[str, Any], workdir: Path, timeout_s: float = 240) -> dict[str, Any]:
    """apply + materialize (+ get_online_features) in Feast's own process; its answer."""
    spec = {**spec, "workdir": str(workdir)}
    done = subprocess.run(
        [str(feast_python()), str(CHILD)], input=json.dumps(spec), capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, f"feast failed:\n{done.stderr[-4000:]}"
    answer: dict[str, Any] = json.loads((workdir / "answer.json").read_text())
    return answer


class FeastProcess:
    """Feast kept up in its own process after apply + materialize, measuring `get_online_features`
    on request (feast_child.py `measure`): bench/feast.py interleaves these with its own rounds."""

    def __init__(self, spec: dict[str, Any], workdir: Path) -> None:
        self._log = (workdir / "feast.log").open("w")  # NOTE: Feast's progress, never a pipe left unread
        self._child = subprocess.Popen(
            [str(feast_python()), str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )
        self._send({**spec, "workdir": str(workdir), "serve": True})
        assert self._receive() == "ready", f"feast failed: see {workdir / 'feast.log'}"
        self.answer: dict[str, Any] = json.loads((workdir / "answer.json").read_text())

    def measure(self, **request: Any) -> dict[str, float]:
        """One measurement (`feast_child.measure`'s arguments): lookups, wall_s, cpu_s."""
        self._send(request)
        found: dict[str, float] = json.loads(self._receive())
        return found

    def close(self) -> None:
        if self._child.stdin is not None:
            self._child.stdin.close()
        try:
            self._child.wait(30)
        except subprocess.TimeoutExpired:
            self._child.kill()
        self._log.close()

    def _send(self, message: dict[str, Any]) -> None:
        assert self._child.stdin is not None
        self._child.stdin.write(json.dumps(message) + "\n")
        self._child.stdin.flush()

    def _receive(self) -> str:
        """The next "@@" line of the child (Feast's own lines skipped); "" if it exited."""
        assert self._child.stdout is not None
        for line in self._child.stdout:
            if line.startswith("@@"):
                return line[2:].strip()
        return ""


def dataset(seed: int, now: float, users: int = 240, merchants: int = 40) -> dict[str, Any]:
    """Rows for the three views: nulls, negative and huge ints, unicode ids, stale and fresh merchants,
    and entities requested that were never written."""
    rng = random.Random(seed)  # noqa: S311 test data, not secrets
    user_ids = [f"u{i:04d}" if i % 11 else f"ü-{i} x" for i in range(users)]
    merchant_ids = [i if i % 5 else (1 << 62) + i for i in range(merchants)]
    user_rows = []
    for i, user in enumerate(user_ids):
        if i % 13 == 0:
            continue  # never written
        null = i % 7 == 0
        user_rows.append({
            "user_id": user, "event_timestamp": now - rng.uniform(0, 3 * 86_400),
            "txn_count_24h": None if null else rng.randint(-5, 10**12),
            "avg_amount_30d": None if null else rng.uniform(-1e6, 1e6),
            "chargeback_rate": None if null or i % 3 == 0 else rng.random(),
            "is_verified": None if null else bool(i % 2),
            "segment": None if null else rng.choice(["a", "b", "ünï"]),
        })  # fmt: skip
    merchant_rows = [
        {"merchant_id": m, "event_timestamp": now - (600 if k % 2 else 7200), "fraud_rate_30d": rng.random(),
         "txn_count_7d": rng.randint(-(2**40), 2**40)}
        for k, m in enumerate(merchant_ids) if k % 9
    ]  # fmt: skip
    pair_rows = [
        {"user_id": rng.choice(user_ids), "merchant_id": rng.choice(merchant_ids), "event_timestamp": now - 60,
         "txn_count_90d": rng.randint(0, 500)}
        for _ in range(300)
    ]  # fmt: skip
    asked = [
        {"user_id": rng.choice([*user_ids, "nobody", "u9999"]), "merchant_id": rng.choice([*merchant_ids, 10**6])}
        for _ in range(400)
    ]
    asked += [{"user_id": r["user_id"], "merchant_id": r["merchant_id"]} for r in pair_rows[:100]]
    return {
        "rows": {"user_stats": user_rows, "merchant_risk": merchant_rows, "user_merchant": pair_rows},
        "entity_rows": asked,
        "features": FEATURES,
    }


def serving_feast(ttl_s: dict[str, float], *, columns: dict[str, str] | None = None) -> dict[str, Any]:
    """The model metadata `serving.feast` for the repo, with each view's max age from Feast's own ttl."""
    return {
        "views": {
            view: {"entities": keys, **({"max_age_s": ttl_s[view]} if ttl_s.get(view) else {})}
            for view, keys in VIEWS.items()
        },
        "features": columns if columns is not None else list(FEATURES),
    }


def now() -> float:
    return time.time()
