"""A payment twice in one batch gets its first delivery's verdict; a failure marks what it touched."""

from __future__ import annotations

from shared.adapters.queue.messages import Incoming
from shared.adapters.queue.verdicts import Delivery, Handled, conflict, fail, follow_primaries
from shared.errors import InvalidEvent, ResultStoreDown


def delivery(message_id: str, primary: Delivery | None = None) -> Delivery:
    return Delivery(Incoming(message_id, b"{}"), primary=primary)


def test_a_second_delivery_of_a_completed_payment_is_a_duplicate_with_the_same_body() -> None:
    first = delivery("m1")
    first.verdict = Handled("m1", "completed", b"result")
    second = delivery("m2", primary=first)
    follow_primaries([first, second])
    assert second.verdict == Handled("m2", "duplicate", b"result")
    assert first.verdict == Handled("m1", "completed", b"result")  # the first keeps its own


def test_a_second_delivery_of_a_failed_or_rejected_payment_shares_the_verdict_and_why() -> None:
    down, bad = ResultStoreDown("down"), InvalidEvent("bad")
    failed, rejected = delivery("m1"), delivery("m3")
    failed.verdict = Handled("m1", "failed", None, down)
    rejected.verdict = Handled("m3", "rejected", b"record", bad)
    again = [delivery("m2", primary=failed), delivery("m4", primary=rejected)]
    follow_primaries([failed, rejected, *again])
    assert [d.verdict for d in again] == [
        Handled("m2", "failed", None, down),
        Handled("m4", "rejected", b"record", bad),
    ]


def test_fail_marks_each_delivery_failed_with_nothing_to_publish() -> None:
    batch = [delivery("m1"), delivery("m2")]
    fail(batch, ResultStoreDown("down"))
    assert [(d.verdict.outcome, d.verdict.body) for d in batch if d.verdict] == [("failed", None)] * 2
    assert batch[0].verdict is not None and batch[0].verdict.reason == "result_store_down: down"


def test_a_conflict_is_the_id_conflict_refusal() -> None:
    assert conflict().code == "event_id_conflict" and not conflict().retryable
