"""A pending review's later outcome in the prediction log: written by the real app through the real
`openai` client against a local endpoint, read back and joined to its decision by the reader."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from bench.llm_server import LlmServer
from shared.adapters.http.app import create_app
from shared.core.holder import ServiceHolder
from shared.domain.records import hashed_id
from shared.settings import PredictionLogPolicy, Settings
from shared.stores.prediction_log.reader import joined, load, render, summarize
from tests.conftest import event

ALL = {"band_low": 0.0, "band_high": 1.0}


def logging_to(settings: Settings, root: Path) -> Settings:
    policy = PredictionLogPolicy(sink="dir", directory=str(root), flush_s=0.05, hash_key="k")
    return dataclasses.replace(settings, prediction_log=policy)


def score_pending(settings: Settings, event_id: str, *, wait_for: str | None) -> dict[str, object]:
    """Score one event answered "pending"; wait until its review is `wait_for` (None: shut down at once)."""
    with TestClient(create_app(ServiceHolder(lambda: settings)), raise_server_exceptions=False) as client:
        scored = client.post("/api/score", json=event(event_id=event_id)).json()
        assert scored["review"] == {"status": "pending", "id": event_id}
        for _ in range(100 if wait_for else 0):
            if client.get(f"/api/reviews/{event_id}").json()["status"] == wait_for:
                break
            time.sleep(0.05)
        return scored  # NOTE: leaving the client shuts the app down: the log sends what it holds


def test_a_pending_reviews_outcome_follows_its_decision_into_the_log(
    reviewing: Callable[..., Settings], llm: LlmServer, tmp_path: Path
) -> None:
    llm.behaviour.delay_s = 0.3  # past the HTTP wait
    scored = score_pending(logging_to(reviewing(**ALL, timeout_ms=20.0), tmp_path), "o-1", wait_for="done")
    lines = load(tmp_path)
    decision, outcome = sorted(lines, key=lambda r: r["via"] == "review")
    assert [decision["via"], outcome["via"]] == ["http", "review"]
    assert decision["event"] == outcome["event"] == hashed_id("o-1", b"k")
    assert (outcome["model"], outcome["version"]) == (decision["model"], decision["version"])
    assert outcome["review"]["status"] == "done" and outcome["review"]["id"] == outcome["event"]
    assert outcome["decision"] in ("approve", "review", "decline") and outcome["features"] == {}
    assert all("o-1" not in str(r) for r in lines)  # the raw event id is in no line, the review's included
    (row,) = joined(lines)
    assert row["decision"] == scored["decision"] and row["review"]["status"] == "pending"
    assert row["outcome"]["status"] == "done" and row["outcome"]["decision"] == outcome["decision"]
    assert row["outcome"]["risk_score"] == outcome["review"]["risk_score"]
    summary = summarize(lines)
    assert summary.records == 1 and summary.outcomes == {"done": 1}
    assert "review outcomes    done 1" in render(summary)


def test_a_failed_review_and_one_cut_by_shutdown_leave_failed_outcomes(
    reviewing: Callable[..., Settings], llm: LlmServer, tmp_path: Path
) -> None:
    llm.behaviour.delay_s, llm.behaviour.fault = 0.2, "500"
    settings = logging_to(reviewing(**ALL, timeout_ms=20.0), tmp_path / "failed")
    score_pending(settings, "o-2", wait_for="failed")
    llm.behaviour.delay_s, llm.behaviour.fault = 3.0, None  # past the 1 s grace: still running when the app shuts down
    score_pending(logging_to(reviewing(**ALL, timeout_ms=20.0), tmp_path / "cut"), "o-3", wait_for=None)
    for root, reason in ((tmp_path / "failed", None), (tmp_path / "cut", "shutdown")):
        (row,) = joined(load(root))
        assert row["outcome"]["status"] == "failed", row
        assert row["outcome"]["decision"] == row["decision"]  # the local decision stands
        if reason is not None:
            assert row["outcome"]["reason"] == reason


def test_a_review_that_ends_inside_an_explained_answer_still_follows_its_decision(
    reviewing: Callable[..., Settings], llm: LlmServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """?explain=1 awaits its reason codes after the verdict: a review told "pending" can end in that
    await, before the decision's record exists. Its outcome is kept and written when the record is."""
    import shared.models.explain as explaining

    real = explaining.explain
    holder = ServiceHolder(lambda: logging_to(reviewing(**ALL, timeout_ms=20.0), tmp_path))

    async def slow_explain(*args: Any) -> Any:
        found = await real(*args)
        service = await holder.start()
        for _ in range(200):  # NOTE: until the review has ended (its record is kept before `settled` runs)
            if (await service.admin.review("o-4")).status == "done":
                break
            await asyncio.sleep(0.02)
        return found

    monkeypatch.setattr(explaining, "explain", slow_explain)
    llm.behaviour.delay_s = 0.2  # past the HTTP wait, well inside the slow explanation
    with TestClient(create_app(holder), raise_server_exceptions=False) as client:
        scored = client.post("/api/score?explain=1", json=event(event_id="o-4", amount=9000.0)).json()
        assert scored["review"] == {"status": "pending", "id": "o-4"} and scored["decision"] != "approve"
    lines = load(tmp_path)
    assert [r["via"] for r in lines] == ["http", "review"]  # NOTE: the decision's line first, then its outcome
    (row,) = joined(lines)
    assert row["outcome"]["status"] == "done" and row["outcome"]["decision"] == lines[1]["decision"]
