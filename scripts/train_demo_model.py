"""Train the demo fraud model on synthetic payments and export it as ONNX.

    .venv/bin/python scripts/train_demo_model.py            # writes models/fraud/1/model.onnx
    .venv/bin/python scripts/train_demo_model.py --version 2
    (a different candidate from the same data: scripts/train_candidate.py)

Reproducible (fixed seed). The ONNX file carries its serving metadata
(`shared.domain.spec`): feature order and defaults, score output, thresholds.
The same generator writes `data/demo_users.json`, the demo user features.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
from skl2onnx import to_onnx
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.metrics import roc_auc_score

from shared.domain.spec import FeatureDef, ModelSpec, Thresholds

SEED = 20261129
COUNTRIES = ["US", "GB", "DE", "FR", "NG", "BR", "IN", "RU"]
RISKY_COUNTRIES = {"NG", "RU", "BR"}
CATEGORIES = ["5411", "5812", "5999", "7995", "4829", "5967"]
RISKY_CATEGORIES = {"7995", "4829", "5967"}
CHANNELS = ["web", "app", "pos"]
CURRENCIES = ["USD", "EUR", "GBP"]

USER_FEATURES = {  # name: default for an unknown user (a cautious, new-ish account)
    "user_avg_amount_30d": 60.0,
    "user_txn_count_24h": 1.0,
    "user_account_age_days": 30.0,
    "user_chargebacks_90d": 0.0,
    "user_distinct_countries_30d": 1.0,
}


def make_users(rng: np.random.Generator, n: int) -> dict[str, dict[str, float]]:
    users = {}
    for i in range(n):
        users[f"u{i:05d}"] = {
            "user_avg_amount_30d": round(float(rng.lognormal(4.0, 0.8)), 2),
            "user_txn_count_24h": float(rng.poisson(2.0)),
            "user_account_age_days": float(rng.integers(1, 3650)),
            "user_chargebacks_90d": float(rng.poisson(0.05)),
            "user_distinct_countries_30d": float(1 + rng.poisson(0.3)),
        }
    return users


def feature_names() -> list[str]:
    names = ["log_amount", "hour", "has_note"]
    names += [f"channel={c}" for c in CHANNELS]
    names += [f"country={c}" for c in COUNTRIES]
    names += [f"merchant_category={m}" for m in CATEGORIES]
    names += list(USER_FEATURES)
    return names


def make_events(rng: np.random.Generator, users: dict[str, dict[str, float]], n: int) -> tuple[np.ndarray, np.ndarray]:
    names = feature_names()
    col = {name: i for i, name in enumerate(names)}
    x = np.zeros((n, len(names)), dtype=np.float32)
    user_list = list(users.values())
    logit = np.full(n, -4.0)
    for r in range(n):
        user = user_list[rng.integers(len(user_list))]
        amount = float(rng.lognormal(np.log(user["user_avg_amount_30d"]), 1.0))
        hour = int(rng.integers(24))
        channel, country, category = (
            rng.choice(CHANNELS),
            rng.choice(COUNTRIES, p=[0.5, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.05]),
            rng.choice(CATEGORIES),
        )
        x[r, col["log_amount"]] = np.log1p(amount)
        x[r, col["hour"]] = hour
        x[r, col["has_note"]] = float(rng.random() < 0.2)
        x[r, col[f"channel={channel}"]] = 1
        x[r, col[f"country={country}"]] = 1
        x[r, col[f"merchant_category={category}"]] = 1
        for name, value in user.items():
            x[r, col[name]] = value
        ratio = amount / user["user_avg_amount_30d"]
        logit[r] += 1.2 * np.log1p(ratio) + 0.9 * (country in RISKY_COUNTRIES) + 1.0 * (category in RISKY_CATEGORIES)
        logit[r] += 0.6 * (channel == "web") + 0.7 * (hour < 5) + 1.5 * user["user_chargebacks_90d"]
        logit[r] += (
            0.25 * user["user_txn_count_24h"]
            - 0.0008 * user["user_account_age_days"]
            + 0.4 * (user["user_distinct_countries_30d"] - 1)
        )
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    return x, y


def build_spec() -> ModelSpec:
    defaults = dict(USER_FEATURES)
    features = tuple(FeatureDef(name, defaults.get(name, 0.0)) for name in feature_names())
    return ModelSpec(
        features=features,
        input_name="features",
        score_output="probabilities",
        score_column=1,
        thresholds=Thresholds(review=0.5, decline=0.85),
        description="demo fraud model: gradient-boosted trees on synthetic payments",
    )


def export(
    clf: GradientBoostingClassifier, x: np.ndarray, spec: ModelSpec, description: str | None = None
) -> onnx.ModelProto:
    """The fitted trees as ONNX: input `features` [batch, columns], the serving metadata of `spec`."""
    if description is not None:
        spec = replace(spec, description=description)
    onx = to_onnx(clf, x[:1], options={id(clf): {"zipmap": False}}, target_opset=17, initial_types=None)
    onx.graph.input[0].name = "features"
    for node in onx.graph.node:
        node.input[:] = ["features" if name == "X" else name for name in node.input]
    onx.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onx.graph.input[0].type.tensor_type.shape.dim[0].ClearField("dim_value")
    for key, value in spec.to_metadata().items():
        onnx.helper.set_model_props(onx, {**{p.key: p.value for p in onx.metadata_props}, key: value})
    onnx.checker.check_model(onx)
    return onx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default="1")
    parser.add_argument("--models-dir", default="models")
    parser.add_argument("--users-file", default="data/demo_users.json")
    parser.add_argument("--events", type=int, default=30_000)
    args = parser.parse_args()

    rng = np.random.default_rng(SEED)
    users = make_users(rng, 2_000)
    x, y = make_events(rng, users, args.events)
    split = int(len(x) * 0.8)
    clf = GradientBoostingClassifier(n_estimators=60, max_depth=3, random_state=SEED).fit(x[:split], y[:split])
    auc = roc_auc_score(y[split:], clf.predict_proba(x[split:])[:, 1])

    spec = build_spec()
    onx = export(clf, x, spec)

    out = Path(args.models_dir) / "fraud" / args.version / "model.onnx"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(onx.SerializeToString())
    Path(args.users_file).parent.mkdir(parents=True, exist_ok=True)
    Path(args.users_file).write_text(json.dumps(users, indent=0, sort_keys=True) + "\n")
    print(
        f"wrote {out} ({out.stat().st_size} bytes, {len(spec.features)} features, held-out AUC {auc:.3f}, positives {y.mean():.1%})"
    )
    print(f"wrote {args.users_file} ({len(users)} users)")


if __name__ == "__main__":
    main()
