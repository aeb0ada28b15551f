"""The prediction log read back: a time range, pruned by the hour each object's path names.

    load(source, since=, until=, model=, version=)     the records as dicts (the lines `as_json` wrote)
    to_pandas(source, ...)                             the decisions as a pandas DataFrame (features.*, outcome.*)
    joined(records)                                    the decisions, a pending review's later outcome on each
    summarize(records) → Summary, render(summary)      what a look at a range wants, without pandas
    mirror(container, dest)                            the container's decisions and outcomes copied under
                                                       `dest` by the same names, for DuckDB (the report)

`source` is the log's directory or a (sync) blob ContainerClient: the names are the same
(shared/stores/prediction_log/sinks.py). `since` is inclusive and `until` exclusive, on each
record's `at`; an hour whose folder lies outside them is never opened. A pending review's
outcome is written when the review ends, in its own hour: the outcomes of the range's pending
decisions are also looked for up to OUTCOME_LOOK_PAST past `until` (those hours are opened only
when some outcome is still owed, and only their outcome lines for those decisions are taken).
pandas is not a runtime dependency: `to_pandas` imports it when called.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import orjson

from shared.settings import Settings
from shared.stores.prediction_log.sinks import NAME

if TYPE_CHECKING:
    import pandas
    from azure.storage.blob import ContainerClient

__all__ = [
    "OUTCOME_LOOK_PAST",
    "Range",
    "ShadowAgreement",
    "Summary",
    "blob_container",
    "joined",
    "load",
    "mirror",
    "parse_time",
    "render",
    "summarize",
    "to_pandas",
]

log = logging.getLogger(__name__)
HOUR = timedelta(hours=1)
# a review ends within its timeout (seconds) of its decision, or at shutdown: an hour is ample
OUTCOME_LOOK_PAST = timedelta(hours=1)
Record = dict[str, Any]


@dataclass(frozen=True)
class Range:
    """Which records to read: [since, until) on `at`, of one model (and version) or all."""

    since: datetime | None = None
    until: datetime | None = None
    model: str | None = None
    version: str | None = None

    def holds_hour(self, start: datetime) -> bool:
        """Whether the hour from `start` overlaps the range (its folder must be read)."""
        return (self.since is None or start + HOUR > self.since) and (self.until is None or start < self.until)

    def covers_hour(self, start: datetime) -> bool:
        """Whether the whole hour lies inside the range (its records need no check)."""
        return (self.since is None or start >= self.since) and (self.until is None or start + HOUR <= self.until)

    def holds(self, at: str) -> bool:
        moment = parse_time(at)
        return (self.since is None or moment >= self.since) and (self.until is None or moment < self.until)


def parse_time(text: str) -> datetime:
    """`2026-12-01`, `2026-12-01T10`, `2026-12-01T10:30`, or full ISO 8601; UTC unless it says otherwise."""
    moment = datetime.fromisoformat(text.strip())
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def load(
    source: Path | ContainerClient,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    model: str | None = None,
    version: str | None = None,
) -> list[Record]:
    """Every record in [since, until) of `model` (and `version`), or of all, object by object in hour
    order; then the outcomes of its pending decisions written past `until` (`_late_outcomes`)."""
    wanted = Range(since, until, model, version)
    records: list[Record] = []
    for name, start in _objects(source, wanted):
        lines = _parse(_read(source, name), name)
        records.extend(lines if wanted.covers_hour(start) else (r for r in lines if wanted.holds(r["at"])))
    records.extend(_late_outcomes(source, wanted, records))
    return records


def _late_outcomes(source: Path | ContainerClient, wanted: Range, records: Sequence[Record]) -> list[Record]:
    """The outcome lines, written in [until, until + OUTCOME_LOOK_PAST), of the pending decisions
    among `records` that have none among them (a decision at 10:59:58 whose review ended at 11:00:03)."""
    if wanted.until is None:
        return []  # an open range already reads every outcome written
    settled = {r["event"] for r in records if r.get("via") == "review"}
    owed = {
        r["event"]
        for r in records
        if r.get("via") != "review" and (r.get("review") or {}).get("status") == "pending" and r["event"] not in settled
    }
    if not owed:
        return []
    past = Range(wanted.until, wanted.until + OUTCOME_LOOK_PAST, wanted.model, wanted.version)
    found: list[Record] = []
    for name, _ in _objects(source, past):
        for r in _parse(_read(source, name), name):
            if r.get("via") == "review" and r["event"] in owed and past.holds(r["at"]):
                owed.discard(r["event"])
                found.append(r)
        if not owed:
            break  # every outcome owed is found: later hours stay unopened
    return found


def to_pandas(
    source: Path | ContainerClient,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    model: str | None = None,
    version: str | None = None,
) -> pandas.DataFrame:
    """What `load` reads, as a DataFrame of decisions with nested fields flattened (`features.amount`,
    `shadow.score`, ...), a pending review's outcome joined on (`outcome.status`, `outcome.decision`, ...)."""
    try:
        import pandas
    except ImportError as exc:
        raise ImportError("to_pandas needs pandas, which is not a runtime dependency: pip install pandas") from exc
    return pandas.json_normalize(joined(load(source, since=since, until=until, model=model, version=version)))


def joined(records: Sequence[Record]) -> list[Record]:
    """The decisions, each pending one with its review's later outcome under `outcome` (status,
    decision, reason, risk_score, at), the outcome lines themselves folded in (`via="review"`).

    An outcome whose decision lies outside the range read stays out; a decision whose
    outcome is not (yet) written, or was written past `load`'s look-past, has no `outcome`."""
    outcomes = {r["event"]: r for r in records if r.get("via") == "review"}
    decisions: list[Record] = []
    for r in records:
        if r.get("via") == "review":
            continue
        found = outcomes.get(r["event"]) if (r.get("review") or {}).get("status") == "pending" else None
        if found is not None:
            review = found.get("review") or {}
            r = {
                **r,
                "outcome": {
                    "status": review.get("status"),
                    "decision": found.get("decision"),
                    "reason": review.get("reason") or found.get("reason"),
                    "risk_score": review.get("risk_score"),
                    "at": found["at"],
                },
            }
        decisions.append(r)
    return decisions


def _objects(source: Path | ContainerClient, wanted: Range) -> Iterator[tuple[str, datetime]]:
    """(name, start of its hour) of each object the range may hold, sorted by hour then name."""
    found = []
    for name in _dir_names(source, wanted) if isinstance(source, Path) else _blob_names(source, wanted):
        match = NAME.search(name)
        if match is None or (wanted.model is not None and match["model"] != wanted.model):
            continue
        if wanted.version is not None and match["version"] != wanted.version:
            continue
        start = datetime.fromisoformat(f"{match['date']}T{match['hour']}:00+00:00")
        if wanted.holds_hour(start):
            found.append((start, name))
    for start, name in sorted(found):
        yield name, start


def _dir_names(root: Path, wanted: Range) -> Iterator[str]:
    """Relative names under `root`, whole dates outside the range skipped without listing them."""
    first = wanted.since.date().isoformat() if wanted.since is not None else ""
    last = wanted.until.date().isoformat() if wanted.until is not None else "9999"
    for folder in _folders(root, "model", wanted.model):
        for version in _folders(folder, "version", wanted.version):
            for date in _folders(version, "date", None):
                if first <= date.name.removeprefix("date=") <= last:
                    for path in date.glob("hour=*/*.jsonl"):
                        yield path.relative_to(root).as_posix()


def _folders(parent: Path, key: str, value: str | None) -> Iterable[Path]:
    if value is not None:
        folder = parent / f"{key}={value}"
        return [folder] if folder.is_dir() else []
    return sorted(p for p in parent.glob(f"{key}=*") if p.is_dir())


def _blob_names(container: ContainerClient, wanted: Range) -> Iterator[str]:
    prefix = ""
    if wanted.model is not None:
        prefix = f"model={wanted.model}/"
        if wanted.version is not None:
            prefix += f"version={wanted.version}/"
    for blob in container.list_blobs(name_starts_with=prefix or None):
        yield blob.name


def _read(source: Path | ContainerClient, name: str) -> bytes:
    if isinstance(source, Path):
        return (source / name).read_bytes()
    return source.download_blob(name).readall()


def _parse(data: bytes, name: str) -> list[Record]:
    """The object's records; a last line still being written (no newline yet) is left for later."""
    lines = data.split(b"\n")
    records, bad = [], 0
    for line in lines[:-1]:  # the piece after the last newline is partial (or empty)
        try:
            records.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            bad += 1
    if bad:
        log.warning("%s: %d lines are not JSON (skipped)", name, bad)
    return records


# -- the summary ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShadowAgreement:
    """One shadow version against the versions that decided, over the records it scored."""

    compared: int
    agreed: int
    failed: int
    mean_difference: float | None  # mean |shadow score - score|

    @property
    def share(self) -> float:
        return self.agreed / self.compared if self.compared else 0.0


@dataclass(frozen=True)
class Summary:
    """A range of records in figures."""

    records: int
    first: str | None = None
    last: str | None = None
    versions: dict[str, int] = field(default_factory=dict)  # "model/version" -> records
    decisions: dict[str, int] = field(default_factory=dict)  # "" where none was taken (V2 scores only)
    scores: dict[str, float] = field(default_factory=dict)  # p50, p90, p99
    defaulted: dict[str, float] = field(default_factory=dict)  # feature -> share of records it defaulted in
    shadow: dict[str, ShadowAgreement] = field(default_factory=dict)  # "model/shadow version" -> agreement
    reasons: dict[str, int] = field(default_factory=dict)  # feature -> times a reason code named it
    outcomes: dict[str, int] = field(default_factory=dict)  # pending reviews' later outcomes: status -> count

    def share(self, decision: str) -> float:
        return self.decisions.get(decision, 0) / self.records if self.records else 0.0


def summarize(records: Sequence[Mapping[str, Any]]) -> Summary:
    """Counts, shares, score quantiles, defaulted shares, shadow agreement and reason-code features
    of the decisions; the pending reviews' outcomes (`via="review"` lines) counted apart."""
    outcomes = Counter((r.get("review") or {}).get("status", "") for r in records if r.get("via") == "review")
    if outcomes:
        records = [r for r in records if r.get("via") != "review"]
    if not records:
        return Summary(records=0, outcomes=dict(outcomes.most_common()))
    n = len(records)
    defaulted: Counter[str] = Counter(f for r in records for f in r.get("defaulted") or ())
    reasons: Counter[str] = Counter(c["feature"] for r in records for c in r.get("reasons") or ())
    moments = sorted(r["at"] for r in records)
    return Summary(
        records=n,
        first=moments[0],
        last=moments[-1],
        versions=dict(Counter(f"{r['model']}/{r['version']}" for r in records).most_common()),
        decisions=dict(Counter(r.get("decision", "") for r in records).most_common()),
        scores=_quantiles(sorted(float(r["score"]) for r in records)),
        defaulted={f: c / n for f, c in defaulted.most_common()},
        shadow=_shadows(records),
        reasons=dict(reasons.most_common()),
        outcomes=dict(outcomes.most_common()),
    )


def _quantiles(scores: list[float]) -> dict[str, float]:
    """Nearest-rank p50, p90, p99 of sorted scores."""
    last = len(scores) - 1
    return {f"p{q}": scores[min(last, max(0, -(-q * len(scores) // 100) - 1))] for q in (50, 90, 99)}


def _shadows(records: Sequence[Mapping[str, Any]]) -> dict[str, ShadowAgreement]:
    tallies: dict[str, list[float]] = {}  # key -> [compared, agreed, failed, sum of differences, scored]
    for r in records:
        shadow = r.get("shadow")
        if not shadow:
            continue
        tally = tallies.setdefault(f"{r['model']}/{shadow['version']}", [0, 0, 0, 0.0, 0])
        tally[0] += 1
        if shadow.get("error"):
            tally[2] += 1
            continue
        tally[1] += shadow.get("decision") == r.get("decision")
        if shadow.get("score") is not None:
            tally[3] += abs(float(shadow["score"]) - float(r["score"]))
            tally[4] += 1
    return {
        key: ShadowAgreement(int(c), int(a), int(f), d / s if s else None) for key, (c, a, f, d, s) in tallies.items()
    }


def render(summary: Summary) -> str:
    """The summary as a few aligned lines (what `python -m shared.stores.prediction_log` prints)."""
    if not summary.records:
        return "records            0\n"
    n = summary.records
    rows = [
        ("records", f"{n:,}  ({summary.first} .. {summary.last})"),
        ("by version", _join(f"{k} {v:,}" for k, v in summary.versions.items())),
        ("decisions", _join(f"{k or '(none)'} {v:,} ({v / n:.1%})" for k, v in summary.decisions.items())),
        ("score", _join(f"{k} {v:.4g}" for k, v in summary.scores.items())),
        ("defaulted", _join(f"{k} {v:.1%}" for k, v in summary.defaulted.items()) or "none"),
    ]
    for key, s in summary.shadow.items():
        diff = "" if s.mean_difference is None else f", mean |score difference| {s.mean_difference:.4g}"
        rows.append(("shadow", f"{key}: {s.compared:,} compared, {s.share:.1%} agree{diff}, {s.failed:,} failed"))
    if summary.reasons:
        rows.append(("reason codes", _join(f"{k} {v:,}" for k, v in summary.reasons.items())))
    if summary.outcomes:
        rows.append(("review outcomes", _join(f"{k} {v:,}" for k, v in summary.outcomes.items())))
    return "".join(f"{label:<18} {text}\n" for label, text in rows)


def _join(parts: Iterable[str]) -> str:
    return " · ".join(parts)


def blob_container(settings: Settings) -> ContainerClient:
    """The log's container (PREDICTION_LOG_CONTAINER) in the model storage account, for reading."""
    from azure.storage.blob import ContainerClient

    name = settings.prediction_log.container
    if settings.model_storage:
        return ContainerClient.from_connection_string(settings.model_storage, name)
    if settings.model_storage_blob_uri:
        from azure.identity import DefaultAzureCredential

        return ContainerClient(settings.model_storage_blob_uri, name, credential=DefaultAzureCredential())
    raise ValueError("--blob needs ModelStorage or ModelStorage__blobServiceUri")


# NOTE: DuckDB's own `azure` extension would read `az://` globs in place, but DuckDB installs an
# extension by downloading it from extensions.duckdb.org at first use, which neither this machine nor a
# locked-down replica reaches (docs/outcomes.md, "Reading from Blob"): the SDK the app already holds
# reads the container, object by object in chunks (never a whole log in memory), and DuckDB reads files.
MIRRORED = ("model=", "outcomes/")
OUTCOME_NAME = re.compile(r"outcomes/date=\d{4}-\d{2}-\d{2}/hour=\d{2}/[^/]+\.jsonl")


def mirror(container: ContainerClient, dest: Path) -> tuple[int, int]:
    """Every decision and outcome object of the container under `dest` by the same relative name;
    (objects, bytes). A name outside the log's layout (a report written beside it, a stray upload,
    a `..`) is left where it is."""
    objects = size = 0
    for prefix in MIRRORED:
        for blob in container.list_blobs(name_starts_with=prefix):
            if not (NAME.fullmatch(blob.name) or OUTCOME_NAME.fullmatch(blob.name)):
                continue
            target = dest.joinpath(*PurePosixPath(blob.name).parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                for chunk in container.download_blob(blob.name).chunks():
                    out.write(chunk)
            objects, size = objects + 1, size + (blob.size or 0)
    return objects, size
