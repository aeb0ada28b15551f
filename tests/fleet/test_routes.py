"""Where each event goes on a replica: the sticky split by user, shadows, the automatic abort, versions held loaded.

Replicas share nothing but Redis and a model source (tests/fleet/replicas.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from shared.fleet.routes import bucket
from tests.fleet.replicas import REPO, USERS, Replicas, drive, pinned_pair, publish, until

# -- the split --------------------------------------------------------------------------------


@pytest.mark.parametrize("weight", [0.01, 0.1, 0.5, 0.9])
def test_a_split_takes_close_to_its_weight_of_many_users(weight: float) -> None:
    # NOTE: an ideal hash makes the canary's count Binomial(n, weight); 5 standard deviations
    # (0.7 points of 20,000 users at 0.1) fail a fair hash about once in 3.5 million runs.
    # The hash is deterministic, so this run is the same every time: a bias would show here.
    share = sum(bucket("fraud", u) < weight for u in USERS) / len(USERS)
    assert abs(share - weight) <= 5 * math.sqrt(weight * (1 - weight) / len(USERS))


def test_a_users_bucket_is_the_same_in_another_process() -> None:
    """Not Python's `hash()`, which each process salts (PYTHONHASHSEED): a replica is a process."""
    code = "import json; from shared.fleet.routes import bucket; print(json.dumps([bucket('fraud', f'user-{i}') for i in range(100)]))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [bucket("fraud", f"user-{i}") for i in range(100)]
    assert bucket("fraud", "user-1") != bucket("other", "user-1")  # each model splits its users anew


async def test_a_canary_takes_its_weight_of_users_on_a_replica(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.1)
    routed = [a.traffic.canary_for("fraud", u) for u in USERS]
    share = sum(m is not None for m in routed) / len(USERS)
    assert abs(share - 0.1) <= 5 * math.sqrt(0.1 * 0.9 / len(USERS))
    assert {m.version for m in routed if m is not None} == {"2"}


async def test_a_user_keeps_their_arm_on_every_replica_and_after_a_restart(
    replicas: Replicas, models_dir: Path
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    publish(models_dir, "3")
    await a.traffic.set_canary("fraud", "2", 0.2)
    await a.traffic.set_shadow("fraud", "3")
    await until(lambda: b.traffic.split("fraud"))
    chosen = a.canary_users()
    assert 300 < len(chosen) < 500 and b.canary_users() == chosen
    await b.aclose()
    rebuilt = await replicas()
    assert rebuilt.live() == "1" and rebuilt.canary_users() == chosen  # restored before any tick
    shadow = rebuilt.traffic.shadow_of("fraud")
    assert shadow is not None and shadow.version == "3"


async def test_raising_the_weight_keeps_earlier_canary_users_in_the_canary(
    replicas: Replicas, models_dir: Path
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.1)
    first = a.canary_users()
    await a.traffic.set_canary("fraud", "2", 0.3)
    raised = a.canary_users()
    assert first < raised and len(raised) > 2.5 * len(first)
    await until(lambda: b.canary_users() == raised)


async def test_without_a_split_nothing_is_routed_and_nothing_observed(replicas: Replicas) -> None:
    a = await replicas()
    assert a.traffic.canary_for("fraud", "u1") is None and a.traffic.shadow_of("fraud") is None
    a.traffic.observe("fraud", "live", "decline")
    assert not a.traffic.split("fraud") and a.traffic.describe("fraud") == (None, None, None)


# -- the automatic abort ----------------------------------------------------------------------


async def test_a_candidate_declining_20_points_more_is_aborted_on_every_replica(
    replicas: Replicas, models_dir: Path
) -> None:
    a, b = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    await until(lambda: b.traffic.split("fraud"))
    drive(a.traffic, "live", 1000, declines_per_100=10)
    drive(a.traffic, "canary", 199, declines_per_100=30)
    assert a.traffic.split("fraud")  # not yet: the candidate has 199 decisions
    drive(a.traffic, "canary", 1, declines_per_100=30)
    assert not a.traffic.split("fraud") and not a.canary_users()  # at once, here
    await until(lambda: not b.traffic.split("fraud"))  # and everywhere within a tick
    abort = b.traffic.describe("fraud")[2]
    assert abort is not None and (abort.version, abort.reason) == ("2", "decline_share")


async def test_a_candidate_declining_far_fewer_is_aborted_too(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "live", 1000, declines_per_100=30)
    drive(a.traffic, "canary", 200, declines_per_100=10)  # a candidate that lets fraud through
    abort = a.traffic.describe("fraud")[2]
    assert not a.traffic.split("fraud") and abort is not None and abort.reason == "decline_share"


async def test_a_candidate_that_errs_more_is_aborted_for_its_error_rate(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "live", 1000, declines_per_100=10)
    drive(a.traffic, "canary", 1000, declines_per_100=10, errors_per_100=3)
    assert not a.traffic.split("fraud")
    abort = a.traffic.describe("fraud")[2]
    assert abort is not None and abort.reason == "error_rate"


async def test_a_candidate_within_the_bound_is_not_aborted(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "live", 3000, declines_per_100=10)
    drive(a.traffic, "canary", 3000, declines_per_100=14)  # 4 points more: within 5
    drive(a.traffic, "canary", 3000, declines_per_100=6)  # 4 points fewer: within 5
    assert a.traffic.split("fraud")
    _, canary, abort = a.traffic.describe("fraud")
    assert abort is None and canary is not None
    assert canary.canary.events == 1000 and canary.canary.decline_share == pytest.approx(0.06, abs=0.005)


async def test_too_few_events_never_abort(replicas: Replicas, models_dir: Path) -> None:
    a, _ = await pinned_pair(replicas, models_dir)
    await a.traffic.set_canary("fraud", "2", 0.5)
    drive(a.traffic, "canary", 199, declines_per_100=100)
    drive(a.traffic, "live", 5000, declines_per_100=0)
    assert a.traffic.split("fraud") and a.traffic.describe("fraud")[2] is None


# -- holding versions -------------------------------------------------------------------------


async def test_shadow_and_canary_versions_stay_loaded_beyond_keep_while_named(
    replicas: Replicas, models_dir: Path
) -> None:
    publish(models_dir, "2", "3")
    a, b = await replicas(keep=1), await replicas(keep=1)
    assert a.registry.loaded_versions("fraud") == ["3"]
    await a.traffic.set_shadow("fraud", "2")
    await a.traffic.set_canary("fraud", "1", 0.1)  # an older version: no pin needed
    assert a.registry.loaded_versions("fraud") == ["1", "2", "3"] and a.live() == "3"
    await until(lambda: b.registry.loaded_versions("fraud") == ["1", "2", "3"] and b.traffic.split("fraud"))
    assert b.live() == "3"
    await a.traffic.set_shadow("fraud", None)
    assert a.registry.loaded_versions("fraud") == ["1", "3"]
    await a.traffic.abort("fraud")
    assert a.registry.loaded_versions("fraud") == ["3"]
    await until(lambda: b.registry.loaded_versions("fraud") == ["3"])
