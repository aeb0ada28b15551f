"""The audit of control actions in a real Redis: newest first, at most AUDIT_KEEP a model."""

from __future__ import annotations

from typing import Any

import pytest

from shared.stores.control import Actor, ControlAudit, MemoryControlStore, RedisControlStore


@pytest.fixture
def store(redis_client: Any, redis_prefix: str) -> RedisControlStore:
    return RedisControlStore(redis_client, prefix=redis_prefix)


async def test_actions_are_kept_newest_first_and_trimmed(
    store: RedisControlStore, redis_client: Any, redis_prefix: str
) -> None:
    audit = ControlAudit(store, keep=3)
    for version in "12345":
        await audit.record(Actor("admin key", f"step {version}"), "pin", "fraud", version=version)
    await audit.record(Actor("admin key"), "unpin", "other")
    recent = await audit.recent("fraud", 10)
    assert [(a.version, a.reason) for a in recent] == [("5", "step 5"), ("4", "step 4"), ("3", "step 3")]
    assert await redis_client.llen(redis_prefix + "audit:fraud") == 3
    assert [a.action for a in await audit.recent("other")] == ["unpin"]


async def test_without_a_store_the_process_keeps_them() -> None:
    audit = ControlAudit(None, keep=2)
    for version in "123":
        await audit.record(None, "pin", "fraud", version=version)
    assert [(a.who, a.version) for a in await audit.recent("fraud")] == [("internal", "3"), ("internal", "2")]


async def test_a_store_outage_after_the_action_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    memory = MemoryControlStore()
    memory.down = True
    action = await ControlAudit(memory).record(Actor("admin key"), "abort", "fraud", version="2")
    assert action.action == "abort"
    assert any("not kept in the store" in r.getMessage() for r in caplog.records if r.name == "shared.audit")
