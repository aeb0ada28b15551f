"""Tables (markdown) and plots (PNG) of simulated runs."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from bench.flashsale.fleet import Minute, Run
from bench.flashsale.infra import ScaleRules

__all__ = ["cost_table", "minutes_table", "plot", "rules_table", "summary_line", "summary_table", "target"]

RULE_FIELDS = (
    ("min_replicas", "minReplicas"),
    ("max_replicas", "maxReplicas"),
    ("http_concurrent_requests", "httpConcurrentRequests"),
    ("queue_messages_per_replica", "queueMessagesPerReplica"),
    ("cpu_utilization_pct", "cpuScaleUtilization"),
    ("polling_interval_s", "pollingInterval (s)"),
    ("cooldown_s", "cooldownPeriod (s)"),
)


def _ms(value: float) -> str:
    if value != value:  # NaN: nothing answered
        return "-"
    return f"{value / 1000:,.1f} s" if value >= 10_000 else f"{value:,.1f}"


def minutes_table(run: Run, every: int = 1) -> str:
    """One row per minute (or per `every` minutes): offered, p50/p99/p99.9, refused, replicas, queue."""
    rows = [
        "| minute | offered/s | p50 ms | p99 ms | p99.9 ms | refused | replicas ready | queue |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in run.minutes[::every]:
        rows.append(
            f"| {m.minute} | {m.offered:,.0f} | {_ms(m.p50_ms)} | {_ms(m.p99_ms)} | {_ms(m.p999_ms)} | "
            f"{m.refused_share:.1%} | {m.replicas_ready:.1f} | {m.queue_depth:,.0f} |"
        )
    return "\n".join(rows)


def _total_refused(minutes: list[Minute]) -> float:
    refused = sum(m.refused for m in minutes)
    total = refused + sum(m.answered for m in minutes)
    return refused / total if total else 0.0


def target(run: Run, p99_ms: float, queue_p99_ms: float) -> float:
    """The run's p99 target: `queue_p99_ms` (enqueue to published) on the queue path."""
    return queue_p99_ms if run.path == "servicebus" else p99_ms


def summary_line(run: Run, p99_ms: float, queue_p99_ms: float = 250.0) -> str:
    worst = run.worst()
    limit = target(run, p99_ms, queue_p99_ms)
    misses = sum(1 for m in run.minutes if m.p99_ms > limit or m.refused_share > 0.001)
    ready = [m.replicas_ready for m in run.minutes]
    return (
        f"| {run.scenario} | {run.path} | {_ms(worst.p99_ms)} (min {worst.minute}) | {_ms(worst.p999_ms)} | "
        f"{_total_refused(run.minutes):.2%} | {misses} of {len(run.minutes)} | "
        f"{min(ready):.0f}-{max(ready):.0f} | {max(m.queue_depth for m in run.minutes):,.0f} | {run.cycles(900)} |"
    )


def summary_table(runs: list[Run], p99_ms: float, queue_p99_ms: float = 250.0) -> str:
    head = [
        f"| scenario | path | worst minute's p99 ms | its p99.9 | refused (all) | minutes missing {p99_ms:g} ms "
        f"({queue_p99_ms:g} ms queued) or > 0.1 % refused | replicas ready | queue (max) | scale cycles |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    return "\n".join(head + [summary_line(r, p99_ms, queue_p99_ms) for r in runs])


def cost_table(runs: list[Run], node_hour_usd: float, replicas_per_node: int, p99_ms: float) -> str:
    """Replica-hours a day and what they cost, per fleet, from runs of one day (`sale_day`)."""
    rows = [
        "| fleet | path | replica-hours a day | vs the all-day floor | est. USD a day | USD per million events | holds |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    floors = {r.path: r.replica_hours for r in runs if r.fleet == "floor"}
    for run in runs:
        usd = run.replica_hours * node_hour_usd / replicas_per_node
        share = run.replica_hours / floors[run.path] if floors.get(run.path) else float("nan")
        holds = "yes" if run.holds(target(run, p99_ms, 250.0), 0.001 if run.path != "servicebus" else 1.0) else "**no**"
        rows.append(
            f"| {run.fleet} | {run.path} | {run.replica_hours:,.0f} | {share:.0%} | {usd:,.0f} | "
            f"{usd / (run.events / 1e6):.3f} | {holds} |"
        )
    return "\n".join(rows)


def rules_table(current: ScaleRules, recommended: ScaleRules) -> str:
    rows = ["| setting | infra/ today | sized by the simulation |", "|---|---:|---:|"]
    for name, label in RULE_FIELDS:
        now, then = getattr(current, name), getattr(recommended, name)
        mark = "" if now == then else " **(change)**"
        rows.append(f"| `{label}` | {now:g} | {then:g}{mark} |")
    return "\n".join(rows)


def plot(runs: dict[str, Run], p99_ms: float, out: Path, title: str) -> Path:
    """p99 per minute, the share refused per minute, and replicas ready with the offered rate, one line per run."""
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(10, 8.5), sharex=True)
    for label, run in runs.items():
        minutes = [m.minute + 0.5 for m in run.minutes]
        top.plot(minutes, [m.p99_ms for m in run.minutes], marker=".", label=label)
        middle.plot(minutes, [round(100 * m.refused_share, 6) for m in run.minutes], marker=".", label=label)
        bottom.plot([t / 60 for t in run.t], run.ready, label=f"{label}: replicas ready")
    top.axhline(p99_ms, color="red", linestyle="--", linewidth=1, label=f"target {p99_ms:g} ms")
    if any(run.path == "servicebus" for run in runs.values()):
        top.axhline(250.0, color="green", linestyle=":", linewidth=1, label="queue target 250 ms")
    top.set_yscale("log")
    top.yaxis.set_major_formatter(ScalarFormatter())
    top.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    top.yaxis.set_minor_formatter(NullFormatter())
    top.set_ylabel("p99 per minute (ms)")
    top.legend(fontsize=8)
    top.set_title(title)
    middle.set_ylabel("refused per minute (%)")
    first = next(iter(runs.values()))
    rate = bottom.twinx()
    rate.plot([t / 60 for t in first.t], first.rate, color="grey", linewidth=0.8, alpha=0.6)
    rate.set_ylabel("offered events/s (grey)")
    bottom.set_ylabel("replicas ready")
    bottom.set_xlabel("minute")
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out
