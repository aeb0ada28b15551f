"""The core's counters and readiness as the telemetry reads them: its answers, as the types they are."""

from __future__ import annotations

import json

from shared.core.service import ScoringService
from shared.domain.answers import Readiness
from shared.domain.events import decode_event
from tests.conftest import event
from tests.telemetry.conftest import Observed, points, total


def degraded(observed: Observed) -> dict[str, float]:
    return {a["scoring.component"]: p.value for a, p in points(observed.reader, "scoring.degraded")}


async def test_a_component_readiness_lists_as_degraded_is_one_and_every_other_zero(
    service: ScoringService, observed: Observed
) -> None:
    observed.telemetry.watch(service)
    assert set(degraded(observed).values()) == {0}
    service.report("queue", "the publisher is down")
    listed = degraded(observed)
    assert listed.pop("queue") == 1
    assert set(listed.values()) == {0} and {"redis", "models", "platform"} <= set(listed)
    service.report("queue", None)
    assert degraded(observed)["queue"] == 0


def test_readiness_lists_a_component_by_its_reasons_prefix_only() -> None:
    readiness = Readiness.serving(["fraud"], ["redis: unreachable for 3 s", "queue: the publisher is down"])
    assert readiness.lists("redis") and readiness.lists("queue")
    assert not readiness.lists("models") and not readiness.lists("red")  # a component, not any prefix


async def test_events_and_cache_lookups_are_read_from_the_stats(service: ScoringService, observed: Observed) -> None:
    observed.telemetry.watch(service)
    await service.score(decode_event(json.dumps(event(event_id="t-setup-1")).encode()))
    await service.score(
        decode_event(json.dumps(event(event_id="t-setup-1")).encode())
    )  # the same event again: a prediction cache hit
    assert total(observed.reader, "scoring.events", **{"scoring.defaulted": "false"}) >= 1
    lookups = {
        (a["scoring.cache"], a["scoring.cache.tier"]): p.value
        for a, p in points(observed.reader, "scoring.cache.lookups")
    }
    assert set(lookups) == {(c, t) for c in ("predictions", "features") for t in ("l1", "l2", "miss")}
    assert lookups["predictions", "l1"] == service.stats().predictions.l1_hits >= 1
    assert total(observed.reader, "scoring.features.defaulted.ratio") == service.stats().events.recent_defaulted_share
