"""The benchmark's own parts stay working without running the whole benchmark."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench import gpu, report
from bench.loadgen import OpenLoopResult, event_body


def test_gpu_script_runs_on_whatever_device_is_here() -> None:
    result = gpu.measure(Path("models/fraud/1/model.onnx"), repeat=3)
    assert result["device"] in ("cpu", "cuda")
    assert [row["batch"] for row in result["rows"]] == list(gpu.BATCHES)  # type: ignore[index]
    assert all(row["rows_per_s"] > 0 for row in result["rows"])  # type: ignore[index]


def test_open_loop_summary_and_budget() -> None:
    res = OpenLoopResult(rate=100, sent=4, latencies_ms=[1.0, 2.0, 3.0, 4.0], duration_s=1.0)
    res.stages["features"] = [0.2, 0.4]
    res.stages["cache"] = [0.1, 0.1]
    summary = report.summarize_open_loop(res)
    assert summary["p50_ms"] == 3.0 and summary["errors"] == 0 and summary["achieved"] == 4.0
    assert report.budget(summary["stages_ms"])["redis"] == 0.3 + 0.1


def test_targets_use_paired_ratios_against_the_raw_echo_of_each_round() -> None:
    rounds = {
        report.CEILING: [{"rps": 100.0}, {"rps": 200.0}, {"rps": 100.0}],
        "ceiling_starlette": [{"rps": 50.0}, {"rps": 60.0}, {"rps": 50.0}],
        "score_miss": [{"rps": 60.0}, {"rps": 80.0}, {"rps": 50.0}],
        "score_hit": [{"rps": 90.0}, {"rps": 170.0}, {"rps": 80.0}],
    }
    r = {
        "wrk_rounds": rounds,
        "wrk": {"score_miss": {"p99_ms": 5.0, "rps": 60.0}, "batch_64": {"events_per_s": 320.0}},
        "open_loop": [{"offered": 250, "p99_ms": 4.0}],
        "batcher": {"added_us": 30.0},
        "start_to_ready_s": 0.5,
    }
    met = {name.split(" ")[0] + " " + name.split(" ")[1]: ok for name, _, _, ok in report.targets(r)}
    assert met["miss path"] is True  # against 100, 200, 100 (not the slower Starlette): 0.6, 0.4, 0.5 -> 0.5
    assert met["hit path"] is True  # 0.9, 0.85, 0.8 -> 0.85
    assert met["/api/score/batch, 64"] is True  # 320 / 60 events/s: 5.3x
    assert report.paired_ratio(r, "score_miss", against="ceiling_starlette") == 1.2
    rounds[report.CEILING][1]["rps"] = 400.0  # a faster echo in one round lowers that round only
    assert report.paired_ratio(r, "score_miss") == 0.5


def test_event_bodies_are_unique_rows() -> None:
    assert event_body(1) != event_body(2)


def test_protocol_summary_takes_medians_and_round_by_round_ratios() -> None:
    from bench.protocols import summarize

    def rounds(*rps: float) -> list[dict[str, float]]:
        return [{"rps": r, "p50_ms": 1000 / r, "p99_ms": 2000 / r} for r in rps]

    s = summarize(
        {"api_score": rounds(100, 50, 90), "v2_rest": rounds(100, 50, 90), "v2_grpc": rounds(200, 100, 90)}, 16, 4
    )
    assert s["medians"]["v2_grpc"]["rps"] == 100 and s["ratios"]["v2_rest"]["rps_vs_grpc"] == 0.5
    assert s["ratios"]["v2_grpc"]["p50_minus_grpc_ms"] == 0


def test_the_fastapi_peer_builds_the_services_row_and_decision_for_the_same_event() -> None:
    pytest.importorskip("fastapi")
    import onnxruntime as ort

    from bench.peer_fastapi import Model, PaymentEvent, user_features
    from shared.domain.events import decode_event
    from shared.domain.spec import ModelSpec
    from shared.features.mapping import FeatureMapper
    from shared.features.store import encode_user

    path = "models/fraud/1/model.onnx"
    peer = Model(path)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    spec = ModelSpec.from_metadata(
        session.get_modelmeta().custom_metadata_map,
        [i.name for i in session.get_inputs()],
        [o.name for o in session.get_outputs()],
    )
    user = {"user_avg_amount_30d": 12.5, "user_txn_count_24h": 7.0, "user_account_age_days": 3.0}
    for n in range(40):
        body = event_body(n)
        ours = FeatureMapper(spec).row(decode_event(body), user).values
        theirs = peer.row(PaymentEvent.model_validate_json(body), user_features(encode_user(user)))
        assert theirs.tolist() == [ours.tolist()]
        score = peer.score(theirs)
        assert peer.decide(score) == spec.thresholds.decide(score)
    assert user_features(None) == {}
    assert (peer.review, peer.decline) == (spec.thresholds.review, spec.thresholds.decline)


def test_ratios_to_the_fastapi_peer_are_medians_of_per_round_ratios_for_miss_and_hit() -> None:
    def rounds(*rps: float) -> list[dict[str, float]]:
        return [{"rps": x, "p50_ms": 1000 / x, "p99_ms": 3000 / x, "cpu_us_per_req": 1e6 / x} for x in rps]

    r = {"wrk_rounds": {"score_miss": rounds(150, 100, 300), "score_hit": rounds(200, 400, 200)}}
    r["wrk_rounds"][report.PEER] = rounds(100, 100, 100)
    ratios = report.vs_peer(r)
    assert ratios["miss"]["rps"] == 1.5 and ratios["hit"]["rps"] == 2.0  # 1.5, 1, 3 and 2, 4, 2
    assert ratios["miss"]["p99_ms"] == pytest.approx(1 / 1.5) and ratios["hit"]["cpu_us_per_req"] == 0.5
    assert report.round_ratio(r, "score_miss", report.PEER, "p50_ms") == pytest.approx(1 / 1.5)
    page = report._peer(r)
    assert any(line.startswith("| req/s | 1.50 | 2.00 |") for line in page)
    assert sum(line.startswith("| 1 |") or line.startswith("| 3 |") for line in page) == 2


def test_the_feature_layouts_row_is_feast_over_native_per_round_and_needs_a_probe_read_from_features() -> None:
    def rounds(*rps: float) -> list[dict[str, float]]:
        return [{"rps": x, "p50_ms": 1000 / x, "p99_ms": 3000 / x} for x in rps]

    r: dict[str, Any] = {"wrk_rounds": {"score_miss": rounds(100, 200, 100), report.FEAST: rounds(95, 160, 80)}}
    read = {"risk_score": 0.52, "defaulted": []}
    layouts = report.feature_layouts(r, {"score_miss": read, report.FEAST: read})
    assert layouts["ratios"]["rps"] == 0.8  # 0.95, 0.8, 0.8
    assert layouts["ratios"]["p99_ms"] == pytest.approx(1 / 0.8)
    page = report._layouts({**r, "feature_layouts": layouts})
    assert sum(line.startswith(("| 1 |", "| 2 |", "| 3 |")) for line in page) == 3
    assert any("**0.80x** (target ≥ 0.9x)" in line and "no feature on its default" in line for line in page)

    r["wrk_rounds"][report.FEAST] = rounds(95, 190, 100)  # 0.95, 0.95, 1.0: met
    r["feature_layouts"] = report.feature_layouts(r, {"score_miss": read, report.FEAST: read})
    assert _feast_target(r) is True
    defaulted = {"risk_score": 0.4, "defaulted": ["user_txn_count_24h"]}  # a layout the app did not read
    r["feature_layouts"] = report.feature_layouts(r, {"score_miss": read, report.FEAST: defaulted})
    assert _feast_target(r) is False
    assert report.feature_layouts({"wrk_rounds": {"score_miss": rounds(1)}}, {}) == {}  # no Feast target: no row


def _feast_target(r: dict[str, Any]) -> bool:
    base = {report.CEILING: [{"rps": 1000.0}] * 3, "score_hit": [{"rps": 900.0}] * 3}
    full = {
        **r,
        "wrk_rounds": {**base, **r["wrk_rounds"]},
        "wrk": {"score_miss": {"p99_ms": 1.0, "rps": 100.0}},
        "open_loop": [{"offered": 250, "p99_ms": 1.0}],
        "batcher": {"added_us": 1.0},
        "start_to_ready_s": 0.5,
    }
    (met,) = [ok for name, _, _, ok in report.targets(full) if name.startswith("Feast layout")]
    return met


async def test_the_feast_layout_target_serves_the_demo_users_through_a_model_that_declares_serving_feast(
    redis_url: str, tmp_path: Path
) -> None:
    import onnxruntime as ort

    from bench import feast
    from shared.domain.spec import ModelSpec
    from shared.features.feast import FeastStore
    from shared.features.store import load_feature_file

    session = ort.InferenceSession(str(feast.write_demo_model(tmp_path)), providers=["CPUExecutionProvider"])
    spec = ModelSpec.from_metadata(
        session.get_modelmeta().custom_metadata_map,
        [i.name for i in session.get_inputs()],
        [o.name for o in session.get_outputs()],
    )
    assert spec.feast is not None and {c for c, _, _ in spec.feast.features} == set(feast.NAMES)
    project = f"t{uuid.uuid4().hex[:10]}"
    users = load_feature_file("data/demo_users.json")
    store = FeastStore.from_url(redis_url, project=project, timeout_s=1.0, l1_size=0, l1_ttl_s=1.0)
    try:
        assert await feast.seed_demo_layout(redis_url, project, event_time_s=time.time() - 60) == len(users)
        picked = ["u00000", "u00042", "u01999"]
        found = await store.contexts(spec, feast.events(picked))
        assert found == [{n: users[u][n] for n in feast.NAMES} for u in picked]
    finally:
        await store.aclose()
        await feast.clean(redis_url, "never-used:", project)


def test_the_instruction_counter_drives_the_app_it_counts() -> None:
    """bench.instructions' child (what valgrind runs): the app built, warmed and sent its requests."""
    import subprocess
    import sys

    for path in ("hit", "miss", "batch"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.instructions",
                "--child",
                "128" if path == "batch" else "16",
                "--path",
                path,
                "--telemetry",
                "on",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]


def test_the_side_by_side_comparison_names_its_checkout() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bench.versus", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "before" in done.stdout


def test_the_rollouts_counter_counts_the_writers_work_inside_its_window() -> None:
    """bench.instructions --rollouts' child: each variant serves wrk's events, and with the log on,
    every decision is written before the child exits (the writer's work is in the count)."""
    import subprocess
    import sys

    for variant, written in (("off", None), ("log", 216), ("shadow", 216)):  # NOTE: 200 warm-up + 16 counted
        command = [sys.executable, "-m", "bench.instructions", "--child", "16", "--rollouts", variant]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        if written is not None:
            assert f"written {written} buffered 0" in done.stdout, done.stdout


def test_the_served_counter_drives_the_server_it_counts_and_stops_it_cleanly() -> None:
    """bench.instructions --served without valgrind: each variant's uvicorn answers every request
    with a 200 and exits 0 on SIGINT (valgrind then prints its count: `served_count`)."""
    from bench.instructions import ROOT, SERVED, serve

    for variant in SERVED:
        status, stderr = serve(ROOT, variant, 8)
        assert status == 0, (variant, stderr[-2000:])
