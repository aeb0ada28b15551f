"""An event's answer: its timings, rounded as built."""

from __future__ import annotations

import random

from shared.core.answer import Scoring, timings
from shared.models.served import Prediction


def test_stage_timings_are_milliseconds_rounded_to_three_places() -> None:
    rng = random.Random(3)  # noqa: S311 reproducible durations, not a secret
    for _ in range(20_000):
        parse, features, total, queued, cache, run = (
            rng.random() * rng.choice((1e-5, 1e-3, 0.1, 2.0)) for _ in range(6)
        )
        spent = Scoring(0.0, parse, features_s=features, total_s=total, queued_s=queued)
        timed = timings(Prediction(0.5, "model", cache, run), spent)
        assert timed == {
            "parse": round(parse * 1000, 3),
            "features": round(features * 1000, 3),
            "cache": round(cache * 1000, 3),
            "queue": round(queued * 1000, 3),
            "inference": round(run * 1000, 3),
            "total": round((total + parse) * 1000, 3),
        }
