"""Two checkouts of the app side by side: what a change did to `/api/score`, in one run.

    git worktree add ../before <commit>
    .venv/bin/python -m bench.versus ../before [--rounds 5] [--seconds 5] [--env TELEMETRY=false ...]

Both servers are the app as `make run` serves it (uvicorn, one worker, the embedded
defaults: no Redis), one from `before` and one from this checkout, both on this checkout's venv.
wrk drives one at a time at 16 connections, in interleaved rounds (before, after, after, before,
...), for cache misses (unique rows) and cache hits. Per mode: medians of req/s, p50, p99 and
server CPU per request, and the median of the per-round after ÷ before ratios, the figure this
noisy 2-core machine can be trusted with.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path

from bench.run import ROOT, wrk
from bench.servers import CPU_APP_ENV, Server, cpu_s, start_app

FIGURES = ("rps", "p50_ms", "p99_ms", "cpu_us")


def rounds_parser(doc: str | None, *, rounds: int, seconds: float) -> argparse.ArgumentParser:
    """A benchmark's command line with the options of `interleaved`: --rounds, --seconds, --connections."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--connections", type=int, default=16)
    return parser


def interleaved(
    servers: Mapping[str, Server],
    rounds: int,
    seconds: float,
    connections: int,
    after_round: Callable[[], None] | None = None,
) -> dict[tuple[str, str], list[dict[str, float]]]:
    """wrk on each server in turn, misses then hits, the order reversed every other round (a warm-up
    run first): each run's figures and the server's CPU per request, by (mode, server name)."""
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for mode in ("miss", "hit"):
        for server in servers.values():  # warm-up: models, caches, first-call imports
            wrk(server.port, 2, connections, mode)
        for r in range(rounds):
            for name in list(servers) if r % 2 == 0 else list(servers)[::-1]:
                server = servers[name]
                cpu = cpu_s(server.process.pid)
                run = wrk(server.port, seconds, connections, mode)
                run["cpu_us"] = (cpu_s(server.process.pid) - cpu) / max(run["requests"], 1) * 1e6
                results.setdefault((mode, name), []).append(run)
            if after_round is not None:
                after_round()
    return results


def main() -> None:
    parser = rounds_parser(__doc__, rounds=5, seconds=5.0)
    parser.add_argument("before", type=Path, help="the other checkout (a git worktree of the commit to compare)")
    parser.add_argument("--env", action="append", default=[], help="NAME=value for both servers (repeatable)")
    args = parser.parse_args()
    env = {**CPU_APP_ENV, "PREDICTION_LOG": "off"} | dict(item.split("=", 1) for item in args.env)
    trees = {"before": args.before.resolve(), "after": ROOT}
    servers = {name: start_app(f"versus-{name}", env, cwd=tree) for name, tree in trees.items()}
    try:
        results = interleaved(servers, args.rounds, args.seconds, args.connections)
    finally:
        for server in servers.values():
            server.stop()
    print(f"/api/score, before = {args.before}, after = {ROOT}; {args.connections} connections,")
    print(f"{args.rounds} interleaved rounds of {args.seconds:.0f} s; env {env}")
    print("| path | figure | before (median) | after (median) | after ÷ before (median of rounds) |")
    print("|---|---|---:|---:|---:|")
    for mode in ("miss", "hit"):
        before, after = results[(mode, "before")], results[(mode, "after")]
        for figure in FIGURES:
            ratio = statistics.median(a[figure] / b[figure] for a, b in zip(after, before, strict=True) if b[figure])
            print(
                f"| {mode} | {figure} | {statistics.median(b[figure] for b in before):,.2f} | "
                f"{statistics.median(a[figure] for a in after):,.2f} | {ratio:.3f} |"
            )
        errors = sum(r["errors"] for r in before + after)
        if errors:
            print(f"| {mode} | errors | | | {errors:.0f} |")


if __name__ == "__main__":
    main()
