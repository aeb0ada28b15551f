"""The sale profile: what `make capacity` computes is what infra/ deploys, and it holds the sale.

main.bicep's `var profiles` holds each profile's replica bounds, thresholds and sale window; `make
capacity` (bench.flashsale capacity --profile sale) computes the sale profile from the measured
service times (bench/flashsale/measured.json). These tests rerun that computation and fail when the
file drifts from it (a value edited by hand, or figures re-measured without `--write`), then run the
seed's scenarios on the profile as azd deploys it (the rules read from infra/, not typed in).
"""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.flashsale import capacity
from bench.flashsale.__main__ import write_profile
from bench.flashsale.arrivals import ramp, steady, step
from bench.flashsale.fleet import PATHS, simulate
from bench.flashsale.infra import read_profiles, read_scale_rules
from bench.flashsale.inputs import PROVISIONAL, load_measured, service_times

REPO = Path(__file__).resolve().parents[2]
PEAK, BURST = 10_000.0, 3.0


@pytest.fixture(scope="module")
def times():  # type: ignore[no-untyped-def]
    return service_times(load_measured())


@pytest.fixture(scope="module")
def computed(times) -> capacity.Profile:  # type: ignore[no-untyped-def]
    return capacity.size_profile(PEAK, BURST, read_scale_rules(profile="sale"), times, PROVISIONAL)


def target(path: str) -> float:
    return capacity.QUEUE_P99_MS if path == "servicebus" else 50.0


def refused(path: str) -> float:
    return 1.0 if path == "servicebus" else 0.001


def test_the_sale_profile_in_main_bicep_is_what_make_capacity_computes(computed: capacity.Profile) -> None:
    assert read_profiles()["sale"] == asdict(computed), "rerun `make capacity CAPACITY_ARGS='--profile sale --write'`"


def test_a_profile_edited_away_from_the_computation_is_caught(computed: capacity.Profile, tmp_path: Path) -> None:
    shutil.copytree(REPO / "infra", tmp_path / "infra")
    for field in ("minReplicas", "queueMessagesPerReplica", "saleReplicas"):
        drifted = capacity.Profile(**{**asdict(computed), field: asdict(computed)[field] + 1})
        write_profile("sale", drifted, tmp_path)
        assert read_profiles(tmp_path)["sale"] != asdict(computed), field
        assert read_profiles(tmp_path)["dev"] == read_profiles()["dev"]  # NOTE: one profile rewritten, not both


@pytest.mark.parametrize("path", PATHS)
def test_the_sale_profile_holds_the_step_every_minute_with_its_window(times, path: str) -> None:  # type: ignore[no-untyped-def]
    rules = read_scale_rules(profile="sale")
    run = simulate(step(PEAK, BURST), path, rules, times, PROVISIONAL, fleet="scheduled")
    assert run.holds(target(path), refused(path)), [(m.minute, m.p99_ms, m.refused_share) for m in run.minutes]
    # the window is what holds it: the same rules reacting alone do not (events many a call, batches of
    # 64 and a stream's messages of 16, cost so little that the floor alone carries the burst)
    alone = simulate(step(PEAK, BURST), path, rules, times, PROVISIONAL, fleet="reactive")
    assert alone.holds(target(path), refused(path)) == (path in ("http-batch", "grpc-stream"))


@pytest.mark.parametrize("path", PATHS)
def test_the_sale_profile_holds_steady_peak_and_the_ramp_by_reacting(times, path: str) -> None:  # type: ignore[no-untyped-def]
    rules = read_scale_rules(profile="sale")
    for scenario in (steady(PEAK), ramp(PEAK, BURST)):
        run = simulate(scenario, path, rules, times, PROVISIONAL, fleet="reactive")
        assert run.holds(target(path), refused(path)), (scenario.name, run.worst())


def test_the_queue_rule_does_not_oscillate_in_an_hour_of_steady_peak(times) -> None:  # type: ignore[no-untyped-def]
    rules = read_scale_rules(profile="sale")
    run = simulate(steady(PEAK, minutes=60), "servicebus", rules, times, PROVISIONAL, fleet="reactive")
    assert run.cycles() == 0, run.target[::60]
    # the mutation: a threshold above what a drained replica holds (the old 100 > a batch of 64)
    # asks for fewer replicas than the load needs once the backlog drains, and the fleet cycles
    old = simulate(
        steady(PEAK, minutes=60), "servicebus", rules.with_(queue_messages_per_replica=100, min_replicas=2),
        times, PROVISIONAL, fleet="reactive",
    )  # fmt: skip
    assert old.cycles() >= 2


def test_the_dev_profile_stays_cheap() -> None:
    dev, sale = read_scale_rules(profile="dev"), read_scale_rules(profile="sale")
    assert dev.min_replicas == 2 and dev.min_replicas <= sale.min_replicas
    # the same thresholds as production: the dev fleet scales as the sale one does, on fewer replicas
    assert (dev.http_concurrent_requests, dev.queue_messages_per_replica) == (
        sale.http_concurrent_requests, sale.queue_messages_per_replica,
    )  # fmt: skip
    assert read_scale_rules().profile == "dev"  # NOTE: what azd deploys when SCORING_PROFILE is not set


def deploy_table(text: str) -> dict[str, dict[str, int]]:
    """docs/deploy.md's profile table: the figures each profile row states."""
    lines = text.split("<!-- profiles: checked against infra/main.bicep by tests/bench/test_profiles.py -->\n", 1)[1]
    head, _, *rows = lines.splitlines()
    names = [c.strip() for c in head.strip("|").split("|")][1:]
    table: dict[str, dict[str, int]] = {}
    for row in rows:
        if not row.startswith("|"):
            break
        cells = [c.strip() for c in row.strip("|").split("|")]
        table[cells[0].split("`")[1]] = dict(zip(names, map(int, cells[1:]), strict=True))
    return table


def test_the_deploy_guide_states_the_profiles_main_bicep_deploys() -> None:
    assert deploy_table((REPO / "docs" / "deploy.md").read_text()) == read_profiles()


def test_a_deploy_guide_figure_that_drifts_is_caught() -> None:
    text = (REPO / "docs" / "deploy.md").read_text()
    sale = read_profiles()["sale"]
    row = "| `sale` | " + " | ".join(str(v) for v in sale.values()) + " |"
    assert row in text
    drifted = text.replace(row, row.replace(f"| {sale['minReplicas']} |", f"| {sale['minReplicas'] + 1} |", 1))
    assert deploy_table(drifted) != read_profiles()
