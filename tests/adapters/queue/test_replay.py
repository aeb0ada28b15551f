"""`make replay` end to end: a real process, the same batch handler, in-process or Redis idempotency."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shared.settings import Settings
from tests.conftest import closed_port, event

REPO = Path(__file__).resolve().parents[3]


def write_events(path: Path) -> Path:
    lines = [
        json.dumps(event(event_id="r-1")),
        json.dumps(event(event_id="r-2", amount=18.0)),
        json.dumps(event(event_id="r-1")),  # a duplicate
        '{"event_id": "r-3", "amount":',  # malformed
        "",  # blank lines are skipped
        json.dumps(event(event_id="r-4", amount=-5)),  # schema violation
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def replay(path: Path, settings: Settings, **env: str) -> tuple[int, list[dict[str, Any]], str]:
    environ = {
        **{k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDIS_KEY_PREFIX")},
        "MODELS_DIR": settings.models_dir,
        "FEATURES_FILE": settings.features_file or "",
        "PYTHONPATH": str(REPO),
        "EVENT_MAX_AGE_S": "0",  # NOTE: the fixture events are days old; the window's own test sets it
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "shared.adapters.queue.replay", str(path)],
        cwd=REPO, env=environ, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_replay_prints_one_verdict_per_message_in_process(settings: Settings, tmp_path: Path) -> None:
    code, out, err = replay(write_events(tmp_path / "events.jsonl"), settings)
    assert code == 0, err
    assert [(o["outcome"], o["message_id"]) for o in out] == [
        ("completed", "r-1"),
        ("completed", "r-2"),
        ("duplicate", "r-1"),
        ("rejected", "line-4"),
        ("rejected", "r-4"),
    ]
    assert out[2]["body"] == out[0]["body"] and out[0]["body"]["event_id"] == "r-1"  # the first delivery's result
    assert out[0]["body"]["delivery_count"] == 1 and "processing_ms" in out[0]["body"]
    assert out[3]["reason"].startswith("malformed_json") and out[4]["reason"].startswith("invalid_event")
    assert all(o["body"] is None for o in out[3:]) and out[0]["reason"] is None
    assert "store in-process" in err


def test_replay_inside_the_idempotency_window_refuses_events_older_than_it(settings: Settings, tmp_path: Path) -> None:
    code, out, err = replay(write_events(tmp_path / "events.jsonl"), settings, EVENT_MAX_AGE_S="3300")
    assert code == 0, err
    assert [o["outcome"] for o in out] == ["rejected"] * 5
    assert out[0]["reason"].startswith("event_expired") and out[3]["reason"].startswith("malformed_json")


def test_replay_with_redis_remembers_results_across_runs(
    settings: Settings, tmp_path: Path, redis_url: str, redis_prefix: str, redis_client: Any
) -> None:
    path = write_events(tmp_path / "events.jsonl")
    code, first, err = replay(path, settings, REDIS_URL=redis_url, REDIS_KEY_PREFIX=redis_prefix)
    assert code == 0 and "store redis" in err, err
    code, second, _ = replay(path, settings, REDIS_URL=redis_url, REDIS_KEY_PREFIX=redis_prefix)
    assert code == 0
    assert [o["outcome"] for o in second] == ["duplicate", "duplicate", "duplicate", "rejected", "rejected"]
    assert [o["body"] for o in second[:3]] == [first[0]["body"], first[1]["body"], first[0]["body"]]


def test_replay_exits_1_when_a_message_could_not_be_handled(settings: Settings, tmp_path: Path) -> None:
    path = write_events(tmp_path / "events.jsonl")
    code, out, _ = replay(
        path, settings, REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0", QUEUE_BATCH_BUDGET_MS="6000"
    )
    assert code == 1
    assert [o["outcome"] for o in out] == ["failed", "failed", "failed", "rejected", "rejected"]
    assert out[0]["reason"].startswith("result_store_down")


def test_replay_of_a_missing_file_exits_2(settings: Settings, tmp_path: Path) -> None:
    code, out, err = replay(tmp_path / "nope.jsonl", settings)
    assert (code, out) == (2, []) and "cannot read" in err
