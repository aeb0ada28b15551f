"""Train a candidate fraud model from the demo data: a different model to roll out beside the demo one.

    .venv/bin/python scripts/train_candidate.py                          # writes .run/candidate/model.onnx
    .venv/bin/python scripts/train_candidate.py --seed 7 --drop-feature user_txn_count_24h --out cand.onnx

The same synthetic payments as scripts/train_demo_model.py (the same demo users, so
data/demo_users.json still serves it), but another draw of events (`--seed`), row subsampling
and, optionally, a user feature left out (`--drop-feature`: its column keeps its place in the
model's input and its default, and the trees never split on it). The ONNX file carries the
same serving metadata, so `make publish-model` accepts it as a new version of `fraud`; its
scores differ from version 1's, which is what a shadow and a canary are there to show
(docs/rollouts.md, the recipe). Nothing in models/ or data/ is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from sklearn.ensemble import GradientBoostingClassifier
from sklearn.metrics import roc_auc_score

from scripts.train_demo_model import SEED, USER_FEATURES, build_spec, export, feature_names, make_events, make_users


def train(seed: int, events: int, drop: str | None) -> tuple[onnx.ModelProto, float]:
    """The candidate and its held-out AUC: the demo users, `seed`'s events, `drop` held at its default."""
    users = make_users(np.random.default_rng(SEED), 2_000)  # NOTE: the demo users, as data/demo_users.json has them
    x, y = make_events(np.random.default_rng(seed), users, events)
    if drop is not None:
        x[:, feature_names().index(drop)] = USER_FEATURES[drop]  # NOTE: a constant column: no tree splits on it
    split = int(len(x) * 0.8)
    clf = GradientBoostingClassifier(n_estimators=80, max_depth=3, subsample=0.8, random_state=seed)
    clf.fit(x[:split], y[:split])
    auc = float(roc_auc_score(y[split:], clf.predict_proba(x[split:])[:, 1]))
    return export(
        clf, x, build_spec(), f"candidate fraud model: seed {seed}" + (f", without {drop}" if drop else "")
    ), auc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--seed", type=int, default=7, help=f"the draw of training events and trees (the demo model's: {SEED})"
    )
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--drop-feature", choices=sorted(USER_FEATURES), default=None)
    parser.add_argument("--out", type=Path, default=Path(".run/candidate/model.onnx"))
    args = parser.parse_args()
    if args.seed == SEED and args.drop_feature is None:
        parser.error(f"--seed {SEED} without --drop-feature retrains the demo model's data; choose another seed")
    model, auc = train(args.seed, args.events, args.drop_feature)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(model.SerializeToString())
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, held-out AUC {auc:.3f}, seed {args.seed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
