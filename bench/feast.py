"""The user-feature read, three ways, in one run: today's MGET layout, Feast's layout, Feast's own read.

    .venv/bin/python -m bench.feast [--rounds 7] [--repeat 300]

The demo users (data/demo_users.json, 2,000 users, five features) are written twice into one Redis
(REDIS_URL, or a redis-server of our own): as `user:{id}` LZ4-JSON values (`seed_redis`), and by Feast
itself (`feast apply` + `materialize` in .venv-feast, tests/feast/feast_child.py) into its layout.
Then, per batch of 1 and 8 distinct users (no L1: every read goes to Redis):
  - MGET layout: `FeatureStore.contexts` (one MGET, LZ4 + JSON decode);
  - Feast layout: `FeastStore.contexts` (one pipeline of HMGETs, Values decoded by hand);
  - Feast's own `FeatureStore.get_online_features(...).to_dict()` on the same Redis (its own process).
Medians of `--rounds` rounds of `--repeat` reads each; a markdown table on stdout, JSON in --out.

`make bench` (bench/run.py) serves `/api/score` from Feast's layout with the parts below: the demo users
written as Feast writes them (`seed_demo_layout`, no Feast process) and the demo model with
`serving.feast` (`write_demo_model`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import onnx
from redis.asyncio import Redis as Client

from bench.servers import Redis
from shared.domain.events import PaymentEvent
from shared.domain.feast_spec import parse_feast
from shared.domain.spec import FeatureDef, ModelSpec, Thresholds
from shared.features.feast import FeastStore, seed_feast
from shared.features.store import FeatureStore, load_feature_file, seed_redis
from shared.stores.cache.redis_tier import RedisTier

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("user_account_age_days", "user_avg_amount_30d", "user_chargebacks_90d", "user_distinct_countries_30d",
         "user_txn_count_24h")  # fmt: skip
BATCHES = (1, 8)
DEMO_MODEL = ROOT / "models" / "fraud" / "1" / "model.onnx"
DEMO_MAX_AGE_S = 30 * 86_400


def demo_feast(max_age_s: float | None = None) -> dict[str, Any]:
    """The demo model's `serving.feast`: its five user columns read from the Feast view `demo_user`."""
    view: dict[str, Any] = {"entities": {"user_id": "string"}}
    if max_age_s:
        view["max_age_s"] = max_age_s
    return {"views": {"demo_user": view}, "features": {n: f"demo_user:{n}" for n in NAMES}}


def demo_spec() -> ModelSpec:
    """The demo model's five user columns, read from the Feast view `demo_user`."""
    return ModelSpec(tuple(FeatureDef(n, 0.0) for n in NAMES), "x", "y", 1, Thresholds(0.5, 0.8),
                     feast=parse_feast(demo_feast(), NAMES))  # fmt: skip


def write_demo_model(models_dir: Path, max_age_s: float = DEMO_MAX_AGE_S) -> Path:
    """The demo model copied to `models_dir`/fraud/1 with `serving.feast` added (a MODELS_DIR to serve)."""
    model = onnx.load(str(DEMO_MODEL))
    props = {p.key: p.value for p in model.metadata_props}
    onnx.helper.set_model_props(model, {**props, "serving.feast": json.dumps(demo_feast(max_age_s))})
    target = models_dir / "fraud" / "1" / "model.onnx"
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target


async def seed_demo_layout(url: str, project: str, *, event_time_s: float) -> int:
    """The demo users in Feast's Redis layout under `project`, byte for byte as `feast materialize`
    writes view `demo_user` (five Float64 features; tests/features/test_feast.py holds `seed_feast` to it)."""
    users = load_feature_file(ROOT / "data" / "demo_users.json")
    (view,) = parse_feast(demo_feast(), NAMES).views
    client = Client.from_url(url)
    try:
        rows: dict[tuple[str, ...], Mapping[str, float | int | bool | str | None]] = {
            (user,): features for user, features in users.items()
        }
        return await seed_feast(client, project, view, rows, event_time_s=event_time_s)
    finally:
        await client.aclose()


def events(users: list[str]) -> list[PaymentEvent]:
    body = {"event_id": "e", "amount": 1.0, "currency": "USD", "merchant_id": "m-1", "merchant_category": "5411",
            "country": "US", "channel": "web", "timestamp": "2026-11-29T03:12:00Z"}  # fmt: skip
    return [msgspec.convert({**body, "user_id": u}, PaymentEvent, strict=False) for u in users]


async def time_reads(store: Any, spec: ModelSpec, all_events: list[PaymentEvent], batch: int, rounds: int,
                     repeat: int) -> float:  # fmt: skip
    """Median seconds per `contexts` call of `batch` distinct events."""
    await store.contexts(spec, all_events[:batch])  # warm: connections open
    medians = []
    for r in range(rounds):
        started = time.perf_counter()
        for i in range(repeat):
            start = (r * repeat + i) * batch % (len(all_events) - batch)
            await store.contexts(spec, all_events[start : start + batch])
        medians.append((time.perf_counter() - started) / repeat)
    return statistics.median(medians)


async def ours(url: str, prefix: str, project: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    users = list(load_feature_file(ROOT / "data" / "demo_users.json"))
    spec, evs = demo_spec(), events(users)
    tier = RedisTier.from_url(url, timeout_s=1.0, prefix=prefix)
    native = FeatureStore(redis=tier, fallback=None, l1_size=0, l1_ttl_s=1.0)
    feast = FeastStore.from_url(url, project=project, timeout_s=1.0, l1_size=0, l1_ttl_s=1.0)
    try:
        (check,) = await feast.contexts(spec, evs[:1])
        (want,) = await native.contexts(spec, evs[:1])
        assert check == want, (check, want)  # the same values through both layouts
        found: dict[str, dict[str, float]] = {"mget": {}, "feast_layout": {}}
        for _ in range(2):  # NOTE: interleaved, so both see the same machine
            for batch in BATCHES:
                found["mget"][str(batch)] = await time_reads(native, spec, evs, batch, args.rounds, args.repeat)
                found["feast_layout"][str(batch)] = await time_reads(feast, spec, evs, batch, args.rounds, args.repeat)
        return found
    finally:
        await feast.aclose()
        await tier.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--feast-repeat", type=int, default=40, help="Feast's own read is slow: fewer calls per round")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-out")
    args = parser.parse_args()
    from tests.feast import harness  # NOTE: the same driver of Feast the parity tests use

    redis = Redis()
    prefix, project = f"bench:{uuid.uuid4().hex[:8]}:", f"b{uuid.uuid4().hex[:10]}"
    try:
        users = load_feature_file(ROOT / "data" / "demo_users.json")
        asyncio.run(seed_redis(redis.url, users, prefix=prefix))
        now = time.time()
        rows = [{"user_id": u, "event_timestamp": now - 60, **f} for u, f in users.items()]
        spec = {
            "redis": harness.feast_connection(redis.url),
            "project": project,
            "rows": {"demo_user": rows},
            "entity_rows": [{"user_id": u} for u in users],
            "features": [f"demo_user:{n}" for n in NAMES],
            "bench": {"rounds": args.rounds, "batches": list(BATCHES), "repeat": args.feast_repeat},
        }
        with tempfile.TemporaryDirectory() as workdir:
            feast_own = harness.run_feast(spec, Path(workdir), timeout_s=600)["bench"]
        found = asyncio.run(ours(redis.url, prefix, project, args))
        found["feast_get_online_features"] = feast_own
    finally:
        asyncio.run(clean(redis.url, prefix, project))
        redis.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "feast.json").write_text(json.dumps(found, indent=2))
    print(table(found))


def table(found: dict[str, dict[str, float]]) -> str:
    lines = ["| read (no L1, 5 features per user) | per batch of 1 | per batch of 8 | per event (batch of 8) |",
             "|---|---|---|---|"]  # fmt: skip
    names = {"mget": "today's layout: one MGET, LZ4-JSON", "feast_layout": "Feast layout: pipelined HMGETs, hand decode",
             "feast_get_online_features": "Feast's own `get_online_features(...).to_dict()`"}  # fmt: skip
    for key, label in names.items():
        one, eight = found[key]["1"] * 1e6, found[key]["8"] * 1e6
        lines.append(f"| {label} | {one:,.0f} µs | {eight:,.0f} µs | {eight / 8:,.1f} µs |")
    feast, own = found["feast_layout"], found["feast_get_online_features"]
    lines.append("")
    lines.append(f"Feast's own read ÷ the Feast layout: {own['1'] / feast['1']:.1f}x (batch of 1), "
                 f"{own['8'] / feast['8']:.1f}x (batch of 8); Feast layout ÷ MGET: "
                 f"{feast['1'] / found['mget']['1']:.2f}x (1), {feast['8'] / found['mget']['8']:.2f}x (8)")  # fmt: skip
    return "\n".join(lines)


async def clean(url: str, prefix: str, project: str) -> None:
    """Delete the keys of a run: under `prefix` (today's layout, predictions) and of Feast `project`."""
    client = Client.from_url(url)
    for pattern in (prefix.encode() + b"*", b"*" + project.encode()):
        keys = [k async for k in client.scan_iter(match=pattern, count=1000)]
        if keys:
            await client.delete(*keys)
    await client.aclose()


if __name__ == "__main__":
    main()
