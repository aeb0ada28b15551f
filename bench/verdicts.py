"""What a benchmark's timed work answered, counted, so that no figure is reported for work not done.

A throughput or a CPU-per-event figure names a kind of work ("a payment scored"). A phase counts
the verdict of every item it sent (`completed`, `duplicate`, `rejected:<code>`, `http_<status>`,
`failed`...) and, before it reports, `require`s that the work it names was done for nearly all of
them: a run whose events were refused as `event_expired` measured the rejection path, and says so
by raising `WorkNotDone` instead of printing a figure (issue 53: the queue benches once timed
100 % rejections for days).

    verdicts = Verdicts("payments_64")
    verdicts.add("completed", 63); verdicts.add("rejected:event_expired")
    verdicts.require("completed")        # raises: 98.4 % < 99.9 %
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import orjson

__all__ = ["MIN_SHARE", "SHED", "Verdicts", "WorkNotDone", "batch_verdicts", "http_verdict", "published_verdicts"]

MIN_SHARE = 0.999  # the share of items that must have had the work a phase names done
SHED = ("shed:overloaded", "shed:deadline_exceeded")  # admission's answers under load: measured, not errors


class WorkNotDone(RuntimeError):
    """A phase's items were not mostly given the work its figure names: the figure is withheld."""


class Verdicts:
    """The verdict counts of one phase."""

    def __init__(self, phase: str) -> None:
        self.phase = phase
        self.counts: Counter[str] = Counter()

    def add(self, verdict: str, n: int = 1) -> None:
        if n:
            self.counts[verdict] += n

    def update(self, verdicts: Iterable[str]) -> None:
        self.counts.update(verdicts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def share(self, *kinds: str) -> float:
        return sum(self.counts[k] for k in kinds) / self.total if self.total else 0.0

    def require(self, *kinds: str, share: float = MIN_SHARE) -> None:
        """Raise `WorkNotDone` unless at least `share` of the items ended as one of `kinds`."""
        if not self.total:
            raise WorkNotDone(f"{self.phase}: no verdicts were counted; the figure is not reported")
        got = self.share(*kinds)
        if got < share:
            seen = ", ".join(f"{k} {n}" for k, n in self.counts.most_common())
            raise WorkNotDone(
                f"{self.phase}: {got:.2%} of {self.total} items were {'/'.join(kinds)}, under {share:.1%} "
                f"({seen}); the figure is not reported: it would time other work"
            )

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def http_verdict(status: int, body: bytes) -> str:
    """One HTTP answer: `completed` for a 200 carrying a decision; else `rejected:<code>` (4xx: the
    request's fault), `shed:<code>` (5xx with a code: the service refused it, e.g. admission's
    `overloaded`), or `http_<status>` with no code."""
    if status == 200:
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            return "http_200_unreadable"
        return "completed" if isinstance(answer, dict) and "decision" in answer else "http_200_no_decision"
    try:
        code = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        code = None
    if not isinstance(code, str):
        return f"http_{status}"
    return f"rejected:{code}" if status < 500 else f"shed:{code}"


def batch_verdicts(status: int, body: bytes) -> list[str]:
    """Each item of a `/api/score/batch` answer (`completed` or `rejected:<code>`), or the whole
    answer's verdict once when it is not a 200."""
    if status != 200:
        return [http_verdict(status, body)]
    try:
        results = orjson.loads(body)["results"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return ["http_200_unreadable"]
    return ["completed" if "decision" in r else f"rejected:{r.get('error')}" for r in results]


def published_verdicts(published: Iterable[dict[str, str]]) -> Counter[str]:
    """The queue path's verdicts from what it published (`queue`, `body`): one `completed` per
    `risk-completed` result, one `rejected:<code>` per `risk-rejected` record."""
    counts: Counter[str] = Counter()
    for message in published:
        if message["queue"] == "risk-completed":
            counts["completed"] += 1
        elif message["queue"] == "risk-rejected":
            try:
                code = orjson.loads(message["body"]).get("error", "unknown")
            except (orjson.JSONDecodeError, AttributeError):
                code = "unreadable"
            counts[f"rejected:{code}"] += 1
    return counts
