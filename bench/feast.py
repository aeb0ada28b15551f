"""The user-feature read, three ways, in one run: today's MGET layout, Feast's layout, Feast's own read.

    .venv/bin/python -m bench.feast [--rounds 5] [--repeat 300] [--feast-repeat 60] [--seconds 1]

The demo users (data/demo_users.json, 2,000 users, five features) are written twice into one Redis
(REDIS_URL, or a redis-server of our own): as `user:{id}` LZ4-JSON values (`seed_redis`), and by Feast
itself (`feast apply` + `materialize` in .venv-feast, tests/feast/feast_child.py) into its layout.
Feast's own reader stays up in its process (tests/feast/harness.py `FeastProcess`), so each round
interleaves every reader, ours and Feast's, at a batch of 1 and of 8 distinct users (no L1):
  - one call after another: `FeatureStore.contexts` (MGET layout), `FeastStore.contexts` (Feast
    layout), Feast's `get_online_features(...).to_dict()`: wall per call, CPU per lookup (the
    reader's own process, `time.process_time`; Redis's CPU is not counted on either side);
  - at saturation, what a service pays per lookup: ours with CALLERS concurrent `contexts` callers
    on one event loop (the service's micro-batches in flight at once); Feast's documented online
    pattern, one `get_online_features` per request, from one thread and from a pool of THREADS:
    lookups per wall second and per CPU second of the reader's process.
Medians over rounds; our advantage (x in our favour, the target ≥ 20x) as the median of per-round
ratios. A markdown table on stdout, JSON in --out/feast.json.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import onnx
from redis.asyncio import Redis as Client

from bench.loadgen import now_stamp
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
CALLERS = 16  # our concurrent readers at saturation
THREADS = 4  # Feast's pool at saturation, so being sync does not handicap it
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
            "country": "US", "channel": "web", "timestamp": now_stamp()}  # fmt: skip
    return [msgspec.convert({**body, "user_id": u}, PaymentEvent, strict=False) for u in users]


@dataclass(frozen=True, slots=True)
class Sample:
    """One measurement: the lookups (entities) read, the wall and the CPU seconds the reader spent."""

    lookups: int
    wall_s: float
    cpu_s: float

    @classmethod
    def of(cls, found: Mapping[str, float]) -> Sample:
        return cls(int(found["lookups"]), found["wall_s"], found["cpu_s"])


async def reads(store: Any, spec: ModelSpec, all_events: list[PaymentEvent], batch: int, repeat: int,
                offset: int) -> Sample:  # fmt: skip
    """`repeat` `contexts` calls of `batch` distinct events, one after another."""
    await store.contexts(spec, all_events[:batch])  # warm: connections open
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(repeat):
        start = (offset + i) * batch % (len(all_events) - batch)
        await store.contexts(spec, all_events[start : start + batch])
    return Sample(repeat * batch, time.perf_counter() - wall, time.process_time() - cpu)


async def saturate(store: Any, spec: ModelSpec, all_events: list[PaymentEvent], batch: int, callers: int,
                   seconds: float) -> Sample:  # fmt: skip
    """`callers` concurrent readers on this one loop, each calling `contexts` for `batch` events in a
    loop for `seconds`: the reads a service has in flight at once (its micro-batches, its models)."""
    deadline = time.perf_counter() + seconds
    done = [0]

    async def caller(first: int) -> None:
        i = first
        while time.perf_counter() < deadline:
            start = i * batch % (len(all_events) - batch)
            await store.contexts(spec, all_events[start : start + batch])
            i, done[0] = i + callers, done[0] + batch

    await store.contexts(spec, all_events[:batch])
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(callers)))
    return Sample(done[0], time.perf_counter() - wall, time.process_time() - cpu)


Round = dict[str, Sample]  # "{reader}/{batch}" -> its sample


async def measure(url: str, prefix: str, project: str, feast: Any, args: argparse.Namespace) -> list[Round]:
    """`args.rounds` rounds; in each, every reader at each batch size, ours and Feast's interleaved."""
    users = list(load_feature_file(ROOT / "data" / "demo_users.json"))
    spec, evs = demo_spec(), events(users)
    tier = RedisTier.from_url(url, timeout_s=1.0, prefix=prefix)
    native = FeatureStore(redis=tier, fallback=None, l1_size=0, l1_ttl_s=1.0)
    ours = FeastStore.from_url(url, project=project, timeout_s=1.0, l1_size=0, l1_ttl_s=1.0)
    try:
        (check,) = await ours.contexts(spec, evs[:1])
        (want,) = await native.contexts(spec, evs[:1])
        assert check == want, (check, want)  # the same values through both layouts
        rounds: list[Round] = []
        for r in range(args.rounds):
            found: Round = {}
            for batch in BATCHES:  # NOTE: interleaved, so every reader sees the same machine
                offset = r * args.repeat
                found[f"mget/{batch}"] = await reads(native, spec, evs, batch, args.repeat, offset)
                found[f"feast_layout/{batch}"] = await reads(ours, spec, evs, batch, args.repeat, offset)
                # NOTE: Feast's calls block this loop while they run: nothing of ours is in flight then
                found[f"feast_get_online_features/{batch}"] = Sample.of(
                    feast.measure(batch=batch, calls=args.feast_repeat, offset=r * args.feast_repeat)
                )
                found[f"feast_layout_x{CALLERS}/{batch}"] = await saturate(
                    ours, spec, evs, batch, CALLERS, args.seconds
                )
                found[f"feast_sync/{batch}"] = Sample.of(feast.measure(batch=batch, seconds=args.seconds))
                found[f"feast_pool{THREADS}/{batch}"] = Sample.of(
                    feast.measure(batch=batch, seconds=args.seconds, threads=THREADS)
                )
            rounds.append(found)
        return rounds
    finally:
        await ours.aclose()
        await tier.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=300, help="our reads per round and batch size")
    parser.add_argument("--feast-repeat", type=int, default=60, help="Feast's own read is slow: fewer calls per round")
    parser.add_argument("--seconds", type=float, default=1.0, help="each saturation run, per round and batch size")
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
        }
        with tempfile.TemporaryDirectory() as workdir:
            feast = harness.FeastProcess(spec, Path(workdir))
            try:
                rounds = asyncio.run(measure(redis.url, prefix, project, feast, args))
            finally:
                feast.close()
    finally:
        asyncio.run(clean(redis.url, prefix, project))
        redis.stop()
    found = summary(rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "feast.json").write_text(json.dumps(found, indent=2))
    print(table(found))


def summary(rounds: list[Round]) -> dict[str, Any]:
    """Medians over rounds: per reader and batch, wall µs per call, CPU µs per lookup, lookups per
    wall and per CPU second; and our advantage (x in our favour), the median of per-round ratios:
    Feast's CPU per lookup ÷ ours, our lookups/s ÷ Feast's (sync, and a pool of THREADS)."""
    figures: dict[str, dict[str, float]] = {}
    for name in rounds[0]:
        samples = [r[name] for r in rounds]
        calls = samples[0].lookups // int(name.split("/")[1])
        figures[name] = {
            "wall_us_per_call": statistics.median(s.wall_s / calls * 1e6 for s in samples),
            "cpu_us_per_lookup": statistics.median(s.cpu_s / s.lookups * 1e6 for s in samples),
            "lookups_per_s": statistics.median(s.lookups / s.wall_s for s in samples),
            "lookups_per_cpu_s": statistics.median(s.lookups / s.cpu_s for s in samples),
        }
    advantage: dict[str, dict[str, float]] = {}
    for batch in map(str, BATCHES):

        def ratio(num: str, den: str, key: Callable[[Sample], float], batch: str = batch) -> float:
            return statistics.median(key(r[f"{num}/{batch}"]) / key(r[f"{den}/{batch}"]) for r in rounds)

        per_lookup = lambda s: s.cpu_s / s.lookups  # noqa: E731
        rate = lambda s: s.lookups / s.wall_s  # noqa: E731
        per_cpu = lambda s: s.lookups / s.cpu_s  # noqa: E731
        ours = f"feast_layout_x{CALLERS}"
        advantage[batch] = {
            "cpu_per_lookup": ratio("feast_get_online_features", "feast_layout", per_lookup),
            "wall_per_call": ratio("feast_get_online_features", "feast_layout", lambda s: s.wall_s / s.lookups),
            "saturated_vs_sync": ratio(ours, "feast_sync", rate),
            f"saturated_vs_pool{THREADS}": ratio(ours, f"feast_pool{THREADS}", rate),
            "saturated_per_cpu_s_vs_sync": ratio(ours, "feast_sync", per_cpu),
            f"saturated_per_cpu_s_vs_pool{THREADS}": ratio(ours, f"feast_pool{THREADS}", per_cpu),
        }
    return {"rounds": len(rounds), "figures": figures, "advantage": advantage}


def table(found: dict[str, Any]) -> str:
    f, adv = found["figures"], found["advantage"]
    lines = [f"Medians of {found['rounds']} interleaved rounds; no L1, 5 features per user.", "",
             "| read, one after another | wall per call (1 / 8) | CPU per lookup (1 / 8) |", "|---|---|---|"]  # fmt: skip
    names = {"mget": "today's layout: one MGET, LZ4-JSON", "feast_layout": "Feast layout: pipelined HMGETs, hand decode",
             "feast_get_online_features": "Feast's own `get_online_features(...).to_dict()`"}  # fmt: skip
    for key, label in names.items():
        one, eight = f[f"{key}/1"], f[f"{key}/8"]
        lines.append(f"| {label} | {one['wall_us_per_call']:,.0f} / {eight['wall_us_per_call']:,.0f} µs | "
                     f"{one['cpu_us_per_lookup']:,.1f} / {eight['cpu_us_per_lookup']:,.1f} µs |")  # fmt: skip
    lines += [
        "",
        "| at saturation, one process | lookups/s (1 / 8) | lookups per CPU-second (1 / 8) |",
        "|---|---|---|",
    ]
    sat = {f"feast_layout_x{CALLERS}": f"ours: {CALLERS} concurrent `contexts` callers, one event loop",
           "feast_sync": "Feast's own: `get_online_features` per request, one thread",
           f"feast_pool{THREADS}": f"Feast's own: the same from a pool of {THREADS} threads"}  # fmt: skip
    for key, label in sat.items():
        one, eight = f[f"{key}/1"], f[f"{key}/8"]
        lines.append(f"| {label} | {one['lookups_per_s']:,.0f} / {eight['lookups_per_s']:,.0f} | "
                     f"{one['lookups_per_cpu_s']:,.0f} / {eight['lookups_per_cpu_s']:,.0f} |")  # fmt: skip
    lines += ["", "| ours ÷ Feast's (x in our favour; target ≥ 20x) | batch of 1 | batch of 8 |", "|---|---|---|"]
    rows = {"cpu_per_lookup": "CPU per lookup, one after another (Feast's µs ÷ ours)",
            "wall_per_call": "wall per call, one after another (Feast's ÷ ours)",
            "saturated_vs_sync": "lookups/s at saturation, vs Feast sync",
            f"saturated_vs_pool{THREADS}": f"lookups/s at saturation, vs Feast's pool of {THREADS}",
            "saturated_per_cpu_s_vs_sync": "lookups per CPU-second at saturation, vs Feast sync",
            f"saturated_per_cpu_s_vs_pool{THREADS}": f"lookups per CPU-second at saturation, vs Feast's pool of {THREADS}"}  # fmt: skip
    for key, label in rows.items():
        lines.append(f"| {label} | {adv['1'][key]:.1f}x | {adv['8'][key]:.1f}x |")
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
