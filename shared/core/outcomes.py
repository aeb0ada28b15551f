"""The outcome desk: outcomes learned later, taken through the HTTP route and the `risk-outcomes` queue.

    take_json(body)   `{"outcomes": [...]}` → an `OutcomeReceipt`: each written, a duplicate, or refused
                      with its code (the envelope's faults refuse the batch, as for /api/score/batch)
    take(items)       the same for outcomes already decoded (the queue: one message, one outcome)

Built once per process, off the import path (`build_outcomes`), beside the prediction log: the
same store (PREDICTION_LOG=dir|blob), replica name and hash key. Without the log there is nowhere
to keep them: there is no desk (the route answers 404 naming the setting, as /api/metrics does
with TELEMETRY=false; the queue holds its messages).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from shared.domain.answers import IndexedError, OutcomeReceipt
from shared.domain.outcomes import Outcome, decode_outcomes
from shared.errors import ScoringError
from shared.settings import Settings
from shared.stores.outcomes import Marks, MemoryMarks, OutcomeStore, RedisMarks

__all__ = ["NO_LOG", "OutcomeDesk", "build_outcomes"]

NO_LOG = "outcomes are kept beside the decisions, and the prediction log is off: set PREDICTION_LOG=dir or blob"


def _now() -> datetime:
    return datetime.now(UTC)


class OutcomeDesk:
    """Outcomes in: decoded and checked, then kept once each (shared/stores/outcomes.py)."""

    def __init__(self, store: OutcomeStore, max_items: int, clock: Callable[[], datetime] = _now) -> None:
        self._store = store
        self._max_items = max_items
        self._clock = clock

    @property
    def max_items(self) -> int:
        """The most outcomes one batch (a request, an envelope on the queue) may hold."""
        return self._max_items

    def now(self) -> datetime:
        return self._clock()

    async def take_json(self, body: bytes) -> OutcomeReceipt:
        """A batch's receipt; `ScoringError` for the envelope, `Unavailable` when the store is down."""
        now = self._clock()
        return await self.take(decode_outcomes(body, self._max_items, now), now)

    async def take(self, items: Sequence[Outcome | ScoringError], now: datetime) -> OutcomeReceipt:
        valid = [item for item in items if isinstance(item, Outcome)]
        written = await self._store.take(valid, now)
        errors = [IndexedError(i, e.code, e.detail) for i, e in enumerate(items) if isinstance(e, ScoringError)]
        fresh = sum(written)
        return OutcomeReceipt(fresh, len(valid) - fresh, len(errors), errors)

    async def keep(self, outcomes: Sequence[Outcome], now: datetime) -> list[bool]:
        """Per outcome, in order: True when written now, False for a duplicate (the queue's verdicts)."""
        return await self._store.take(outcomes, now)

    async def aclose(self) -> None:
        await self._store.aclose()


def build_outcomes(settings: Settings, replica: str, marks: Marks | None = None) -> OutcomeDesk | None:
    """The desk over the prediction log's store; None when the log is off."""
    from shared.stores.prediction_log.sinks import outcome_name, sink_from_settings

    sink = sink_from_settings(settings, replica, names=outcome_name)
    if sink is None:
        return None
    if marks is None and settings.redis_url:
        from shared.stores.cache.redis_tier import redis_client

        client = redis_client(settings.redis_url, timeout_s=2.0, use_entra=settings.redis_use_entra)
        marks = RedisMarks(client, settings.redis_prefix)
    key = (settings.prediction_log.hash_key or "").encode()
    return OutcomeDesk(OutcomeStore(sink, marks or MemoryMarks(), key), settings.max_batch_items)
