"""Decisions joined to the outcomes learned later: how each model version did, per day of decision.

    python -m shared.stores.prediction_log.report --dir .run/predictions [--maturity-days 120]
    python -m shared.stores.prediction_log.report --blob      # PREDICTION_LOG_CONTAINER of ModelStorage

DuckDB reads the log's hive-partitioned JSONL as it lies (the decisions under
`model=/version=/date=/hour=/`, the outcomes under `outcomes/date=/hour=/`, shared/stores/prediction_log/sinks.py)
and joins them on the hashed event id: both were hashed with the same key, so the join never sees
a raw id. DuckDB is imported here only (never on the Functions path: tests/test_layers.py).

    decisions   one row per (event, model, version): its first record (a redelivery scored twice
                counts once); `role` live or canary (the arm that decided), and a shadow version's
                score of the same event as a row of its own (`role` shadow), so the three sit side by side
    outcomes    restatements (the same digest) dropped; per event the latest (`learned_at`, then
                arrival) supersedes the earlier ones, which stay in the store
    figures     per (model, version, role, day): decisions, the share still awaiting an outcome,
                fraud caught (declined) / reviewed / missed (approved) in count and amount lost,
                false declines and their rate among the legit, precision and recall of a decline at
                the version's thresholds (the decision it took), the review rate, PR-AUC (average
                precision, as scikit-learn computes it) and `mature`: a day within `maturity_days` of
                today is immature (chargebacks come up to 120 days later): its figures are not yet good
    unmatched   outcomes (latest per event) that match no decision: kept, counted, matched on a later run,
                until their window ends: one learned more than the log's retention ago
                (RETENTION_DAYS) can no longer find its decision, and is counted `lapsed` instead
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import groupby
from pathlib import Path
from typing import Any

from shared.domain.outcomes import RETENTION_DAYS

__all__ = ["MATURITY_DAYS", "Costs", "Loaded", "Report", "build", "calibration", "costs", "labelled", "main", "render"]

MATURITY_DAYS = 120  # a chargeback's usual latest arrival

DECISIONS = """
CREATE TEMP VIEW records AS
SELECT * FROM read_json({decisions}, format = 'newline_delimited', hive_partitioning = false,
    columns = {{'event': 'VARCHAR', 'at': 'VARCHAR', 'via': 'VARCHAR', 'model': 'VARCHAR', 'version': 'VARCHAR',
               'score': 'DOUBLE', 'decision': 'VARCHAR', 'arm': 'VARCHAR',
               'shadow': 'STRUCT(version VARCHAR, score DOUBLE, decision VARCHAR, error VARCHAR)'}});
CREATE TEMP VIEW scored AS
SELECT event, CAST("at" AS TIMESTAMPTZ) AS "at", model, version, coalesce(arm, 'live') AS role, score, decision
  FROM records WHERE via <> 'review' AND event <> ''
UNION ALL
SELECT event, CAST("at" AS TIMESTAMPTZ), model, shadow.version, 'shadow', shadow.score, shadow.decision
  FROM records WHERE via <> 'review' AND event <> '' AND shadow.score IS NOT NULL;
CREATE TEMP TABLE decisions AS
SELECT event, model, version, role, CAST(timezone('UTC', "at") AS DATE) AS day, score, decision FROM (
  SELECT *, row_number() OVER (PARTITION BY event, model, version ORDER BY "at") AS nth FROM scored
) WHERE nth = 1;
"""

OUTCOMES = """
CREATE TEMP TABLE outcomes AS
SELECT event, outcome, coalesce(amount_lost, 0.0) AS amount, learned FROM (
  SELECT *, row_number() OVER (PARTITION BY event ORDER BY learned DESC, received DESC) AS latest FROM (
    SELECT event, outcome, amount_lost, CAST(learned_at AS TIMESTAMPTZ) AS learned,
           CAST(received_at AS TIMESTAMPTZ) AS received,
           row_number() OVER (PARTITION BY event, digest ORDER BY received_at) AS copy
      FROM read_json({outcomes}, format = 'newline_delimited', hive_partitioning = false,
        columns = {{'event': 'VARCHAR', 'outcome': 'VARCHAR', 'learned_at': 'VARCHAR', 'amount_lost': 'DOUBLE',
                   'received_at': 'VARCHAR', 'digest': 'VARCHAR'}})
  ) WHERE copy = 1
) WHERE latest = 1;
"""

# the decisions of mature days: those on or before `horizon.until` (Loaded.mature sets it)
MATURE = """
CREATE TEMP TABLE horizon AS SELECT DATE '0001-01-01' AS until;
CREATE TEMP VIEW mature AS SELECT d.* FROM decisions d, horizon h WHERE d.day <= h.until;
"""
NO_DECISIONS = """CREATE TEMP TABLE decisions (event VARCHAR, model VARCHAR, version VARCHAR, role VARCHAR, day DATE,
    score DOUBLE, decision VARCHAR);"""
NO_OUTCOMES = "CREATE TEMP TABLE outcomes (event VARCHAR, outcome VARCHAR, amount DOUBLE, learned TIMESTAMPTZ);"

FIGURES = """
WITH joined AS (
  SELECT d.*, o.outcome, o.amount,
         o.outcome = 'fraud' AS fraud, o.outcome = 'legit' AS legit
    FROM decisions d LEFT JOIN outcomes o USING (event)
), counts AS (
  SELECT model, version, role, day,
         count(*) AS decisions,
         count(outcome) AS labelled,
         count(*) FILTER (decision = 'review') AS reviews,
         count(*) FILTER (fraud) AS fraud,
         count(*) FILTER (fraud AND decision = 'decline') AS caught,
         count(*) FILTER (fraud AND decision = 'review') AS fraud_reviewed,
         count(*) FILTER (fraud AND decision = 'approve') AS missed,
         coalesce(sum(amount) FILTER (fraud AND decision = 'decline'), 0) AS caught_amount,
         coalesce(sum(amount) FILTER (fraud AND decision = 'approve'), 0) AS missed_amount,
         count(*) FILTER (legit) AS legit,
         count(*) FILTER (legit AND decision = 'decline') AS false_declines,
         count(*) FILTER (outcome IS NOT NULL AND decision = 'decline') AS labelled_declines
    FROM joined GROUP BY ALL
), steps AS (  -- average precision: one step per distinct score, highest first (scikit-learn's definition)
  SELECT model, version, role, day, score, count(*) FILTER (fraud) AS tp, count(*) FILTER (legit) AS fp
    FROM joined WHERE outcome IS NOT NULL GROUP BY ALL
), curve AS (
  SELECT *, sum(tp) OVER w AS tps, sum(tp + fp) OVER w AS predicted,
         sum(tp) OVER (PARTITION BY model, version, role, day) AS positives
    FROM steps
  WINDOW w AS (PARTITION BY model, version, role, day ORDER BY score DESC ROWS UNBOUNDED PRECEDING)
), ap AS (
  SELECT model, version, role, day,
         CASE WHEN max(positives) > 0 THEN sum(tp / positives * tps / predicted) END AS pr_auc
    FROM curve GROUP BY ALL
)
SELECT c.*, 1 - labelled / decisions AS awaiting,
       reviews / decisions AS review_rate,
       CASE WHEN labelled_declines > 0 THEN caught / labelled_declines END AS precision,
       CASE WHEN fraud > 0 THEN caught / fraud END AS recall,
       CASE WHEN legit > 0 THEN false_declines / legit END AS false_decline_rate,
       ap.pr_auc, day <= $mature_until AS mature
  FROM counts c LEFT JOIN ap USING (model, version, role, day)
 ORDER BY model, day, role = 'shadow', role = 'canary', version
"""

# outcomes no decision matches: still in their window (unmatched), or past it (lapsed: their decision,
# if it ever was, is gone from the log)
UNMATCHED = """
SELECT count(*) FILTER (learned >= $window_start), count(*) FILTER (learned < $window_start)
  FROM outcomes o WHERE NOT EXISTS (SELECT 1 FROM decisions d WHERE d.event = o.event)
"""

# the cost of each version's decisions as taken, and of every (review, decline) pair on a grid of
# GRID steps, over its labelled decisions: a missed fraud costs `loss_share` of its amount lost, a
# review `review_cost`, a false decline `decline_cost`; a declined fraud costs nothing
COSTS = """
WITH labelled AS (
  SELECT d.model, d.version, d.role, d.score, d.decision, o.outcome = 'fraud' AS fraud, o.amount
    FROM mature d JOIN outcomes o USING (event)
), grid AS (
  SELECT r / $steps AS review, k / $steps AS decline
    FROM range(0, CAST($steps AS BIGINT) + 1) AS a(r), range(0, CAST($steps AS BIGINT) + 1) AS b(k) WHERE r <= k
), priced AS (
  SELECT l.model, l.version, l.role, g.review, g.decline,
         sum(CASE WHEN l.score >= g.decline THEN (CASE WHEN l.fraud THEN 0 ELSE $decline_cost END)
                  WHEN l.score >= g.review THEN $review_cost
                  WHEN l.fraud THEN $loss_share * l.amount ELSE 0 END) AS cost
    FROM labelled l, grid g GROUP BY ALL
), live AS (
  SELECT model, version, role, count(*) AS labelled,
         sum(CASE WHEN decision = 'decline' THEN (CASE WHEN fraud THEN 0 ELSE $decline_cost END)
                  WHEN decision = 'review' THEN $review_cost
                  WHEN fraud THEN $loss_share * amount ELSE 0 END) AS live_cost
    FROM labelled GROUP BY ALL
)
SELECT live.*, best.review AS optimal_review, best.decline AS optimal_decline, best.cost AS optimal_cost
  FROM live JOIN (
    SELECT *, row_number() OVER (PARTITION BY model, version, role ORDER BY cost, decline DESC, review DESC) AS nth
      FROM priced
  ) best USING (model, version, role)
 WHERE best.nth = 1
 ORDER BY model, role = 'shadow', version
"""
GRID = 20  # thresholds in steps of 0.05

# reliability: per model, version and role, the labelled decisions in BINS equal-width score bins,
# each bin's mean score against its observed fraud rate (scikit-learn's calibration_curve, "uniform")
CALIBRATION = """
SELECT model, version, role, least(floor(score * $bins), $bins - 1)::INTEGER AS bin, count(*) AS n,
       avg(score) AS mean_score, avg(CASE WHEN o.outcome = 'fraud' THEN 1.0 ELSE 0.0 END) AS fraud_rate
  FROM mature d JOIN outcomes o USING (event)
 GROUP BY model, version, role, bin ORDER BY model, version, role, bin
"""
BINS = 10


def calibration(
    source: Path | Loaded, bins: int = BINS, *, today: date | None = None, maturity_days: int = MATURITY_DAYS
) -> list[dict[str, Any]]:
    """Reliability bins per model, version and role, over mature days (bins without a labelled
    decision are absent)."""
    with _opened(source) as log:
        cursor = log.mature(today, maturity_days).execute(CALIBRATION, {"bins": bins})
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


LABELLED = """
SELECT d.model, d.version, d.role, d.score, d.decision, o.outcome = 'fraud' AS fraud, o.amount
  FROM mature d JOIN outcomes o USING (event) ORDER BY d.model, d.version, d.role
"""


def labelled(
    source: Path | Loaded, *, today: date | None = None, maturity_days: int = MATURITY_DAYS
) -> list[tuple[str, str, str, float, str, bool, float]]:
    """Every labelled decision of a mature day: (model, version, role, score, decision, fraud, amount
    lost), for curves."""
    with _opened(source) as log:
        return list(log.mature(today, maturity_days).execute(LABELLED).fetchall())


@dataclass(frozen=True)
class Costs:
    """What a missed fraud, a review and a false decline cost (`loss_share`: of the amount lost)."""

    loss_share: float = 1.0
    review_cost: float = 5.0
    decline_cost: float = 20.0


def costs(
    source: Path | Loaded,
    prices: Costs,
    steps: int = GRID,
    *,
    today: date | None = None,
    maturity_days: int = MATURITY_DAYS,
) -> list[dict[str, Any]]:
    """Per model, version and role, over mature days: the cost of its decisions as taken (`live_cost`)
    and the cost-optimal (review, decline) thresholds on a grid. A recommendation, never applied: a
    change goes through the admin-keyed, audited promote path."""
    params = {"steps": float(steps), "loss_share": prices.loss_share,
              "review_cost": prices.review_cost, "decline_cost": prices.decline_cost}  # fmt: skip
    with _opened(source) as log:
        cursor = log.mature(today, maturity_days).execute(COSTS, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@dataclass(frozen=True)
class Report:
    """The figures per (model, version, role, day), and the outcomes no decision matched."""

    rows: list[dict[str, Any]]
    outcomes: int  # events with an outcome (the latest of each)
    unmatched: int  # of those, matching no decision yet, within their window
    lapsed: int = 0  # matching no decision, their window ended (learned past the log's retention)


def build(
    source: Path | Loaded,
    *,
    today: date | None = None,
    maturity_days: int = MATURITY_DAYS,
    config: dict[str, Any] | None = None,
) -> Report:
    """The report over the log at `source` (a directory: `reader.mirror` copies a container to one; or
    the log already loaded); `config`: DuckDB's (a serving replica caps its threads and memory)."""
    with _opened(source, config) as log:
        con = log.con
        day = today or datetime.now(UTC).date()
        cursor = con.execute(FIGURES, {"mature_until": day - timedelta(days=maturity_days)})
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        (count,) = con.execute("SELECT count(*) FROM outcomes").fetchone() or (0,)
        window_start = datetime.combine(day - timedelta(days=RETENTION_DAYS), time(), UTC)
        unmatched, lapsed = con.execute(UNMATCHED, {"window_start": window_start}).fetchone() or (0, 0)
        return Report(rows, int(count), int(unmatched), int(lapsed))


class Loaded:
    """The log read once into DuckDB (its decisions and outcomes, each a table): every figure reads
    these, not the files again (`make outcomes` asks for four)."""

    def __init__(self, root: Path, config: dict[str, Any] | None = None) -> None:
        self.con = _connect(config)
        decisions = _glob(root, "model=*/version=*/date=*/hour=*/*.jsonl")
        outcomes = _glob(root, "outcomes/date=*/hour=*/*.jsonl")
        self.con.execute(DECISIONS.format(decisions=_literal(decisions)) if decisions else NO_DECISIONS)
        self.con.execute(OUTCOMES.format(outcomes=_literal(outcomes)) if outcomes else NO_OUTCOMES)
        self.con.execute(MATURE)

    def mature(self, today: date | None, maturity_days: int) -> Any:
        """The connection, its view `mature` holding the decisions of mature days only.

        NOTE: across days, an immature day's labels are the early ones only (customers' reports,
        reviews; chargebacks still to come): pooled with mature days they would bend calibration,
        costs and curves towards fraud. The per-day table shows them, marked IMMATURE."""
        until = (today or datetime.now(UTC).date()) - timedelta(days=maturity_days)
        self.con.execute("UPDATE horizon SET until = $until", {"until": until})
        return self.con

    def close(self) -> None:
        self.con.close()


@contextmanager
def _opened(source: Path | Loaded, config: dict[str, Any] | None = None) -> Iterator[Loaded]:
    """`source` itself when loaded already (its owner closes it), else the log at that path, closed after."""
    if isinstance(source, Loaded):
        yield source
        return
    log = Loaded(source, config)
    try:
        yield log
    finally:
        log.close()


def _connect(config: dict[str, Any] | None = None) -> Any:
    """A DuckDB connection, without its progress bar (the table is the output)."""
    import duckdb  # NOTE: here only: an analytical engine has no place on the Functions import path

    con = duckdb.connect(config=config or {})
    con.execute("SET enable_progress_bar = false")
    return con


def _glob(root: Path, pattern: str) -> str | None:
    """`root/pattern` when any file matches (DuckDB refuses a glob that matches nothing)."""
    return str(root / pattern) if any(root.glob(pattern)) else None


def _literal(text: str | None) -> str:
    return "'" + (text or "").replace("'", "''") + "'"


COLUMNS = (
    ("model", "model", "{}"), ("version", "ver", "{}"), ("role", "role", "{}"), ("day", "day", "{}"),
    ("decisions", "decisions", "{:,}"), ("awaiting", "awaiting", "{:.0%}"), ("fraud", "fraud", "{:,}"),
    ("caught", "caught", "{:,}"), ("missed", "missed", "{:,}"), ("missed_amount", "lost", "{:,.0f}"),
    ("false_declines", "false_decl", "{:,}"), ("precision", "precision", "{:.3f}"), ("recall", "recall", "{:.3f}"),
    ("review_rate", "reviews", "{:.1%}"), ("pr_auc", "pr_auc", "{:.3f}"), ("mature", "mature", "{}"),
)  # fmt: skip


def render(report: Report) -> str:
    """The report as a plain table (an immature day says so on its row: never read as good)."""
    head = [label for _, label, _ in COLUMNS]
    body = [[_cell(row[key], fmt) for key, _, fmt in COLUMNS] for row in report.rows]
    widths = [max(len(x) for x in column) for column in zip(head, *body, strict=True)]
    lines = ["  ".join(x.rjust(w) for x, w in zip(line, widths, strict=True)) for line in [head, *body]]
    lines.append(
        f"outcomes: {report.outcomes:,} events; unmatched (no decision found yet): {report.unmatched:,}; "
        f"lapsed (none found within the log's {RETENTION_DAYS}-day retention): {report.lapsed:,}"
    )
    return "\n".join(lines) + "\n"


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "IMMATURE"
    return fmt.format(value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shared.stores.prediction_log.report", description=__doc__.split("\n")[0]
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dir", type=Path, help="the log's directory (PREDICTION_LOG_DIR)")
    where.add_argument(
        "--blob", action="store_true", help="the log's container (PREDICTION_LOG_CONTAINER of ModelStorage)"
    )
    parser.add_argument("--maturity-days", type=int, default=MATURITY_DAYS, help="days before a day's labels count")
    parser.add_argument(
        "--loss-share", type=float, default=Costs.loss_share, help="a missed fraud's loss, of its amount"
    )
    parser.add_argument("--review-cost", type=float, default=Costs.review_cost, help="what a review costs")
    parser.add_argument("--decline-cost", type=float, default=Costs.decline_cost, help="what a false decline costs")
    parser.add_argument(
        "--png", type=Path, default=Path(".run/outcomes.png"), help="where the PR and cost curves go ('' for none)"
    )
    args = parser.parse_args(argv)
    if args.dir is not None:
        return _print(args.dir, args)
    import tempfile

    from shared.settings import Settings
    from shared.stores.prediction_log.reader import blob_container, mirror

    container = blob_container(Settings.from_env())
    with tempfile.TemporaryDirectory(prefix="outcomes-") as scratch:
        objects, size = mirror(container, Path(scratch))
        container.close()
        sys.stdout.write(f"read {objects:,} objects ({size:,} bytes) from the container {container.container_name}\n")
        return _print(Path(scratch), args)


def _print(root: Path, args: argparse.Namespace) -> int:
    with _opened(root) as log:
        return _print_loaded(log, args)


def _print_loaded(root: Loaded, args: argparse.Namespace) -> int:
    sys.stdout.write(render(build(root, maturity_days=args.maturity_days)))
    for key, group in groupby(
        calibration(root, maturity_days=args.maturity_days), lambda b: (b["model"], b["version"], b["role"])
    ):
        cells = " ".join(f"{b['mean_score']:.2f}->{b['fraud_rate']:.2f}" for b in group)
        sys.stdout.write(f"{key[0]}/{key[1]} ({key[2]}) reliability, mean score -> fraud rate per bin: {cells}\n")
    for row in costs(
        root, Costs(args.loss_share, args.review_cost, args.decline_cost), maturity_days=args.maturity_days
    ):
        sys.stdout.write(
            f"{row['model']}/{row['version']} ({row['role']}): {row['labelled']:,} labelled; cost as decided "
            f"{row['live_cost']:,.0f}; optimal review {row['optimal_review']:.2f}, decline {row['optimal_decline']:.2f}: "
            f"{row['optimal_cost']:,.0f} (a recommendation: thresholds change with a version, through the promote path)\n"
        )
    if str(args.png) not in ("", "."):
        from shared.stores.prediction_log.curves import write_png

        prices = Costs(args.loss_share, args.review_cost, args.decline_cost)
        sys.stdout.write(write_png(root, args.png, prices, maturity_days=args.maturity_days) + "\n")
    return 0


if __name__ == "__main__":
    # NOTE: through the module's own name: run as __main__, its classes would not be curves.py's
    from shared.stores.prediction_log.report import main as _main

    sys.exit(_main())
