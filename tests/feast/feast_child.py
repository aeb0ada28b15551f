"""Feast itself, in its own venv (.venv-feast): apply a feature repo, materialise it into Redis, read it back.

Run by tests/features/test_feast.py and bench/feast.py as `.venv-feast/bin/python tests/feast/feast_child.py`,
with one JSON object as the first line of stdin:

    {"redis": "127.0.0.1:6379,db=0", "project": "t1a2b3", "workdir": "/tmp/...",
     "rows": {"user_stats": [{"user_id": "u1", "event_timestamp": 1.7e9, "txn_count_24h": 3, ...}], ...},
     "entity_rows": [{"user_id": "u1", "merchant_id": 7}, ...],
     "features": ["user_stats:txn_count_24h", ...],
     "serve": true}   (optional: stay up and measure get_online_features on request)

and writes one JSON object to {workdir}/answer.json (Feast prints its progress on stdout):
{"ttl_s": {view: seconds}, "online": {feature: [values]}}.
The repo (entities, file sources, three feature views, one with a TTL) is `repo()` below.

With "serve", it then prints "@@ready" and answers each further stdin line, one measurement asked
as JSON (`measure()`), with one stdout line "@@" + JSON: bench/feast.py interleaves them with its
own rounds, so both sides see the same machine (tests/feast/harness.py `FeastProcess`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
from feast import Entity, FeatureStore, FeatureView, Field, FileSource, RepoConfig, ValueType
from feast.types import Bool, Float32, Float64, Int64, String

SCHEMAS = {
    "user_stats": [
        Field(name="txn_count_24h", dtype=Int64),
        Field(name="avg_amount_30d", dtype=Float64),
        Field(name="chargeback_rate", dtype=Float32),
        Field(name="is_verified", dtype=Bool),
        Field(name="segment", dtype=String),
    ],
    "merchant_risk": [Field(name="fraud_rate_30d", dtype=Float64), Field(name="txn_count_7d", dtype=Int64)],
    "user_merchant": [Field(name="txn_count_90d", dtype=Int64)],
    # the demo model's user features (data/demo_users.json): bench/feast.py and the README's example
    "demo_user": [
        Field(name=n, dtype=Float64)
        for n in (
            "user_account_age_days",
            "user_avg_amount_30d",
            "user_chargebacks_90d",
            "user_distinct_countries_30d",
            "user_txn_count_24h",
        )
    ],
}
TTL = {
    "user_stats": timedelta(0),
    "merchant_risk": timedelta(hours=1),
    "user_merchant": timedelta(days=30),
    "demo_user": timedelta(0),
}


def repo(workdir: Path, rows: dict[str, list[dict[str, Any]]]) -> list[Any]:
    """Two entities (a string key, an int64 key) and the views given rows: by user, by merchant (TTL 1 h),
    by both; or the demo model's user features."""
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
    merchant = Entity(name="merchant", join_keys=["merchant_id"], value_type=ValueType.INT64)
    entities = {
        "user_stats": [user],
        "merchant_risk": [merchant],
        "user_merchant": [user, merchant],
        "demo_user": [user],
    }
    objects: list[Any] = [user, merchant]
    for view, fields in SCHEMAS.items():
        if not rows.get(view):
            continue
        frame = pd.DataFrame(rows.get(view) or [])
        frame["event_timestamp"] = pd.to_datetime(frame["event_timestamp"], unit="s", utc=True)
        for f in fields:  # NOTE: nullable dtypes, so a None stays a null (not NaN in a float column)
            dtype = {Int64: "Int64", Float64: "Float64", Float32: "Float32", Bool: "boolean", String: "string"}[f.dtype]
            frame[f.name] = frame[f.name].astype(dtype)
        if "merchant_id" in frame:
            frame["merchant_id"] = frame["merchant_id"].astype("int64")
        path = workdir / f"{view}.parquet"
        frame.to_parquet(path)
        source = FileSource(name=f"{view}_source", path=str(path), timestamp_field="event_timestamp")
        objects.append(FeatureView(name=view, entities=entities[view], ttl=TTL[view], schema=fields, source=source))
    return objects


def main() -> None:
    spec = json.loads(sys.stdin.readline())
    workdir = Path(spec["workdir"])
    workdir.mkdir(parents=True, exist_ok=True)
    config = RepoConfig(
        project=spec["project"],
        provider="local",
        registry=str(workdir / "registry.db"),
        online_store={"type": "redis", "connection_string": spec["redis"], **spec.get("online_store", {})},
        offline_store={"type": "file"},
        entity_key_serialization_version=3,
    )
    store = FeatureStore(config=config)
    store.apply(repo(workdir, spec["rows"]))
    store.materialize(datetime(2000, 1, 1, tzinfo=UTC), datetime.now(UTC) + timedelta(minutes=1))
    answer: dict[str, Any] = {"ttl_s": {v: TTL[v].total_seconds() for v in TTL}}
    if spec.get("entity_rows"):
        online = store.get_online_features(features=spec["features"], entity_rows=spec["entity_rows"])
        answer["online"] = online.to_dict()
    (workdir / "answer.json").write_text(json.dumps(answer, default=str))
    if spec.get("serve"):
        serve(store, spec["features"], spec["entity_rows"])


def serve(store: FeatureStore, features: list[str], rows: list[dict[str, Any]]) -> None:
    print("@@ready", flush=True)
    for line in sys.stdin:
        print("@@" + json.dumps(measure(store, features, rows, **json.loads(line))), flush=True)


def measure(store: FeatureStore, features: list[str], rows: list[dict[str, Any]], *, batch: int, calls: int = 0,
            seconds: float = 0.0, threads: int = 0, offset: int = 0) -> dict[str, float]:  # fmt: skip
    """`get_online_features(...).to_dict()` of `batch` entity rows per call, the documented online
    pattern (one call per request): `calls` calls in a row, or as many as fit in `seconds`, from
    this thread or from a pool of `threads` each calling in a loop. Wall and CPU seconds of the
    process (every thread), and the lookups (entity rows) read."""

    def call(i: int) -> None:
        start = (offset + i) * batch % max(1, len(rows) - batch)
        store.get_online_features(features=features, entity_rows=rows[start : start + batch]).to_dict()

    call(0)  # warm
    lookups = [0]
    lock = threading.Lock()

    def loop(first: int, step: int, deadline: float) -> None:
        i, done = first, 0
        while (i < calls) if calls else (time.perf_counter() < deadline):
            call(i)
            i, done = i + step, done + 1
        with lock:
            lookups[0] += done * batch

    cpu, wall = time.process_time(), time.perf_counter()
    deadline = wall + seconds
    if threads:
        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(loop, k, threads, deadline) for k in range(threads)]:
                future.result()
    else:
        loop(0, 1, deadline)
    return {"lookups": lookups[0], "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}


if __name__ == "__main__":
    main()
