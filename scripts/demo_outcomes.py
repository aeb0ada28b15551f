"""Demo outcomes: 170 days of payments scored by the demo model, and the outcomes learned since, into the log.

    .venv/bin/python scripts/demo_outcomes.py [--dir .run/predictions] [--days 170] [--per-day 100]
    make outcomes                                   # then: the report over that log

A fresh `make run` has decisions of today only, and a chargeback comes 30-120 days after its payment:
nothing would be mature. So this writes the history a service would have written, with the service's
own parts: each day's payments are scored in-process by the same app `make run` serves (the
committed model, the demo users' features, PREDICTION_LOG=dir into a scratch directory), and each
record the log wrote is moved to the day and hour of its payment (only `at` changes). The outcomes
learned by now go in through the outcome desk (`POST /api/outcomes`, the same process), with the
key `make run` hashes ids with (PREDICTION_LOG_HASH_KEY from the same environment).

What became of each payment (a seeded generator, not the model's view):
    fraud       3% of payments in the pattern the model learned (a young account's large payment, at
                night, on the web, risky country and category): 90% fraud, mostly declined; the rest by the training
                generator's odds (scripts/train_demo_model.py, a lower base rate); and a drifted segment:
                from DRIFT_STARTS days ago, fraudsters move to small grocery payments in the app
                (merchant_category 5411, channel app), a pattern the model never saw: its share of
                traffic grows to 20% and 40% of it is fraud, scored low. Recall falls in the newest
                mature week: the daily report's current week drops below its baseline (the alert fires).
    learned     a chargeback 30-120 days after the payment (most), a customer's report within 10 days
                (a fifth of the fraud); a review confirms or clears within 3 days; a legit payment is
                confirmed when its chargeback window closes (source other: "no chargeback in 120 days")
    not yet     an outcome whose day is still ahead is not sent: recent days await theirs (immature)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from shared.adapters.http.app import create_app  # noqa: E402
from shared.core.holder import ServiceHolder  # noqa: E402
from shared.domain.records import hashed_id  # noqa: E402
from shared.settings import Settings  # noqa: E402

SEED = 57
DRIFT_STARTS = 131  # days ago: in the newest mature week, not in the 28 days before
CLASSIC = 0.03  # share of payments in the pattern the model learned (most of them fraud, most declined)
RISKY_COUNTRIES, RISKY_CATEGORIES = {"NG", "RU", "BR"}, {"7995", "4829", "5967"}
COUNTRIES = ["US", "GB", "DE", "FR", "NG", "BR", "IN", "RU"]
COUNTRY_ODDS = [0.5, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05]
CATEGORIES = ["5411", "5812", "5999", "7995", "4829", "5967"]


def payment(
    rng: random.Random, n: int, at: datetime, users: dict[str, dict[str, float]], drift: float
) -> tuple[dict[str, Any], bool]:
    """One payment at `at` and whether it was fraud; `drift` (0..1): how far the segment has grown."""
    uid = f"u{rng.randrange(len(users)):05d}"
    user = users[uid]
    if rng.random() < CLASSIC:  # the pattern the model learned: a young account's large night-time web payment
        uid = rng.choice([k for k, u in users.items() if u["user_account_age_days"] < 365])
        user = users[uid]
        at = at.replace(hour=rng.randrange(1, 5))
        body = {"amount": round(user["user_avg_amount_30d"] * rng.uniform(15, 40), 2), "channel": "web",
                "merchant_category": rng.choice(sorted(RISKY_CATEGORIES)), "country": rng.choice(sorted(RISKY_COUNTRIES))}  # fmt: skip
        return _event(n, uid, at, body), rng.random() < 0.9
    if rng.random() < 0.2 * drift:  # the drifted segment: small grocery payments in the app
        body = {"amount": round(rng.uniform(5, 40), 2), "merchant_category": "5411", "channel": "app", "country": "US"}
        return _event(n, uid, at, body), rng.random() < 0.4
    amount = round(rng.lognormvariate(math.log(user["user_avg_amount_30d"]), 1.0), 2)
    body = {"amount": amount, "merchant_category": rng.choice(CATEGORIES), "channel": rng.choice(["web", "app", "pos"]),
            "country": rng.choices(COUNTRIES, COUNTRY_ODDS)[0]}  # fmt: skip
    logit = -7.0 + 1.2 * math.log1p(amount / user["user_avg_amount_30d"]) + 0.9 * (body["country"] in RISKY_COUNTRIES)
    logit += 1.0 * (body["merchant_category"] in RISKY_CATEGORIES) + 0.6 * (body["channel"] == "web")
    logit += 0.7 * (at.hour < 5) + 1.5 * user["user_chargebacks_90d"] + 0.25 * user["user_txn_count_24h"]
    logit += -0.0008 * user["user_account_age_days"] + 0.4 * (user["user_distinct_countries_30d"] - 1)
    return _event(n, uid, at, body), rng.random() < 1 / (1 + math.exp(-logit))


def _event(n: int, uid: str, at: datetime, body: dict[str, Any]) -> dict[str, Any]:
    return {"event_id": f"demo-{n}", "user_id": uid, "currency": "USD", "merchant_id": f"m-{n % 97}",
            "timestamp": at.strftime("%Y-%m-%dT%H:%M:%SZ"), **body}  # fmt: skip


def learned(rng: random.Random, at: datetime, fraud: bool, decision: str) -> tuple[str, str, datetime, str | None]:
    """(outcome, source, when learned, source_detail) of one payment."""
    if decision == "review":
        return ("fraud" if fraud else "legit"), "review", at + timedelta(days=rng.uniform(0.1, 3)), None
    if fraud and rng.random() < 0.2:
        return "fraud", "customer", at + timedelta(days=rng.uniform(0.5, 10)), None
    if fraud:
        return "fraud", "chargeback", at + timedelta(days=min(120.0, 30 + rng.gammavariate(2.0, 15.0))), None
    return "legit", "other", at + timedelta(days=120, hours=1), "no chargeback in 120 days"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(os.environ.get("PREDICTION_LOG_DIR", ".run/predictions")))
    parser.add_argument("--days", type=int, default=170, help="days of history, up to yesterday (< 180: retention)")
    parser.add_argument("--per-day", type=int, default=100, help="payments a day")
    args = parser.parse_args(argv)
    started = time.monotonic()
    rng = random.Random(SEED)  # noqa: S311 demo data, not a secret
    users: dict[str, dict[str, float]] = json.loads((REPO / "data" / "demo_users.json").read_text())
    today = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    history: list[tuple[dict[str, Any], bool, datetime]] = []
    for day in range(args.days, 0, -1):
        drift = min(1.0, max(0.0, (DRIFT_STARTS - day) / 5))  # grows over five days, then holds
        for _ in range(args.per_day):
            at = today - timedelta(days=day, hours=rng.randrange(24), minutes=rng.randrange(60))
            event, fraud = payment(rng, len(history), at, users, drift)
            history.append((event, fraud, at))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PREDICTION_LOG")}
    key = os.environ.get("PREDICTION_LOG_HASH_KEY")
    with tempfile.TemporaryDirectory(prefix="demo-outcomes-") as scratch:
        scored = score(history, Settings.from_env({**environ, **_log(scratch, key)}))
        moved = move(
            Path(scratch), args.dir, {hashed_id(e["event_id"], (key or "").encode()): at for e, _, at in history}
        )
    outcomes = []
    for (event, fraud, at), decision in zip(history, scored, strict=True):
        kind, source, when, detail = learned(rng, at, fraud, decision)
        if when <= datetime.now(UTC):  # not yet learned: its day is still ahead
            outcomes.append({"event_id": event["event_id"], "outcome": kind, "source": source, "source_detail": detail,
                             "learned_at": when.isoformat(), "amount_lost": event["amount"] if kind == "fraud" else None})  # fmt: skip
    receipt = send(outcomes, Settings.from_env({**environ, **_log(str(args.dir), key)}))
    print(f"{len(history):,} payments over {args.days} days scored and logged ({moved:,} records under {args.dir}); "
          f"{len(outcomes):,} outcomes learned by now: {receipt['written']:,} written, {receipt['duplicates']:,} "
          f"duplicates, {receipt['refused']:,} refused; {time.monotonic() - started:.1f} s")  # fmt: skip
    return 0


def _log(directory: str, key: str | None) -> dict[str, str]:
    return {
        "PREDICTION_LOG": "dir",
        "PREDICTION_LOG_DIR": directory,
        **({"PREDICTION_LOG_HASH_KEY": key} if key else {}),
    }


def score(history: list[tuple[dict[str, Any], bool, datetime]], settings: Settings) -> list[str]:
    """Each payment's decision, from the app `make run` serves (its log written to `settings`' directory)."""
    decisions: list[str] = []
    with TestClient(create_app(ServiceHolder(lambda: settings))) as client:
        for i in range(0, len(history), settings.max_batch_items):
            batch = [event for event, _, _ in history[i : i + settings.max_batch_items]]
            answer = client.post("/api/score/batch", json={"events": batch})
            answer.raise_for_status()
            decisions += [item.get("decision", "approve") for item in answer.json()["results"]]
    return decisions


def move(scratch: Path, dest: Path, when: dict[str, datetime]) -> int:
    """The records the app wrote, each dated to its payment and filed under that day and hour."""
    files: dict[Path, list[bytes]] = {}
    for path in scratch.glob("model=*/version=*/date=*/hour=*/*.jsonl"):
        model, version = path.parts[-5], path.parts[-4]
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            at = when[record["event"]]
            record["at"] = at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
            target = (
                dest / model / version / f"date={at:%Y-%m-%d}" / f"hour={at:%H}" / f"demo-history-{os.getpid()}.jsonl"
            )
            files.setdefault(target, []).append(orjson.dumps(record))
    for target, lines in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("ab") as out:
            out.write(b"\n".join(lines) + b"\n")
    return sum(len(lines) for lines in files.values())


def send(outcomes: list[dict[str, Any]], settings: Settings) -> dict[str, int]:
    """The outcomes through `POST /api/outcomes` of an app logging to the demo's directory."""
    totals = {"written": 0, "duplicates": 0, "refused": 0}
    with TestClient(create_app(ServiceHolder(lambda: settings))) as client:
        for i in range(0, len(outcomes), settings.max_batch_items):
            answer = client.post("/api/outcomes", json={"outcomes": outcomes[i : i + settings.max_batch_items]})
            answer.raise_for_status()
            for k in totals:
                totals[k] += answer.json()[k]
    return totals


if __name__ == "__main__":
    sys.exit(main())
